"""The Llama and MoE families in PaddlePaddle (#46): the same model as torch's, training to the Markov source's
target, and `dlbench run -f paddle -m llama_tiny,moe_tiny` as a user types it, on one device and two fleet ranks.

Paddle runs in its environment's interpreter (a worker, or a script), so this file never imports paddle; torch,
the reference, runs here. Without the paddle environment every test skips, naming it (`dlbench setup paddle`).
The exact parameter counts of every member are test_paddle.py's (`dlbench.check params paddle`).
"""

from __future__ import annotations

import json
import math
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlbench.analysis.convergence import CURVE_KEY, EVAL_KEY, Floor, judge
from dlbench.cases import get_case
from dlbench.data.learnable import MARKOV_STATES, MarkovTokens, stationary
from dlbench.protocol.converge import Curve
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import read_result
from tests.support.scaling import assert_ranks_in_sync, stored

pytestmark = [pytest.mark.framework("paddle"), pytest.mark.slow]
CliResult = tuple[int, str, str]
SMALL = ("--input-size", "16", "-b", "2", "--warmup", "1", "--steps", "2", "--repeats", "1", "--threads", "1")

# Loads torch's weights (an .npz of its state dict) into paddle's build of each member and writes paddle's logits
# on the same token ids. A paddle Linear's weight is [in, out], torch's [out, in]: transposed, by layer type (a
# square matrix has the same shape either way). A tied head has no weight of its own in paddle.
SAME_MODEL = """
import sys
import numpy as np, paddle
from dlbench.backends.paddle.models import build_model
from dlbench.cases import get_case

folder = sys.argv[1]
for name in sys.argv[2:]:
    torch_weights = np.load(f"{folder}/{name}.weights.npz")
    model = build_model(get_case(name))
    linears = {n for n, layer in model.named_sublayers() if isinstance(layer, paddle.nn.Linear)}
    state = model.state_dict()
    assert set(state) <= set(torch_weights.files), sorted(set(state) - set(torch_weights.files))
    for key, param in state.items():
        value = torch_weights[key]
        if key.rsplit(".", 1)[0] in linears:
            value = value.T
        assert list(value.shape) == list(param.shape), (key, value.shape, param.shape)
        param.set_value(value.astype("float32"))
    model.eval()
    ids = paddle.to_tensor(np.load(f"{folder}/{name}.ids.npy"))
    np.save(f"{folder}/{name}.paddle.npy", model(ids).numpy())
"""


def test_llama_and_moe_give_torchs_logits_with_torchs_weights(framework_python: str, tmp_path: Path) -> None:
    """Same weights, same tokens, same logits (fp32): RMSNorm, rotary positions, grouped-query attention, SwiGLU,
    the tied head, and the MoE's top-k routing and dispatch all compute what torch's do. The reference is the
    torch backend's model, run here."""
    torch = pytest.importorskip("torch", reason="torch (the reference) is not installed: pip install -e '.[torch]'")
    from dlbench.backends.torch.llama import LlamaModel
    from dlbench.backends.torch.moe import MoeModel
    from dlbench.cases.llama import llama_arch
    from dlbench.cases.moe import moe_arch

    torch.manual_seed(0)
    reference = {
        "llama_tiny": LlamaModel(llama_arch(get_case("llama_tiny"))),
        "moe_tiny": MoeModel(moe_arch(get_case("moe_tiny"))),
    }
    logits = {}
    for name, model in reference.items():
        ids = torch.randint(0, get_case(name).input.vocab, (2, 16))
        model.eval()
        with torch.no_grad():
            logits[name] = model(ids).numpy()
        weights = {k: v.detach().numpy() for k, v in model.state_dict().items()}
        np.savez(tmp_path / f"{name}.weights.npz", **weights)
        np.save(tmp_path / f"{name}.ids.npy", ids.numpy())
    script = tmp_path / "same_model.py"
    script.write_text(textwrap.dedent(SAME_MODEL))
    proc = subprocess.run(
        [framework_python, str(script), str(tmp_path), *reference],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name, want in logits.items():
        got = np.load(tmp_path / f"{name}.paddle.npy")
        assert got.shape == want.shape and float(np.abs(want).max()) > 0.1, name  # logits of some size
        assert np.allclose(got, want, rtol=0, atol=1e-5), (name, float(np.abs(got - want).max()))


def _converge(
    python: str, folder: Path, target: float | None, steps: int | None, model: str = "llama_tiny"
) -> tuple[Curve, float, dict[str, Any], Floor]:
    """A decoder under --converge through paddle's worker (batch 8, 16 tokens): its curve, its target, the
    independent evaluation of its weights (a fresh process, dlbench/evaluate.py) and what the data allows (the
    floor the controller judges with: analysis/references.floor_of)."""
    spec = PointSpec(
        framework="paddle",
        model=model,
        batch_size=8,
        input_size=16,
        threads=1,
        protocol=Protocol(0, 1, 1, "median"),
        converge=True,
        converge_target=target,
        converge_steps=steps,
    )
    (folder / "spec.json").write_text(spec.to_json())
    proc = subprocess.run(
        [python, "-m", "dlbench.worker", str(folder / "spec.json"), str(folder / "result.json")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = read_result(folder / "result.json")
    assert result.status == "ok", result.error
    assert str(result.facts["loader"]).startswith("learnable")
    raw, evaluation = result.facts[CURVE_KEY], result.facts[EVAL_KEY]
    assert isinstance(raw, dict) and isinstance(evaluation, dict)
    assert "skipped" not in evaluation, evaluation
    return Curve.from_dict(raw), float(raw["target"]["loss"]), evaluation, Floor(float(raw["target"]["best"]))


def test_llama_tiny_learns_what_only_context_predicts(framework_python: str, tmp_path: Path) -> None:
    """Paddle's llama_tiny goes below the loss of the best context-free predictor of the Markov source (the
    entropy of its stationary distribution, 4.07 nats): half-way from there to the entropy rate (2.38), which
    only a model that reads the previous token can reach. Both figures come from the source's transition matrix,
    the verdict from the controller's judge. About 200 steps, 15 CPU-seconds; the case's own target (entropy
    rate + 0.25, ~500 steps) is the matrix test below."""
    source = MarkovTokens(MARKOV_STATES)
    pi = stationary(source.transition)
    context_free = float(-(pi * np.log(pi)).sum())
    target = round((context_free + source.best_loss) / 2, 3)
    curve, asked, evaluation, floor = _converge(framework_python, tmp_path, target, 600)
    assert asked == target
    judged = judge(curve, target, evaluation=evaluation, floor=floor)
    assert judged.verdict == "converged", (judged.reason, curve.losses)
    assert curve.losses[0] > context_free > target >= curve.losses[-1]
    held_out = evaluation["target"]
    assert held_out["examples"] > 0 and held_out["loss"] < context_free  # the weights, read afresh, use context


def test_moe_tiny_learns_what_only_context_predicts(framework_python: str, tmp_path: Path) -> None:
    """Paddle's moe_tiny (8 experts, top-2, the auxiliary loss on) to the same half-way target, judged by the
    controller's judge on the held-out loss of its weights evaluated in a fresh process (dlbench/evaluate.py:
    the model rebuilt from its definition, the loss computed in numpy), not by the trainer's own loss alone: the
    weights at the target must score below the best context-free loss on examples no training step drew, and
    above the Bayes predictor's loss on the same examples."""
    source = MarkovTokens(MARKOV_STATES)
    pi = stationary(source.transition)
    context_free = float(-(pi * np.log(pi)).sum())
    target = round((context_free + source.best_loss) / 2, 3)
    curve, _, evaluation, floor = _converge(framework_python, tmp_path, target, 600, "moe_tiny")
    judged = judge(curve, target, evaluation=evaluation, floor=floor)
    assert judged.verdict == "converged", (judged.reason, curve.losses)
    held_out = evaluation["target"]
    assert held_out["bayes"] < held_out["loss"] < context_free, held_out


@pytest.mark.matrix
def test_llama_tiny_reaches_its_own_target(framework_python: str, tmp_path: Path) -> None:
    """The case's own target and budget (entropy rate + 0.25 in 1000 steps): converged in ~480 steps here, once
    AdamW's weight decay was decoupled as torch's (paddle's Adam with weight_decay adds an L2 term instead)."""
    curve, target, evaluation, floor = _converge(framework_python, tmp_path, None, None)
    judged = judge(curve, target, evaluation=evaluation, floor=floor)
    assert judged.verdict == "converged", (judged.reason, curve.losses)


def test_llama_and_moe_through_the_cli_on_one_and_two_ranks(
    framework_python: str, cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    """`dlbench run -f paddle -m llama_tiny,moe_tiny --devices-per-node 2`: on one device both train, with their
    FLOPs by the family's convention, the MoE's total and active parameters (torch's figures) and its routing; on
    two fleet ranks (DataParallel on gloo) each ends with both ranks' parameters identical (one checksum)."""
    store = tmp_path / "r.db"
    code, out, err = cli(
        "run", "-f", "paddle", "-m", "llama_tiny,moe_tiny", "--devices-per-node", "2", *SMALL, "--store", str(store)
    )
    assert code == 0, err
    assert "6N+attn/2" in out and "6Nact+attn/2" in out and "tokens/s" in out
    points = stored(store)
    assert sorted((r.spec.model, r.spec.world_size) for r in points) == [
        ("llama_tiny", 1),
        ("llama_tiny", 2),
        ("moe_tiny", 1),
        ("moe_tiny", 2),
    ]
    for r in points:
        assert r.status == "ok" and r.metrics is not None, r.error
        assert math.isfinite(r.metrics.final_loss or math.nan)
        if r.spec.world_size == 2:
            assert_ranks_in_sync(r, 2)
            assert r.extra.get("paddle_parallel") == "fleet.distributed_model -> DataParallel"
    code, out, _ = cli("results", "--format", "json", "--store", str(store))
    rows = {row["spec"]["model"]: row for row in json.loads(out) if row["spec"]["devices_per_node"] == 1}
    assert "causal attention counted as half" in rows["llama_tiny"]["llm"]["flop_convention"]
    moe = rows["moe_tiny"]
    assert (moe["llm"]["params_total"], moe["llm"]["params_active"]) == (484_672, 189_760)
    routing = moe["extra"]["routing"]
    per_step = 2 * 16 * 2  # 2 sequences x 16 tokens x top-2
    sums = {sum(layer) for layer in routing["tokens_per_expert"]}
    assert len(sums) == 1 and sums.pop() == per_step * (1 + 2)  # every layer: the warm-up and 2 measured steps
    assert routing["imbalance_max"] >= 1.0 and routing["dropped_fraction"] == 0.0
