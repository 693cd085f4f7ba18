"""The Jittor backend. Its modules import jittor: worker side only.

Jittor reads these settings from the environment when it is first imported, so they are set here, before
any module of this package imports it (a value the user exported wins):
``use_mkl=0`` stops its run-time download of an MKL archive (no internet on many benchmark machines),
``nvcc_path=""`` stops it looking for a CUDA toolkit it may not find, and ``use_mpi=0`` stops it compiling
its MPI ops wherever an ``mpicc`` is on PATH (this backend trains in one process; with mpicc but no mpi.h
the first import fails).

On a GPU this backend trains in IEEE FP32 only: Jittor's ``use_tensorcore`` flag (0 by default, set and read
back by the backend) keeps cuBLAS at CUBLAS_COMPUTE_32F, but its cuDNN convolutions keep cuDNN's default math,
which allows TF32 on Ampere and later; ``NVIDIA_TF32_OVERRIDE=0``, read by cuBLAS and cuDNN when they load,
turns that off.
"""

import os

os.environ.setdefault("use_mkl", "0")
os.environ.setdefault("nvcc_path", "")
os.environ.setdefault("use_mpi", "0")
TF32_OVERRIDE_VAR = "NVIDIA_TF32_OVERRIDE"
os.environ[TF32_OVERRIDE_VAR] = "0"
