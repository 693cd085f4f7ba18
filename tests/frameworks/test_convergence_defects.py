"""Planted defects that keep a finite loss and a fine throughput, each caught by the --converge verdict (#34).

Each trains dlbench's own TorchTrainer (its optimizer, priming and step) on the learnable separable images, on the
CPU with torch's real kernels, with a small linear classifier so that it takes seconds; each defect is planted
deterministically: fused SGD's momentum state poisoned with NaN (the #21 defect, which uninitialised memory made
random), one of two ranks' gradients dropped from the average, a learning rate 1000 times too small.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

pytest.importorskip("torch")

import torch

from dlbench.analysis.convergence import Reference, Verdict, judge
from dlbench.backends.torch.distributed import GradSync
from dlbench.backends.torch.step import TorchTrainer
from dlbench.cases import Optimizer, get_case
from dlbench.data.learnable import IMAGE_CLASSES, SeparableImages
from dlbench.numerics import resolve_precision
from dlbench.protocol.converge import Curve, train_curve

SIDE, BATCH, TARGET, BUDGET, EVERY = 8, 32, 0.25, 600, 5
LR_SCALE = 0.05  # of the case's learning rate: slow enough that the reference takes ~100 steps, so a band is tight


class DroppedRank(GradSync):
    """Two ranks' gradients averaged where the second rank's never arrives (it counts as zero): grad / 2."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.params = list(model.parameters())

    def update(self, optimizer_step: Callable[[], object]) -> None:
        for p in self.params:
            if p.grad is not None:
                p.grad.div_(2)
        optimizer_step()


def _curve(seed: int, lr_factor: float = 1.0, poison: bool = False, drop: bool = False) -> Curve:
    torch.manual_seed(seed)
    case = get_case("resnet50")
    o = case.optimizer
    case = dataclasses.replace(
        case, optimizer=Optimizer(o.name, o.lr * LR_SCALE * lr_factor, o.momentum, lr_ref_batch=o.lr_ref_batch)
    )
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * SIDE * SIDE, IMAGE_CLASSES))
    stream = SeparableImages(IMAGE_CLASSES, SIDE, order=seed).batches(BATCH)
    batches = ({k: torch.from_numpy(v) for k, v in b.items()} for b in stream)
    trainer = TorchTrainer(
        case,
        model,
        batches,
        torch.device("cpu"),
        resolve_precision("fp32", "cpu"),
        compile_model=False,
        global_batch=BATCH,
        sync=DroppedRank(model) if drop else None,
        fused=True,  # fused SGD forced on the CPU (torch has CPU kernels for it)
    )
    if poison:
        for state in trainer.optimizer.state.values():
            state["momentum_buffer"].fill_(float("nan"))
    trainer.keep_loss_window = True
    return train_curve(trainer, BUDGET, EVERY, TARGET, seed=seed)


@pytest.fixture(scope="module")
def reference() -> Reference:
    runs = [judge(_curve(seed), TARGET) for seed in range(3)]
    assert all(r.verdict == "converged" for r in runs), [r.reason for r in runs]
    return Reference(tuple(r.steps_to_target or 0 for r in runs), EVERY, (0, 1, 2))


def test_the_correct_step_converges_within_its_band(reference: Reference) -> None:
    assert judge(_curve(3), TARGET, reference).verdict == "converged"


def test_fused_sgd_with_poisoned_momentum_diverges(reference: Reference) -> None:
    assert judge(_curve(0, poison=True), TARGET, reference).verdict == "diverged"


def test_a_dropped_rank_gradient_is_slower_or_diverges(reference: Reference) -> None:
    got: Verdict = judge(_curve(0, drop=True), TARGET, reference).verdict
    assert got in ("slower", "diverged")


def test_a_learning_rate_a_thousand_times_too_small_is_not_reached(reference: Reference) -> None:
    assert judge(_curve(0, lr_factor=1e-3), TARGET, reference).verdict == "not reached"
