"""The MegEngine backend. Its modules (all but tf32.py) import megengine: worker side only.

dlbench's MegEngine backend trains in IEEE FP32 only, and MegEngine has no switch of its own for TF32: its
cuDNN convolutions keep cuDNN's default math, which runs FP32 as TF32 on Ampere and later GPUs. So this package
sets ``NVIDIA_TF32_OVERRIDE=0`` before megengine loads (cuBLAS and cuDNN read it when they load and then never
use TF32); the backend reads it back into ``math_mode`` and its facts, and refuses a GPU point where it is not
in force (tf32.py).
"""

import os

import psutil

from dlbench.backends.megengine.tf32 import TF32_OVERRIDE_VAR

os.environ[TF32_OVERRIDE_VAR] = "0"


def cpu_device(threads: int | None) -> str:
    """MegEngine's CPU device for `threads` (default: the physical cores, as torch takes them): multithreadN:0, or
    cpu0 for one (its plain cpu0 runs kernels on one thread). The trainer's and the evaluator's (evaluate.py)."""
    n = threads or psutil.cpu_count(logical=False) or os.cpu_count() or 1
    return f"multithread{n}:0" if n > 1 else "cpu0"
