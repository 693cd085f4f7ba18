"""The Llama and MoE families in PaddlePaddle (#46): the same model as torch's, training to the Markov source's
target, and `dlbench run -f paddle -m llama_tiny,moe_tiny` as a user types it, on one device and two fleet ranks.

Paddle runs in its environment's interpreter (a worker, or a script), so this file never imports paddle; torch,
the reference, runs here. Without the paddle environment every test skips, naming it (`dlbench setup paddle`).
The exact parameter counts of every member are test_paddle.py's (`dlbench.check params paddle`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import decoders
from tests.support.scaling import assert_ranks_in_sync, stored

pytestmark = [pytest.mark.framework("paddle"), pytest.mark.slow]

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
    want = decoders.torch_reference(tmp_path)
    decoders.run_script(framework_python, tmp_path, SAME_MODEL, str(tmp_path), *decoders.REFERENCE, timeout=300)
    decoders.assert_same_logits(tmp_path, "paddle", want)


def test_llama_tiny_learns_what_only_context_predicts(framework_python: str, tmp_path: Path) -> None:
    """Paddle's llama_tiny goes below the loss of the best context-free predictor of the Markov source (the
    entropy of its stationary distribution, 4.07 nats): half-way from there to the entropy rate (2.38), which
    only a model that reads the previous token can reach. Both figures come from the source's transition matrix,
    the verdict from the controller's judge. About 200 steps, 15 CPU-seconds; the case's own target (entropy
    rate + 0.25, ~500 steps) is the matrix test below."""
    context_free, target = decoders.halfway_target()
    point = decoders.converge(framework_python, tmp_path, "paddle", target, 600)
    judged = point.judged()
    assert point.target == target and judged.verdict == "converged", (judged.reason, point.curve.losses)
    assert point.curve.losses[0] > context_free > target >= point.curve.losses[-1]
    held_out = point.evaluation()["target"]
    assert held_out["examples"] > 0 and held_out["loss"] < context_free  # the weights, read afresh, use context


def test_moe_tiny_learns_what_only_context_predicts(framework_python: str, tmp_path: Path) -> None:
    """Paddle's moe_tiny (8 experts, top-2, the auxiliary loss on) to the same half-way target, judged by the
    controller's judge on the held-out loss of its weights evaluated in a fresh process (dlbench/evaluate.py:
    the model rebuilt from its definition, the loss computed in numpy), not by the trainer's own loss alone: the
    weights at the target must score below the best context-free loss on examples no training step drew, and
    above the Bayes predictor's loss on the same examples."""
    context_free, target = decoders.halfway_target()
    point = decoders.converge(framework_python, tmp_path, "paddle", target, 600, "moe_tiny")
    judged = point.judged()
    assert judged.verdict == "converged", (judged.reason, point.curve.losses)
    held_out = point.evaluation()["target"]
    assert held_out["bayes"] < held_out["loss"] < context_free, held_out


@pytest.mark.matrix
def test_llama_tiny_reaches_its_own_target(framework_python: str, tmp_path: Path) -> None:
    """The case's own target and budget (entropy rate + 0.25 in 1000 steps): converged in ~480 steps here, once
    AdamW's weight decay was decoupled as torch's (paddle's Adam with weight_decay adds an L2 term instead)."""
    point = decoders.converge(framework_python, tmp_path, "paddle", None, None)
    judged = point.judged()
    assert judged.verdict == "converged", (judged.reason, point.curve.losses)


def test_llama_and_moe_through_the_cli_on_one_and_two_ranks(
    framework_python: str, cli: Callable[..., decoders.CliResult], tmp_path: Path
) -> None:
    """`dlbench run -f paddle -m llama_tiny,moe_tiny --devices-per-node 2`: on one device both train, with their
    FLOPs by the family's convention, the MoE's total and active parameters (torch's figures) and its routing; on
    two fleet ranks (DataParallel on gloo) each ends with both ranks' parameters identical (one checksum)."""
    store = tmp_path / "r.db"
    code, out, err = cli(
        "run",
        "-f",
        "paddle",
        "-m",
        "llama_tiny,moe_tiny",
        "--devices-per-node",
        "2",
        *decoders.SMALL,
        "--store",
        str(store),
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
    decoders.assert_trained(points)
    for r in points:
        if r.spec.world_size == 2:
            assert_ranks_in_sync(r, 2)
            assert r.extra.get("paddle_parallel") == "fleet.distributed_model -> DataParallel"
    decoders.decoder_rows(cli, store, keep=lambda row: row["spec"]["devices_per_node"] == 1)
