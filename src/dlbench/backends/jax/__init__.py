"""The JAX/Flax backend. Importing its modules imports jax: worker side only.

XLA's GPU client preallocates 75% of every visible GPU at start-up unless told otherwise: the peak a point
records and the largest batch that fits would then be capped by the preallocation, not by the model. The
variable is read when jax starts its GPU client, so it is set here, before any module of this package imports
jax (a value the user set, or XLA_PYTHON_CLIENT_MEM_FRACTION, is kept and recorded in the point's facts).
"""

import os

PREALLOCATE_VAR = "XLA_PYTHON_CLIENT_PREALLOCATE"
if "XLA_PYTHON_CLIENT_MEM_FRACTION" not in os.environ:
    os.environ.setdefault(PREALLOCATE_VAR, "false")
