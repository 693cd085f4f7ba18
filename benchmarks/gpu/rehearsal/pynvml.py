"""The rehearsal's GPU: `import pynvml` in every dlbench process of `validate.sh --rehearse` (this folder is first
on PYTHONPATH) gives NVML's names over one fake GPU (tests/support/fake_pynvml.py), described by $DLBENCH_FAKE_GPU:
"NAME;MEMORY_GIB;MAJOR.MINOR" (default "NVIDIA H100 80GB HBM3;80;9.0"). Only the rehearsal puts it on the path."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parents[2]


def _real_pynvml() -> object:
    """The installed pynvml (its exception classes and constants), imported with this folder off the path."""
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
    mine = sys.modules.pop("pynvml")
    try:
        return importlib.import_module("pynvml")
    finally:
        sys.path[:] = saved
        sys.modules["pynvml"] = mine


def _gpu() -> object:
    """The fake GPU $DLBENCH_FAKE_GPU describes."""
    name, gib, cap = (os.environ.get("DLBENCH_FAKE_GPU") or "NVIDIA H100 80GB HBM3;80;9.0").split(";")
    major, minor = cap.split(".")
    return FakeGpu(
        uuid="GPU-rehearsal-0",
        name=name,
        total=int(float(gib) * (1 << 30)),
        compute_capability=(int(major), int(minor)),
    )


real = _real_pynvml()
sys.modules["pynvml"] = real  # fake_pynvml imports the real module for its exception classes
sys.path.insert(0, str(_REPO / "tests" / "support"))
from fake_pynvml import FakeGpu, fake_module  # noqa: E402

_fake = fake_module([_gpu()])
sys.modules["pynvml"] = _fake
globals().update({k: getattr(_fake, k) for k in dir(_fake) if k.startswith("nvml") or k.startswith("NVML")})
