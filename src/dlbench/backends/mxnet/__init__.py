"""The MXNet (Gluon) backend. Importing its modules imports mxnet: worker side only.

dlbench's MXNet backend trains in IEEE FP32 on GPUs (it refuses tf32 and amp there), so this package turns
MXNet's tensor-core use off before mxnet loads: ``MXNET_CUDA_ALLOW_TENSOR_CORE=0`` (read once, on the first
cuBLAS/cuDNN call; with it, MXNet 1.9 asks for FMA math, not TF32) and ``NVIDIA_TF32_OVERRIDE=0`` (cuBLAS and
cuDNN themselves then never use TF32). The backend reads both back into ``math_mode`` and its facts.
"""

import os

TENSOR_CORE_VAR = "MXNET_CUDA_ALLOW_TENSOR_CORE"
TF32_OVERRIDE_VAR = "NVIDIA_TF32_OVERRIDE"

os.environ[TENSOR_CORE_VAR] = "0"
os.environ[TF32_OVERRIDE_VAR] = "0"
