"""The backend registry. Light on purpose: the controller reads it without importing any framework.

A third party adds a framework with an entry point in the group ``dlbench.backends`` that names a
``BackendInfo`` object (a light module, which must not import the framework).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the registry stays light: base.py is imported by the worker only
    from dlbench.backends.base import Backend

from dlbench.capabilities import Capabilities


@dataclass(frozen=True)
class BackendInfo:
    """What the controller knows about a framework backend without importing it."""

    name: str
    title: str
    import_name: str
    distribution: str
    entry: str
    extra: str
    unavailable: str | None = None
    engine: str = "local"  # the launcher a multi-device point of this framework uses by default
    # Environments. The pins live in pyproject.toml's extras, named here; this is the one place that says which
    # CPython minor versions those pinned wheels exist for (oldest, newest), and which extra is the GPU build.
    python: tuple[str, str] = ("3.10", "3.14")
    cuda_extra: str = ""  # the extra installing the GPU (CUDA) build; "" = dlbench knows none
    cuda_index: str = ""  # the package index the GPU build needs where PyPI lacks it ("" = PyPI has it)
    # "module:attr" of its framework-free Capabilities table (dlbench.capabilities); "" = none declared, the
    # worker alone decides what it can run. Built-ins: dlbench.capabilities.<name>:CAPABILITIES.
    capabilities: str = ""
    # "module:attr" of its canonical weight map (a backends.same_model.WeightMap, worker side: it imports the
    # framework), which `dlbench check same-model` loads the canonical weights through; "" = none yet.
    weight_map: str = ""
    # The distributions one release of the framework pins together (`dlbench setup jax==0.10.1` installs jax and
    # jaxlib 0.10.1); () = its distribution alone.
    release_pins: tuple[str, ...] = ()

    @property
    def release_packages(self) -> tuple[str, ...]:
        """The distributions a release pins (jax and jaxlib for JAX; tensorflow-cpu or tensorflow for TF)."""
        return self.release_pins or (self.distribution,)

    def capabilities_table(self) -> Capabilities | None:
        """What this backend can run (strategies, layouts, precisions, devices), read without any framework."""
        if not self.capabilities:
            return None
        module, _, attr = self.capabilities.partition(":")
        table = getattr(importlib.import_module(module), attr)
        return table if isinstance(table, Capabilities) else None

    def installed_version(self) -> str | None:
        """The framework's installed version in *this* interpreter, or None (never imports it)."""
        if self.unavailable:
            return None
        if importlib.util.find_spec(self.import_name) is None:
            return None
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            pass
        # The same import may come from another distribution (tensorflow-cpu here, tensorflow on GPU machines).
        for dist in importlib.metadata.packages_distributions().get(self.import_name, []):
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
        if self.distribution == "dlbench":  # dlbench's own test double, run from a source tree (not installed)
            from dlbench import __version__

            return __version__
        return None


class UnknownFramework(KeyError):
    """No backend of that name."""

    def __str__(self) -> str:
        return f"unknown framework {self.args[0]!r}; known: {', '.join(all_backends())}"


_BUILTIN: tuple[BackendInfo, ...] = (
    # PyPI's Linux torch wheels are CUDA builds, so the GPU build is the same extra (here /opt/wheels' +cpu wins).
    BackendInfo(
        "torch",
        "PyTorch",
        "torch",
        "torch",
        "dlbench.backends.torch.backend:TorchBackend",
        "torch",
        weight_map="dlbench.backends.torch.same_model:WEIGHTS",
        engine="torchrun",
        python=("3.10", "3.14"),
        cuda_extra="torch",
    ),
    BackendInfo(
        "paddle",
        "PaddlePaddle",
        "paddle",
        "paddlepaddle",
        "dlbench.backends.paddle.backend:PaddleBackend",
        "paddle",
        weight_map="dlbench.backends.paddle.same_model:WEIGHTS",
        python=("3.9", "3.13"),
        cuda_extra="paddle-cuda",
        release_pins=("paddlepaddle", "paddlepaddle-gpu"),
        cuda_index="https://www.paddlepaddle.org.cn/packages/stable/cu126/",
    ),
    BackendInfo(
        "tf",
        "TensorFlow/Keras",
        "tensorflow",
        "tensorflow-cpu",
        "dlbench.backends.tf.backend:TfBackend",
        "tf",
        weight_map="dlbench.backends.tf.same_model:WEIGHTS",
        python=("3.10", "3.13"),
        cuda_extra="tf-cuda",
        release_pins=("tensorflow-cpu", "tensorflow"),
    ),
    BackendInfo(
        "mxnet",
        "MXNet",
        "mxnet",
        "mxnet",
        "dlbench.backends.mxnet.backend:MxnetBackend",
        "mxnet",
        weight_map="dlbench.backends.mxnet.same_model:WEIGHTS",
        python=("3.7", "3.11"),
    ),  # numpy < 1.24 has no wheel for 3.12
    BackendInfo(
        "jax",
        "JAX/Flax",
        "jax",
        "jax",
        "dlbench.backends.jax.backend:JaxBackend",
        "jax",
        weight_map="dlbench.backends.jax.same_model:WEIGHTS",
        python=("3.11", "3.14"),
        cuda_extra="jax-cuda",
        release_pins=("jax", "jaxlib"),
    ),
    # Keras 3 on its three backends (#46): one folder (backends/keras), one environment per backend.
    *(
        BackendInfo(
            f"keras_{short}",
            f"Keras 3 on {title}",
            "keras",
            "keras",
            f"dlbench.backends.keras.backend:{cls}",
            f"keras-{short}",
            python=python,
            capabilities=f"dlbench.capabilities.keras:{short.upper()}",
        )
        for short, title, cls, python in (
            ("jax", "JAX", "KerasJaxBackend", ("3.11", "3.14")),
            ("tf", "TensorFlow", "KerasTfBackend", ("3.10", "3.13")),
            ("torch", "PyTorch", "KerasTorchBackend", ("3.10", "3.14")),
        )
    ),
    BackendInfo(
        "mindspore",
        "MindSpore",
        "mindspore",
        "mindspore",
        "dlbench.backends.mindspore.backend:MindsporeBackend",
        "mindspore",
        weight_map="dlbench.backends.mindspore.same_model:WEIGHTS",
        python=("3.9", "3.12"),
    ),
    BackendInfo(
        "jittor",
        "Jittor",
        "jittor",
        "jittor",
        "dlbench.backends.jittor.backend:JittorBackend",
        "jittor",
        weight_map="dlbench.backends.jittor.same_model:WEIGHTS",
        python=("3.7", "3.12"),
    ),  # it pins numpy < 2: no wheel for 3.13
    BackendInfo(
        "oneflow",
        "OneFlow",
        "oneflow",
        "oneflow",
        "dlbench.backends.oneflow.backend:OneflowBackend",
        "oneflow",
        weight_map="dlbench.backends.oneflow.same_model:WEIGHTS",
        python=("3.8", "3.10"),
    ),
    BackendInfo(
        "megengine",
        "MegEngine",
        "megengine",
        "megengine",
        "dlbench.backends.megengine.backend:MegengineBackend",
        "megengine",
        weight_map="dlbench.backends.megengine.same_model:WEIGHTS",
        python=("3.8", "3.10"),
    ),
)
_TEST_ONLY: tuple[BackendInfo, ...] = (
    BackendInfo("fake", "fake (test double)", "dlbench", "dlbench", "dlbench.backends.fake:FakeBackend", ""),
)


def _with_table(infos: tuple[BackendInfo, ...]) -> tuple[BackendInfo, ...]:
    """Built-in backends with their capability tables: dlbench.capabilities.<name>."""
    return tuple(
        dataclasses.replace(b, capabilities=b.capabilities or f"dlbench.capabilities.{b.name}:CAPABILITIES")
        for b in infos
    )


_BUILTIN, _TEST_ONLY = _with_table(_BUILTIN), _with_table(_TEST_ONLY)


@functools.cache
def _registered() -> tuple[BackendInfo, ...]:
    """The backends third-party packages register through entry points, read once per process: scanning every
    installed distribution's metadata takes about 10 ms, and refusing a 1,260-point suite asks once per point."""
    return tuple(
        info
        for ep in importlib.metadata.entry_points(group="dlbench.backends")
        if isinstance(info := ep.load(), BackendInfo)
    )


def all_backends(include_test: bool = False) -> dict[str, BackendInfo]:
    """Built-in backends, then those registered through entry points; the fake one only on request."""
    found = {b.name: b for b in _BUILTIN}
    for info in _registered():
        found.setdefault(info.name, info)
    if include_test:
        found.update({b.name: b for b in _TEST_ONLY})
    return found


def get_info(name: str) -> BackendInfo:
    """The BackendInfo registered under name (the fake backend included)."""
    backends = all_backends(include_test=True)
    if name not in backends:
        raise UnknownFramework(name)
    return backends[name]


def load_backend(name: str) -> Backend:
    """Import and instantiate a backend. Worker side only: this imports the framework."""
    module, _, attr = get_info(name).entry.partition(":")
    cls: type[Backend] = getattr(importlib.import_module(module), attr)
    return cls()


# The GPU story: which framework has a build that runs on a Hopper (sm_90) or Blackwell (sm_100) GPU, and where
# to get it. Told before a run (`dlbench setup --cuda`, `dlbench list`), so that a GPU user does not learn it from nine
# refusals. Framework-free: what each framework's published wheels were built for, as of their newest releases
# (the backend's `gpu_build` checks the installed one at run time: backends/gpu_arch).
#
# | framework | Hopper | Blackwell | where |
# |---|---|---|---|
# | torch | yes | yes | PyPI's CUDA wheels (cu126 and newer carry sm_90; cu128 and newer sm_100) |
# | jax | yes | yes | PyPI: the `jax-cuda` extra (jax[cuda13], with flax and optax) |
# | tf | PTX | no | PyPI `tensorflow[and-cuda]`: SASS to sm_89 and compute_90 PTX, JIT-compiled once on Hopper |
# | paddle | yes | ? | not on PyPI: PaddlePaddle's own index (cu126: sm_90; a Blackwell build not checked) |
# | mxnet, oneflow, mindspore | no | no | CUDA 11 builds (no sm_90): MXNet only in NVIDIA's old NGC container |
# | megengine | no | no | CUDA 11 wheels, for Python <= 3.10 only |
# | jittor | ? | ? | compiles its kernels at first import with the machine's CUDA toolkit: untested here |


@dataclass(frozen=True)
class GpuBuilds:
    """One framework's GPU builds: whether one runs on Hopper / Blackwell ("yes", "PTX" = JIT-compiled, "no",
    "?" = unknown), whether PyPI has it, and what to do."""

    hopper: str
    blackwell: str
    on_pypi: bool
    how: str


BUILDS: dict[str, GpuBuilds] = {
    "torch": GpuBuilds("yes", "yes", True, "PyPI's CUDA wheels: dlbench setup --cuda torch"),
    "jax": GpuBuilds("yes", "yes", True, "PyPI: dlbench setup --cuda jax (extra jax-cuda: jax[cuda13], flax, optax)"),
    "tf": GpuBuilds(
        "PTX",
        "no",
        True,
        "PyPI tensorflow[and-cuda]: on Hopper its compute_90 PTX is JIT-compiled "
        "once (recorded as ptx_jit); no Blackwell kernels yet",
    ),
    "paddle": GpuBuilds(
        "yes",
        "?",
        False,
        "not on PyPI: dlbench setup --cuda paddle --index-url "
        "https://www.paddlepaddle.org.cn/packages/stable/cu126/ (sm_90; a "
        "Blackwell build is not checked here)",
    ),
    **{
        f"keras_{short}": GpuBuilds(
            "?", "?", True, f"not wired: keras_{short} trains on the CPU only for now (Keras on {title}'s GPU build)"
        )
        for short, title in (("jax", "JAX"), ("tf", "TensorFlow"), ("torch", "PyTorch"))
    },
    "mxnet": GpuBuilds(
        "no",
        "no",
        False,
        "newest GPU wheel mxnet-cu117 (CUDA 11.7, no sm_90): only NVIDIA's old "
        "NGC MXNet container; register its Python with dlbench setup --existing",
    ),
    "oneflow": GpuBuilds("no", "no", False, "its GPU wheels need CUDA 11 (no sm_90 kernels): none runs on Hopper"),
    "mindspore": GpuBuilds("no", "no", False, "its GPU wheels need CUDA 11 (no sm_90 kernels): none runs on Hopper"),
    "megengine": GpuBuilds("no", "no", False, "MegEngine's wheels: CUDA 11, Python <= 3.10 only; none runs on Hopper"),
    "jittor": GpuBuilds(
        "?",
        "?",
        True,
        "compiles its kernels at first import with the machine's CUDA toolkit (nvcc); not yet run on a Hopper GPU",
    ),
}


def gpu_builds(framework: str) -> GpuBuilds | None:
    """What dlbench knows of the framework's GPU builds; None for a framework it knows nothing of (a plugin)."""
    return BUILDS.get(framework)


def advice(framework: str) -> str:
    """One line: whether a build of the framework runs on Hopper and Blackwell GPUs, and what to do."""
    b = gpu_builds(framework)
    if b is None:
        return f"{framework}: dlbench knows nothing of its GPU builds"
    return f"{framework}: Hopper {b.hopper}, Blackwell {b.blackwell}; {b.how}"


def comparable(generation: str) -> list[str]:
    """The frameworks with a build that runs on a GPU generation ("hopper" or "blackwell"), PTX JIT included."""
    return [fw for fw, b in BUILDS.items() if getattr(b, generation) in ("yes", "PTX")]
