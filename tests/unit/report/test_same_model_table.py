"""The same-model table keeps every number whole at 60 and 80 columns, marks a deviation and names the failed
tensor, a skipped framework's reason and the tolerances."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console

from dlbench.canonical.compare import compare
from dlbench.cases import get_case
from dlbench.report.same_model import same_model_table
from dlbench.samemodel import Row, SameModelOutcome, SameModelRequest


def _outcome() -> SameModelOutcome:
    w = {"conv.weight": np.ones((2, 2), np.float32), "bn.running_var": np.ones(2, np.float32)}
    ref = {
        "out/logits": np.array([[1.0, 2.0]], np.float32),
        "out/logits_eval": np.array([[3.0, 1.0]], np.float32),
        "loss": np.asarray(1.25),
        "delta/conv.weight": np.array([[0.5, -0.25], [0.125, 1.0]], np.float32),
        "delta/bn.running_var": np.array([0.05, 0.1], np.float32),
    }
    var = 1.0 + ref["delta/bn.running_var"] / 0.1
    jax = dict(ref, **{"delta/bn.running_var": (0.1 * (var * 3 / 4 - 1.0)).astype(np.float32)})
    jax["out/logits"] = ref["out/logits"] * np.float32(1 + 3.5e-6)
    bad = dict(ref, **{"delta/conv.weight": ref["delta/conv.weight"] * 1.5})
    no_eval = {k: v for k, v in ref.items() if k != "out/logits_eval"}  # as a model without batch norms gives
    req = SameModelRequest("resnet50", ("torch", "jax", "paddle", "megengine", "oneflow", "mxnet"))
    rows = [
        Row("torch", "reference", note="loss 1.25"),
        Row("jax", "pass", compare("jax", w, ref, jax, dict(ref), {**jax, "out/logits": ref["out/logits"]})),
        Row("paddle", "fail", compare("paddle", w, ref, bad)),
        Row("megengine", "pass", compare("megengine", w, no_eval, dict(no_eval))),
        Row("oneflow", "inconclusive", compare("oneflow", w, ref, bad), note="float32 cannot judge step here"),
        Row("mxnet", "skipped", note="framework mxnet is not installed: run: dlbench setup mxnet"),
    ]
    return SameModelOutcome(req, get_case("resnet50"), 64, 267, 25_557_032, rows)


@pytest.mark.parametrize("width", [60, 80])
def test_numbers_stay_whole_and_every_row_says_why(width: int) -> None:
    outcome = _outcome()
    console = Console(file=io.StringIO(), width=width)
    console.print(same_model_table(outcome))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    flat = " ".join(text.split())
    for number in ("5.0e-01", "0.0e+00"):
        assert number in flat
    assert ("3.5e-06" in flat) == (width >= 80)  # the float32 logits: an optional column, named where left out
    assert ("Not shown at this width: fp32 logits (a wider terminal shows them)" in flat) == (width < 80)
    assert "pass†" in flat and "FAIL" in flat and "reference" in flat
    assert "paddle fails: the float32 step's change differs by 5.0e-01 > 0.001 (worst tensor: conv.weight)" in flat
    assert "5.0e-01*" in flat and "marked *" in flat  # judged in float32: marked
    assert "megengine 0.0e+00* - 0.0e+00* 0.0e+00* pass" in flat and "-*" not in flat  # a dash is never marked
    assert "oneflow inconclusive: float32 cannot judge step here" in flat and "no verdict" in flat
    assert "mxnet skipped: framework mxnet is not installed: run: dlbench setup mxnet" in flat
    assert "† deviation biased-running-var" in flat and "jax 1 tensors" in flat
    assert outcome.exit_code == 1
    outcome.rows[:] = [r for r in outcome.rows if r.status not in ("fail", "skipped")]
    assert outcome.exit_code == 3  # inconclusive: none failed, but not every one was judged
