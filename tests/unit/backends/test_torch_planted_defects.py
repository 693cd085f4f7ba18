"""Defects planted in the training step through the worker's own interpreter (#44), not through a flag of dlbench:
a `sitecustomize` on the worker's PYTHONPATH patches torch before dlbench runs, as a broken framework build or a
careless change to the step would. Each defect leaves the loss the trainer reports about itself plausible; the
independent evaluation (dlbench/evaluate.py: a fresh process, the saved weights, held-out data, the loss computed in
numpy) is what gives each its verdict. A tiny GPT (1 layer, width 32) on the 64-token Markov source, 10 steps: one
worker and one evaluation process per test, seconds each."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dlbench.analysis.convergence import EVAL_KEY, VERDICT_KEY  # noqa: E402
from dlbench.analysis.references import with_verdict  # noqa: E402
from dlbench.analysis.targets import target_for  # noqa: E402
from dlbench.cases import get_case  # noqa: E402
from dlbench.evaluate import evaluate_forward  # noqa: E402
from dlbench.launch.registry import Launchers  # noqa: E402
from dlbench.launch.session import run_points  # noqa: E402
from dlbench.spec import PointSpec, Protocol  # noqa: E402
from dlbench.store.store import Store  # noqa: E402

TINY = {"hidden": 32, "layers": 1, "heads": 2, "seq": 32, "vocab": 64}
SITECUSTOMIZE = """
import os
import torch
import torch.nn.functional as F

DEFECT = os.environ.get("PLANTED_DEFECT", "")
_xent = F.cross_entropy


def _reported(*args, **kwargs):
    loss = _xent(*args, **kwargs)
    share = {"underreport": 0.01, "flatter": 0.62}.get(DEFECT)
    if share is None or not loss.requires_grad:
        return loss
    return loss - (1 - share) * loss.detach()  # the same gradient, a loss reported as `share` of itself


F.cross_entropy = _reported
torch.nn.functional.cross_entropy = _reported
_calls = [0]


def _corrupting(opt_step):
    def step(self, *args, **kwargs):
        out = opt_step(self, *args, **kwargs)
        _calls[0] += 1
        if DEFECT == "nan_after_target" and _calls[0] > 10:  # after the curve's 10 steps: the timed steps
            with torch.no_grad():
                for group in self.param_groups:
                    for p in group["params"]:
                        p.fill_(float("nan"))
        return out

    return step


for _cls in (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD):
    if "step" in vars(_cls):  # once per class that defines it (AdamW may inherit Adam's)
        _cls.step = _corrupting(_cls.step)
"""


def _spec(target: float | None) -> PointSpec:
    return PointSpec(
        framework="torch",
        model="gpt",
        batch_size=8,
        protocol=Protocol(1, 1, 1, "median"),
        threads=1,
        converge=True,
        converge_steps=10,
        converge_target=target,
        case_params=tuple(sorted(TINY.items())),
    )


def _planted(defect: str, target: float | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Run one convergence point in a real worker whose interpreter carries the defect; its stored judgement."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PLANTED_DEFECT", defect)
    store = Store(str(tmp_path / "s.db"))
    run_id = store.create_run("planted", kind="run", meta={})
    [result] = run_points(store, run_id, [_spec(target)], Launchers.build(), finish=lambda r: with_verdict(r, ()))
    assert result.status == "ok", result.error
    verdict = result.extra[VERDICT_KEY]
    assert isinstance(verdict, dict) and isinstance(result.extra[EVAL_KEY], dict)
    return verdict


def test_the_evaluation_computes_the_held_out_loss_itself() -> None:
    case = get_case("gpt").configured(TINY)
    spec = _spec(None)
    torch.manual_seed(0)
    from dlbench.backends.torch.models import build_model

    model = build_model(case).eval()

    def forward(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with torch.no_grad():
            return {"logits": model(torch.from_numpy(batch["input_ids"])).numpy()}

    figures = evaluate_forward(case, spec, forward)
    target = target_for(case)
    assert target is not None
    # Random weights: about ln(64) = 4.16 per token, far above the source's entropy rate (the Bayes loss).
    assert abs(float(figures["loss"]) - math.log(64)) < 0.3  # type: ignore[arg-type]
    assert abs(float(figures["bayes"]) - target.best_loss) < 0.2  # type: ignore[arg-type]
    assert figures["examples"] == 64 * 32


@pytest.mark.parametrize(
    ("defect", "target", "verdict", "words"),
    [
        ("", 4.5, "converged", "no reference to judge against"),  # the clean step: its weights confirm the target
        ("underreport", None, "impossible", "below the best loss the data allows"),
        ("flatter", None, "not reached", "its weights there evaluate to held-out loss"),
        ("nan_after_target", 4.5, "diverged", "after its timed steps the weights evaluate to held-out loss nan"),
    ],
)
def test_a_planted_defect_gets_its_verdict_from_the_evaluation(
    defect: str, target: float | None, verdict: str, words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    judged = _planted(defect, target, tmp_path, monkeypatch)
    assert judged["verdict"] == verdict, judged["reason"]
    assert words in str(judged["reason"])
    if defect in ("flatter", "nan_after_target"):  # the curve alone said the target was reached at step 10
        assert float(judged["final_loss"]) <= float(judged["target"])  # type: ignore[arg-type]
