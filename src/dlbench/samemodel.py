"""`dlbench check same-model`: the canonical weights through every framework's model, compared with torch's.

The controller writes the canonical weights, batch and learning rate (dlbench.canonical) to a scratch folder and
runs ``<python> -m dlbench.check same-model FW CASE FOLDER`` in each framework's own environment, twice: the
float32 model as the benchmark builds it and, with ``--float64``, the same model and train step in float64 (the
verdict's: see dlbench.canonical.compare); each gives the forward passes, the loss and the step. It never imports a
framework. torch is the
reference; each other framework's files are compared with torch's and then deleted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from dlbench.canonical import names, values
from dlbench.canonical.compare import Comparison, compare, unjudgeable
from dlbench.cases import Case, ImageInput, TextInput, get_case
from dlbench.cases.inputs import downsampling, min_input_size
from dlbench.envs.interpreters import NotInstalled, interpreter_for
from dlbench.spec import SpecError

REFERENCE = "torch"
WORKER_TIMEOUT_S = 1800.0
Status = Literal["reference", "pass", "fail", "inconclusive", "skipped", "unsupported", "error"]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class SameModelRequest:
    """What to check: one case, the frameworks besides torch, the batch, and the input size (None: 64 px or 32
    tokens, or the smallest the case takes)."""

    model: str
    frameworks: tuple[str, ...]
    params: tuple[tuple[str, int], ...] = ()  # the case's parameters (--param NAME=VALUE), e.g. vocab
    batch: int = 2
    input_size: int | None = None
    seed: int = 0
    lr: float = values.CHECK_LR

    def __post_init__(self) -> None:
        if self.batch < 2:
            raise SpecError(f"--batch must be at least 2 (BatchNorm needs two samples); got {self.batch}")
        if self.input_size is not None and self.input_size < 1:
            raise SpecError(f"--input-size must be positive; got {self.input_size}")


@dataclass(frozen=True)
class Row:
    """One framework's outcome: its comparison with torch where it ran, else why not."""

    framework: str
    status: Status
    comparison: Comparison | None = None
    note: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class SameModelOutcome:
    """Every framework's row, and what was checked."""

    request: SameModelRequest
    case: Case
    input_size: int
    tensors: int
    parameters: int
    rows: list[Row] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0: every framework passed; 1: one failed or broke; 3: none failed but some could not be checked (or
        judged: inconclusive)."""
        statuses = {r.status for r in self.rows}
        if statuses & {"fail", "error"}:
            return 1
        return 3 if statuses & {"skipped", "unsupported", "inconclusive"} else 0


def verdict(c: Comparison, own: Comparison | None, no64: str) -> tuple[Status, str]:
    """A framework's status and note from its comparison with torch. A run judged in float32 (`no64`: why it took
    no float64 run) whose only failed figures are ones torch's own float32 run fails too, against its float64 run
    (`own`), is inconclusive: float32 cannot judge them for this case (compare.unjudgeable)."""
    if c.precision == "float64" or c.passed:
        note = f"no float64 run ({no64}): judged in float32" if c.precision != "float64" else ""
        return ("pass" if c.passed else "fail"), c.failure() or note
    failed = {label for label, f in c.figures() if not f.passed}
    chaotic = unjudgeable(own) if own is not None else frozenset()
    if own is None or not failed <= chaotic:
        unjudged = sorted(failed & chaotic)
        return "fail", c.failure() + (
            f"; float32 cannot judge {', '.join(unjudged)} here, but {', '.join(sorted(failed - chaotic))} fail"
            if unjudged
            else ""
        )
    torch_own = ", ".join(f"{label} {f.value:.1e}" for label, f in own.figures() if label in failed)
    return "inconclusive", (
        f"no float64 run ({no64}); its float32 {', '.join(sorted(failed))} fail, but torch's own float32 run fails "
        f"them too against its float64 run ({torch_own}): float32 cannot judge them here; the other figures pass"
    )


def default_input_size(case: Case) -> int:
    """64 px for an image model, at least the case's smallest input and, with BatchNorm, one down-sampling more, so
    that its last maps are 2 x 2 (at 1 x 1 a batch of 2 gives BatchNorm two values a channel, and float64 steps
    then differ by 1e-5: Inception v3 at 75 px); 32 tokens for a text model."""
    if isinstance(case.input, ImageInput):
        least = min_input_size(case)
        if any(not t.trainable for t in names.tensors(case)):
            least += downsampling(case.arch)
        return max(64, least)
    if isinstance(case.input, TextInput):
        return min(32, case.input.seq_len)
    return 0


def _worker(
    python: str, framework: str, case: Case, folder: Path, size: int, float64: bool
) -> tuple[dict[str, object], str]:
    """Run one worker; (its JSON answer, '') or ({}, why it failed)."""
    argv = [python, "-m", "dlbench.check", "same-model", framework, case.name, str(folder)]
    argv += [f"--param={k}={v}" for k, v in case.values]
    argv += ["--input-size", str(size)] if size else []
    argv += ["--float64"] if float64 else []
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S, check=False, env=dict(os.environ)
        )
    except subprocess.TimeoutExpired:
        return {}, f"took over {WORKER_TIMEOUT_S:g} s"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        return {}, (tail[-1] if tail else f"exit {proc.returncode}")[:300]
    try:
        return json.loads(lines[-1]), ""
    except json.JSONDecodeError:
        return {}, f"answered {lines[-1][:100]}"


def _run_framework(framework: str, case: Case, folder: Path, size: int) -> tuple[Row | None, float, str]:
    """Both workers of one framework: (a Row when it could not be compared, else None: its files are written; the
    seconds; why it took no float64 step, '' when it did)."""
    try:
        python = interpreter_for(framework)
    except NotInstalled as exc:
        return Row(framework, "skipped", note=str(exc)), 0.0, ""
    started = time.monotonic()
    answer, error = _worker(python, framework, case, folder, size, float64=False)
    if error or "unsupported" in answer:
        status: Status = "error" if error else "unsupported"
        return Row(framework, status, note=error or str(answer["unsupported"])), time.monotonic() - started, ""
    answer, error = _worker(python, framework, case, folder, size, float64=True)
    why = error or str(answer.get("unsupported", ""))  # then its float32 step is compared
    return None, time.monotonic() - started, why


def _load(path: Path) -> dict[str, np.ndarray] | None:
    if not path.is_file():
        return None
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def check_same_model(request: SameModelRequest, progress: Progress | None = None) -> SameModelOutcome:
    """Run the canonical weights through torch and each framework; compare each with torch. Raises SpecError when
    the case has no canonical tensors or torch cannot run it (nothing to compare with)."""
    say = progress or (lambda _: None)
    case = get_case(request.model).configured(dict(request.params))
    try:
        listed = names.tensors(case)
    except names.Unsupported as exc:
        raise SpecError(str(exc)) from None
    size = request.input_size or default_input_size(case)
    case.check_input_size(size or None)
    outcome = SameModelOutcome(request, case, size, len(listed), names.parameter_count(case))
    folder = Path(tempfile.mkdtemp(prefix="dlbench-same-model-"))
    try:
        weights = values.weights(case, request.seed)
        np.savez(folder / "weights.npz", **weights)  # type: ignore[arg-type]
        np.savez(folder / "batch.npz", **values.batch(case, request.batch, size or None, request.seed))  # type: ignore[arg-type]
        np.save(folder / "lr.npy", np.float64(request.lr))
        say(f"{REFERENCE}: the reference")
        failed, seconds, _ = _run_framework(REFERENCE, case, folder, size)
        if failed is not None:
            raise SpecError(f"the reference, torch, could not run {case.name}: {failed.note}")
        ref, ref64 = _load(folder / "torch.npz"), _load(folder / "torch-float64.npz")
        assert ref is not None
        outcome.rows.append(Row(REFERENCE, "reference", note=f"loss {float(ref['loss']):.6g}", seconds=seconds))
        for fw in (f for f in request.frameworks if f != REFERENCE):
            say(f"{fw}: loading the canonical weights, forward, one step")
            row, seconds, no64 = _run_framework(fw, case, folder, size)
            got = _load(folder / f"{fw}.npz")
            if row is None and got is not None:
                c = compare(fw, weights, ref, got, ref64, _load(folder / f"{fw}-float64.npz"))
                own = compare(REFERENCE, weights, ref64, ref) if ref64 is not None else None
                status, note = verdict(c, own, no64)
                row = Row(fw, status, c, note, seconds)
            outcome.rows.append(row or Row(fw, "error", note="wrote no results", seconds=seconds))
            for leftover in folder.glob(f"{fw}*.npz"):
                leftover.unlink()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return outcome


__all__ = [
    "REFERENCE",
    "Row",
    "SameModelOutcome",
    "SameModelRequest",
    "check_same_model",
    "default_input_size",
    "verdict",
]
