"""The interface every framework backend implements. Worker side: implementations import their framework.

A backend builds a `Trainer` for a case. The protocol drives it: ``batch = trainer.next_batch()`` (timed as
input wait), ``trainer.train_step(batch)`` (may return before the device is done), and ``trainer.sync()`` at the
ends of each timed window. Synthetic data is one fixed batch repeated (`fixed`); real data is the framework's
own loader, as an iterator.
"""

from __future__ import annotations

import itertools
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench.backends.gpu_arch import GpuBuild
from dlbench.cases import Case
from dlbench.protocol.runner import StepTimer
from dlbench.spec import PointSpec
from dlbench.wire import RankContext


class Unsupported(Exception):
    """Raised by `Backend.build` when a check that needs the framework's runtime finds the point cannot run as
    asked; recorded as `unsupported` with the message, never as an error."""


@dataclass(frozen=True)
class AllocatorPeak:
    """The framework's own allocator peak and its kind (``torch_max_allocated``, ``jax_peak_bytes_in_use`` ...)."""

    bytes: int
    kind: str


def fixed(batch: Any) -> Iterator[Any]:
    """Synthetic input: the same batch, made once on the device, at every step (as tf_cnn_benchmarks does)."""
    return itertools.repeat(batch)


class LossWindow:
    """A convergence curve's window of step losses (protocol/converge.py), summed where the framework keeps them:
    one device add a step, one host read a window (a trainer's `loss_window`)."""

    def __init__(self) -> None:
        self.total: Any = None
        self.steps = 0

    def add(self, loss: Any) -> None:
        """Add one step's loss (a device tensor: the sum stays on the device)."""
        self.total = loss if self.total is None else self.total + loss
        self.steps += 1

    def mean(self, read: Callable[[Any], float], otherwise: Callable[[], float]) -> float:
        """The window's mean loss, its sum read to the host once by `read`, and a new window; `otherwise()` where
        no step was added."""
        if self.total is None:
            return otherwise()
        mean = read(self.total) / self.steps
        self.total, self.steps = None, 0
        return mean


class Trainer(ABC):
    """A model, its optimizer and its input, ready to take train steps."""

    keep_loss_window = False  # set while a convergence curve is read (worker): a trainer then sums its loss

    def __init__(self, batches: Iterator[Any]) -> None:
        self.batches = batches

    def next_batch(self) -> Any:
        """The next input batch (the protocol times this call as input wait)."""
        return next(self.batches)

    @abstractmethod
    def train_step(self, batch: Any) -> None:
        """One train step on a batch: forward, loss, backward, optimizer update. May return before the device
        has finished."""

    @abstractmethod
    def sync(self) -> None:
        """Block until every queued device operation has finished."""

    @abstractmethod
    def loss(self) -> float:
        """The last step's loss as a Python float."""

    def loss_window(self) -> float:
        """The mean loss of the steps since the last call, read from the device once (a convergence curve's
        reading, protocol/converge.py). This default reads the last step's loss; a trainer that accumulates its
        loss on the device overrides it, so that a curve costs one host read per window, not one per step."""
        return self.loss()

    def held_out_auc(self) -> float:
        """The AUC of the model's scores on the learnable source's held-out set (a convergence curve of a case
        judged by AUC, DLRM's); a trainer of such a case overrides it."""
        raise NotImplementedError(f"{type(self).__name__} scores no held-out set")

    def allocator_peak(self) -> AllocatorPeak | None:
        """The framework allocator's peak on the device, where it keeps one (None on the CPU)."""
        return None

    def step_timer(self) -> StepTimer | None:
        """Device events timing each step, where the framework has them (None: not offered)."""
        return None

    def agree_steps(self, steps: int) -> int:
        """The measured steps per repeat every rank takes: rank 0's `steps`, which the other ranks adopt through
        the framework's own collective (their collectives pair up step by step). This default serves one rank; a
        trainer that trains on several overrides it, else several ranks are not calibrated (`agrees_steps`)."""
        return steps

    @property
    def agrees_steps(self) -> bool:
        """Whether this trainer's ranks can agree on a step count (it overrides `agree_steps`)."""
        return type(self).agree_steps is not Trainer.agree_steps

    def param_checksum(self) -> float | None:
        """A number that differs when the parameters differ, compared across ranks after the timed steps;
        None when this trainer cannot tell (a multi-rank point then fails its check)."""
        return None

    def replica_checksums(self) -> list[float] | None:
        """One param_checksum per copy of the parameters a single process keeps for its devices (TF's variable
        managers, MXNet's contexts); one value where the strategy keeps one copy (a parameter server). None when
        this trainer cannot tell (a one-process point on several devices then fails its check)."""
        return None

    def save_weights(self, folder: Path) -> None:
        """Save the model's weights into `folder` in the framework's own format, for the independent evaluation of
        a convergence point (dlbench/evaluate.py; the backend's `evaluator` reads them). A trainer that cannot
        raises NotImplementedError with the reason, which the verdict shows."""
        raise NotImplementedError(f"{type(self).__name__} cannot save its weights for an evaluation yet")

    def close(self) -> None:
        """Release the input (loader workers) and other resources."""
        close = getattr(self.batches, "close", None)
        if close is not None:
            close()


def strategy_run(spec: PointSpec, default: str) -> str:
    """The gradient strategy a point runs: 'none' on one device; on several the spec's, 'none' meaning the
    framework's default (torch ddp, jax sharding, paddle fleet ...)."""
    if spec.world_size == 1:
        return "none"
    return default if spec.strategy == "none" else spec.strategy


def gpu_binding_problem(ctx: RankContext, visible: int) -> str | None:
    """Why this rank's node cannot give each of its ranks a GPU of its own, or None.

    Enough GPUs visible: rank i takes GPU i. One visible GPU per rank, bound per task by Slurm (--gpus-per-task:
    SLURM_STEP_GPUS or SLURM_LOCALID is set): each takes its own. Otherwise every rank dlbench starts on a node has
    the controller's CUDA_VISIBLE_DEVICES, so fewer visible GPUs than ranks means ranks sharing a GPU, which NCCL
    refuses ("Duplicate GPU detected"): refused here, in one line.
    """
    if ctx.local_world_size <= 1 or visible >= ctx.local_world_size:
        return None
    slurm = os.environ.get("SLURM_STEP_GPUS") or os.environ.get("SLURM_LOCALID")
    if visible == 1 and slurm:
        return None  # bound: Slurm gave each rank its own GPU
    shown = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = f" (CUDA_VISIBLE_DEVICES={shown}, the same for every rank started here)" if shown is not None else ""
    return (
        f"{ctx.local_world_size} ranks on this node but it has {visible} visible GPU(s){seen}: use fewer devices per "
        "node, or bind one GPU per rank (Slurm --gpus-per-task=1)"
    )


# Out-of-memory failures that CUDA's libraries report in their own words, not as the framework's OOM error: a
# cuDNN, cuBLAS, cuSOLVER or cuFFT handle or workspace that could not be allocated, NCCL's CUDA calls failing
# with 'out of memory' (torch's DistBackendError, XLA's INTERNAL status), the CUDA runtime's and driver's names
# for it. Near the memory limit a max-batch probe reaches, this is what running out of memory looks like.
LIBRARY_OOM = re.compile(
    r"CUDNN_STATUS_ALLOC_FAILED|CUBLAS_STATUS_ALLOC_FAILED|CUSOLVER_STATUS_ALLOC_FAILED|"
    r"CUSPARSE_STATUS_ALLOC_FAILED|CUFFT_ALLOC_FAILED|cudaErrorMemoryAllocation|"
    r"CUDA_ERROR_OUT_OF_MEMORY|CUDA error: out of memory|Cuda failure( \d+)? 'out of memory'",
    re.IGNORECASE,
)


def library_oom(exc: BaseException) -> bool:
    """Whether an exception's message is a CUDA library's out-of-memory failure (LIBRARY_OOM)."""
    return LIBRARY_OOM.search(str(exc)) is not None


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, then its causes and contexts (an OOM inside compilation is often wrapped)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


class Backend(ABC):
    """How one framework builds a case's model, its data and one train step."""

    name: str = ""
    title: str = ""

    def __init__(self) -> None:
        self._facts: dict[str, object] = {}  # what build chose, for facts()

    def autotune_off(self) -> bool:
        """Turn the framework's convolution autotuning off for the next build (the cuDNN retry,
        backends/cudnn_fallback); False where this backend cannot."""
        return False

    def memory_used_share(self) -> float | None:
        """The used share of the current device's memory (0..1), or None where unknown."""
        return None

    def evaluator(self, spec: PointSpec, case: Case, weights: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """The independent evaluation's forward (dlbench/evaluate.py, a fresh process): the case's model built anew
        from its definition, the weights a trainer saved (`Trainer.save_weights`) loaded, in inference mode; it maps
        a held-out numpy batch (images NCHW) to numpy outputs: `logits` (a classifier, a causal LM), `mlm` and `nsp`
        (BERT, at the batch's masked positions), `logit` (Wide & Deep). Nothing of the training step is used."""
        raise NotImplementedError(f"dlbench's {self.title or self.name} backend has no evaluator yet")

    @abstractmethod
    def cases(self) -> Collection[str]:
        """The case names this backend builds (its model table's keys)."""

    @abstractmethod
    def environment(self, spec: PointSpec) -> dict[str, str]:
        """Facts only the framework knows: framework_version, device_model, cuda, cudnn, nccl, math_mode ...
        Reads only (no side effect): the worker calls it after build, so it reports what build configured."""

    def case_support(self, case: Case) -> str | None:
        """A one-line reason when this framework cannot build the case exactly, else None: its capability table's
        where that refuses the case's family (`Capabilities.refused_archs`)."""
        from dlbench.backends import UnknownFramework, get_info  # the light registry (base.py is the worker's)

        try:
            table = get_info(self.name).capabilities_table()
        except UnknownFramework:  # a backend built outside the registry (a test's)
            table = None
        why = table.arch_refusal(case.arch) if table is not None else None
        if why:
            return why
        if case.name not in self.cases():
            return f"the {self.title or self.name} backend does not build {case.name} yet"
        return None

    def refuse(self, spec: PointSpec) -> str | None:
        """A one-line reason when this framework, here, cannot run the spec, else None: only what needs the framework
        at hand (its version, a device it sees, an optional package); what the spec alone shows is the capability
        table's (dlbench.capabilities, asked first). Must not start a distributed runtime (build does that); checks
        that need one raise `Unsupported` from build."""
        return None

    def no_gpu_reason(self, spec: PointSpec) -> str | None:
        """Why this framework here would train the CUDA point `spec` on no GPU (one line), or None: its refusal by
        default; a backend whose refusal cannot start its GPU runtime (JAX, before jax.distributed) asks it here,
        in a process that runs no point (`dlbench env --device cuda`)."""
        return self.refuse(spec)

    @abstractmethod
    def build(self, spec: PointSpec, case: Case, ctx: RankContext) -> Trainer:
        """Join the ranks (several devices), build model, optimizer and data on this rank's device. Never timed."""

    def serve(self, spec: PointSpec, ctx: RankContext, results: list[Path]) -> None:
        """Run parameter-server process number ctx.server of the point (spec.servers of them) until every rank's
        result file in `results` exists; only backends with such strategies have it."""
        raise RuntimeError(f"the {self.title or self.name} backend starts no parameter-server processes")

    @abstractmethod
    def count_params(self, case: Case) -> int:
        """Trainable parameters of this backend's model for the case."""

    def gpu_build(self) -> GpuBuild | None:
        """What this framework's GPU build was compiled for (CUDA version, kernel architectures), read without
        starting CUDA, so that a GPU it has no kernels for is refused before build (worker, gpu_arch); None where
        the framework cannot say, or compiles its kernels for the device itself."""
        return None

    # The framework's out-of-memory errors, as the default `oom_error` recognises them: an exception of one of
    # `oom_kinds` whose lower-cased message holds one of `oom_texts`.
    oom_kinds: tuple[type[BaseException], ...] = (RuntimeError,)
    oom_texts: tuple[str, ...] = ()

    def oom_error(self, exc: BaseException) -> bool:
        """Whether this one exception (not its causes) is the framework's out-of-memory error: a MemoryError, or
        one of `oom_kinds` with one of `oom_texts` in its message."""
        if isinstance(exc, MemoryError):
            return True
        return isinstance(exc, self.oom_kinds) and any(text in str(exc).lower() for text in self.oom_texts)

    def is_oom(self, exc: BaseException) -> bool:
        """Whether an exception, or any cause or context of it, is the framework's out-of-memory error, or a CUDA
        library's (`library_oom`)."""
        return any(self.oom_error(e) or library_oom(e) for e in exception_chain(exc))

    def facts(self) -> dict[str, object]:
        """What build chose, recorded beside the point, e.g. {"compiled": "xla", "cudnn_benchmark": True}: by
        default what build put in `self._facts`."""
        return dict(self._facts)
