"""The MegEngine backend. Its modules (all but tf32.py) import megengine: worker side only.

dlbench's MegEngine backend trains in IEEE FP32 only, and MegEngine has no switch of its own for TF32: its
cuDNN convolutions keep cuDNN's default math, which runs FP32 as TF32 on Ampere and later GPUs. So this package
sets ``NVIDIA_TF32_OVERRIDE=0`` before megengine loads (cuBLAS and cuDNN read it when they load and then never
use TF32); the backend reads it back into ``math_mode`` and its facts, and refuses a GPU point where it is not
in force (tf32.py).
"""

import os

from dlbench.backends.megengine.tf32 import TF32_OVERRIDE_VAR

os.environ[TF32_OVERRIDE_VAR] = "0"
