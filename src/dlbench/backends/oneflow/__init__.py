"""The OneFlow backend. Importing its modules imports oneflow: worker side only.

dlbench's OneFlow backend trains in IEEE FP32 (it refuses tf32, amp and bf16), so this package turns OneFlow's
TF32 execution on CUDA devices off before oneflow loads (``ONEFLOW_EP_CUDA_ENABLE_TF32_EXECUTION=0``; OneFlow
enables it by default on Ampere and later). The backend reads it back into its facts.
"""

import os

TF32_VAR = "ONEFLOW_EP_CUDA_ENABLE_TF32_EXECUTION"

os.environ[TF32_VAR] = "0"
