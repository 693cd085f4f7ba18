"""The JAX/Flax backend. Importing its modules imports jax: worker side only.

XLA's GPU client reads two variables when it starts, so they are set here, before any module of this package
imports jax (`gpu_memory_env`):

- ``XLA_PYTHON_CLIENT_PREALLOCATE=false``: else XLA reserves 75% of every visible GPU at start-up, and the peak a
  point records and the largest batch that fits would be the preallocation's, not the model's.
- ``XLA_CLIENT_MEM_FRACTION=0.95``: without preallocation XLA's allocator still stops at a fraction of the GPU's
  memory, 75% by default, so JAX would run out of memory at three quarters of the card (about 60 GB of an H100's
  80) where torch goes on. 5% stays for cuDNN, cuBLAS and NCCL workspaces outside XLA's allocator. That is the
  variable's current name (XLA, openxla/xla#16457; jaxlib 0.4.32 and later, so every jax dlbench installs);
  jaxlib still reads the deprecated ``XLA_PYTHON_CLIENT_MEM_FRACTION`` and refuses the two set together
  (ValueError), so dlbench sets its own only when the user set neither.

A value the user set is kept; what ran is recorded in the point's facts.
"""

import os
from collections.abc import MutableMapping

PREALLOCATE_VAR = "XLA_PYTHON_CLIENT_PREALLOCATE"
MEM_FRACTION_VAR = "XLA_CLIENT_MEM_FRACTION"
OLD_MEM_FRACTION_VAR = "XLA_PYTHON_CLIENT_MEM_FRACTION"  # deprecated; never set together with the new name
MEM_FRACTION = "0.95"


def gpu_memory_env(environ: MutableMapping[str, str]) -> None:
    """No preallocation and a 0.95 memory fraction, unless the user chose a fraction (then preallocation stays as
    they set it too, since a fraction is what XLA preallocates)."""
    if MEM_FRACTION_VAR in environ or OLD_MEM_FRACTION_VAR in environ:
        return
    environ.setdefault(PREALLOCATE_VAR, "false")
    environ[MEM_FRACTION_VAR] = MEM_FRACTION


def memory_fraction_fact(environ: MutableMapping[str, str]) -> str:
    """The fraction XLA's GPU allocator may use and the variable it came from, e.g. '0.95 (XLA_CLIENT_MEM_FRACTION)'."""
    for name in (MEM_FRACTION_VAR, OLD_MEM_FRACTION_VAR):
        if name in environ:
            return f"{environ[name]} ({name})"
    return "0.75 (XLA's default)"


gpu_memory_env(os.environ)
