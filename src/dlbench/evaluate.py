"""The independent evaluation of a convergence point (#44): ``<python> -m dlbench.evaluate SPEC.json DIR OUT.json``.

A fresh process, started by the worker once the point has measured its throughput, that shares nothing with the
training step but the model's definition and the framework's forward: it builds the model anew through the
backend's `evaluator` (backends/<framework>/evaluate.py), loads each checkpoint the worker saved under DIR (the
weights where the curve reached its target, and those at the end of the point), runs the forward pass on the
held-out split of the learnable data (data/learnable.py, HELD_OUT: a stream no training run draws), and computes
the loss here, in numpy, from the model's outputs; beside it the loss of the Bayes predictor that knows the source,
on the very same examples, which no model can beat on average.

Batch normalisation evaluates with population statistics recomputed for the weights being evaluated ("precise
BN"): before scoring, the evaluator's `calibrate` runs the forward over CALIBRATION batches (a stream of the same
source that is neither trained on nor scored) and keeps the mean of their batch statistics. Neither alternative
judges the weights: the running averages the trainer kept lag far behind weights a few dozen steps old (ResNet-50
at 32 px reached its target in 40 steps, and its weights there scored a held-out loss of 2949 with them), and each
held-out batch's own statistics make an example's output depend on its batch-mates, so a batch of few classes
breaks confident predictions (seed 103's weights after 80 steps: held-out loss 1.25 with batch statistics, one
example at 186 nats; 0.19 with recomputed ones). Everything else infers (no dropout). The verdict
(analysis/convergence.py) uses these figures, not the loss the trainer reported about itself.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dlbench.cases import Case, CtrInput, ImageInput, get_case
from dlbench.cases.arch import DlrmArch
from dlbench.data.learnable import (
    CALIBRATION,
    HELD_OUT,
    MarkovTokens,
    MaskedMarkov,
    PlantedCtr,
    SeparableImages,
    learnable_source,
    source_batch,
)
from dlbench.spec import PointSpec

if TYPE_CHECKING:
    from dlbench.backends.base import Trainer

CHECKPOINTS = ("target", "end")  # the weights where the curve reached its target, and after the timed steps
HELD_OUT_EXAMPLES = {"image": 256, "lm": 64, "bert": 256, "ctr": 8192}  # held-out examples per kind of case
TIMEOUT_S = 900.0
# Variables that would make a framework in the evaluation process join the point's distributed job.
_DISTRIBUTED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")
Forward = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def unevaluated(case: Case) -> str | None:
    """Why this kind of case has no independent evaluation yet (one line), or None where it has one."""
    if isinstance(case.arch, DlrmArch):  # its planted clicks are not Wide & Deep's (data/recsys.py)
        return "no independent evaluation for DLRM yet: judged by the held-out AUC of its own scorer"
    if isinstance(case.input, ImageInput | CtrInput) or case.task in ("causal_lm", "bert_pretraining"):
        return None
    return f"no independent evaluation for {case.task} yet: judged on its curve alone"


def _kind(case: Case) -> str:
    if isinstance(case.input, ImageInput):
        return "image"
    if isinstance(case.input, CtrInput):
        return "ctr"
    return "lm" if case.task == "causal_lm" else "bert"


def held_out(case: Case, spec: PointSpec, order: int = HELD_OUT) -> Iterator[dict[str, np.ndarray]]:
    """The held-out batches of the point's learnable data, at its batch size and input size (NCHW images);
    `order` CALIBRATION: as many batches of the stream batch normalisation's statistics are recomputed on."""
    source = learnable_source(case, order, spec.input_size)
    total = HELD_OUT_EXAMPLES[_kind(case)]
    size = min(spec.batch_size, total)
    for step in range(-(-total // size)):
        yield source_batch(source, case, step, size, spec.input_size)


def _log_softmax_pick(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """-log softmax(logits)[label] per row (float64), logits [..., classes], labels [...]."""
    z = logits.astype(np.float64)
    top = z.max(axis=-1, keepdims=True)
    lse = top[..., 0] + np.log(np.exp(z - top).sum(axis=-1))
    picked = np.take_along_axis(z, labels[..., None].astype(np.int64), axis=-1)[..., 0]
    return np.asarray(lse - picked)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The area under the ROC curve (Mann-Whitney's statistic with ties at half), NaN with one class only."""
    from scipy.stats import rankdata

    y = labels.astype(bool)
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return math.nan
    ranks = rankdata(scores)
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


@dataclass
class _Sums:
    """Per-example losses of the model and of the Bayes predictor, gathered over the held-out batches."""

    model: list[np.ndarray]
    bayes: list[np.ndarray]
    extra_loss: float = 0.0  # a loss term beside the per-example one (BERT's next-sentence loss, mean)
    scores: list[np.ndarray] | None = None
    labels: list[np.ndarray] | None = None
    truth: list[np.ndarray] | None = None


def _one_batch(case: Case, source: Any, batch: dict[str, np.ndarray], out: dict[str, np.ndarray], sums: _Sums) -> None:
    """Add one held-out batch's per-example losses (model from its outputs, Bayes from the source)."""
    if isinstance(source, SeparableImages):
        sums.model.append(_log_softmax_pick(out["logits"], batch["labels"]))
        sums.bayes.append(source.bayes_nll(batch["images"], batch["labels"]))
    elif isinstance(source, MarkovTokens):
        sums.model.append(_log_softmax_pick(out["logits"], batch["labels"]).ravel())
        sums.bayes.append(source.bayes_nll(batch["input_ids"], batch["labels"]).ravel())
    elif isinstance(source, MaskedMarkov):
        keep = batch["mlm_weights"] > 0
        sums.model.append(_log_softmax_pick(out["mlm"], batch["mlm_ids"])[keep])
        sums.bayes.append(source.bayes_nll(batch))
        nsp = _log_softmax_pick(out["nsp"], batch["nsp_labels"])
        sums.extra_loss += float(nsp.sum())
    elif isinstance(source, PlantedCtr):
        z = out["logit"].astype(np.float64).reshape(-1)
        y = batch["labels"].reshape(-1).astype(np.float64)
        sums.model.append(np.logaddexp(0.0, z) - y * z)  # binary cross-entropy of sigmoid(z), stable
        sums.bayes.append(source.bayes_nll(batch))
        assert sums.scores is not None and sums.labels is not None and sums.truth is not None
        sums.scores.append(z)
        sums.labels.append(y)
        sums.truth.append(source.probabilities(batch["dense"].astype(np.float64), batch["deep_ids"][:, 0]))


def evaluate_forward(case: Case, spec: PointSpec, forward: Forward) -> dict[str, object]:
    """The held-out loss of a model's forward (and the Bayes loss of the same examples, their difference's mean
    and standard error; AUCs for a click-through model)."""
    source = learnable_source(case, HELD_OUT, spec.input_size)
    calibrate = getattr(forward, "calibrate", None)
    if calibrate is not None:  # batch normalisation's population statistics, for these weights
        calibrate(held_out(case, spec, CALIBRATION))
    ctr = isinstance(source, PlantedCtr)
    sums = _Sums([], [], scores=[] if ctr else None, labels=[] if ctr else None, truth=[] if ctr else None)
    rows = 0
    for batch in held_out(case, spec):
        _one_batch(case, source, batch, forward(batch), sums)
        rows += len(next(iter(batch.values())))
    model, bayes = np.concatenate(sums.model), np.concatenate(sums.bayes)
    extra = sums.extra_loss / rows if isinstance(source, MaskedMarkov) else 0.0
    diff = model - bayes
    out: dict[str, object] = {
        "loss": float(model.mean() + extra),
        "bayes": float(bayes.mean()),
        "diff_mean": float(diff.mean() + extra),
        "diff_se": float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else 0.0,
        "examples": len(diff),
    }
    if ctr and sums.scores is not None and sums.labels is not None and sums.truth is not None:
        labels = np.concatenate(sums.labels)
        out["auc"] = auc(np.concatenate(sums.scores), labels)
        out["bayes_auc"] = auc(np.concatenate(sums.truth), labels)
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point: evaluate each checkpoint under DIR, write {checkpoint: figures} to OUT; exit 0 when written."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m dlbench.evaluate SPEC.json DIR OUT.json", file=sys.stderr)
        return 2
    from dlbench.backends import load_backend

    spec = PointSpec.from_json(Path(args[0]).read_text())
    folder, out_path = Path(args[1]), Path(args[2])
    case = get_case(spec.model).configured(dict(spec.case_params))
    backend = load_backend(spec.framework)
    result: dict[str, object] = {}
    for name in CHECKPOINTS:
        weights = folder / name
        if not weights.exists():
            continue
        start = time.perf_counter()
        try:
            figures = evaluate_forward(case, spec, backend.evaluator(spec, case, weights))
        except Exception as exc:  # one checkpoint that cannot be evaluated is said, the other still is
            figures = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        figures["seconds"] = round(time.perf_counter() - start, 3)
        result[name] = figures
    out_path.write_text(json.dumps(result))
    return 0


class Checkpoints:
    """The worker's side: a folder for the weights it saves at the target and at the end of a convergence point,
    and the fresh process that evaluates them."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="dlbench-eval-")
        self.folder = Path(self._tmp.name)
        self.problem: str | None = None  # why a checkpoint could not be saved: the evaluation says so

    def save(self, trainer: Trainer, name: str) -> None:
        """Save the trainer's weights as checkpoint `name` (the framework's own format); a failure is kept."""
        if self.problem is not None:
            return
        try:
            path = self.folder / name
            path.mkdir()
            trainer.save_weights(path)
        except NotImplementedError as exc:
            self.problem = str(exc) or "this backend cannot save its weights for an evaluation yet"
        except Exception as exc:
            self.problem = f"saving the weights failed: {type(exc).__name__}: {exc}"[:500]

    def evaluate(self, spec: PointSpec, timeout_s: float = TIMEOUT_S) -> dict[str, object]:
        """Run the evaluation process on the saved checkpoints; its figures, or why there are none."""
        if self.problem is not None:
            return {"skipped": self.problem}
        spec_path, out = self.folder / "spec.json", self.folder / "eval.json"
        spec_path.write_text(spec.to_json())
        env = {k: v for k, v in os.environ.items() if k not in _DISTRIBUTED}
        argv = [sys.executable, "-m", "dlbench.evaluate", str(spec_path), str(self.folder), str(out)]
        start = time.perf_counter()
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return {"skipped": f"the evaluation process took over {timeout_s:g} s"}
        if done.returncode != 0 or not out.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return {"skipped": f"the evaluation process failed (exit {done.returncode}): {' | '.join(tail)}"[:800]}
        figures: dict[str, object] = json.loads(out.read_text())
        figures["process"] = f"python -m dlbench.evaluate, {time.perf_counter() - start:.1f} s"
        return figures

    def close(self) -> None:
        """Remove the checkpoints."""
        self._tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
