"""The Llama and MoE families in TensorFlow/Keras 3 (#46), from the backend-agnostic Keras code in backends/keras:
exact counts without allocating the big members, torch's logits with torch's weights, learning what only context
predicts under --converge, and `dlbench run -f tf -m llama_tiny,moe_tiny` as a user types it.

TF runs in its environment's interpreter (a worker, or a script), so this file never imports TF or Keras; torch,
the reference, runs here. Without the tf environment every test skips, naming it (`dlbench setup tf`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.cases import get_case
from dlbench.cases.llama import llama_arch, param_count
from dlbench.cases.moe import moe_arch
from tests.support import decoders
from tests.support.scaling import stored

pytestmark = [pytest.mark.framework("tf"), pytest.mark.slow]

# Loads torch's weights (an .npz of its state dict) into Keras' build of each member and writes Keras' logits on the
# same token ids. A Keras kernel is [in, out], torch's weight [out, in]: transposed; the embedding is not.
SAME_MODEL = """
import sys
import numpy as np
from dlbench.backends.tf.models import build_model
from dlbench.backends.keras.moe import MoeFeedForward
from dlbench.cases import get_case

folder = sys.argv[1]
for name in sys.argv[2:]:
    w = np.load(f"{folder}/{name}.weights.npz")
    model = build_model(get_case(name))
    used = set()

    def put(variable, key, transpose=True):
        used.add(key)
        value = w[key].T if transpose else w[key]
        assert tuple(value.shape) == tuple(variable.shape), (key, value.shape, variable.shape)
        variable.assign(value.astype("float32"))

    def swiglu(layer, prefix):
        for part in ("w1", "w2", "w3"):
            put(getattr(layer, part).kernel, f"{prefix}.{part}.weight")

    put(model.wte, "wte.weight", transpose=False)
    for i, block in enumerate(model.blocks):
        p = f"blocks.{i}"
        put(block.attention_norm.weight, f"{p}.attention_norm.weight", False)
        put(block.ffn_norm.weight, f"{p}.ffn_norm.weight", False)
        for part in ("wq", "wk", "wv", "wo"):
            put(getattr(block.attention, part).kernel, f"{p}.attention.{part}.weight")
        ff = block.feed_forward
        if isinstance(ff, MoeFeedForward):
            put(ff.router.kernel, f"{p}.feed_forward.router.weight")
            for j, expert in enumerate(ff.experts):
                swiglu(expert, f"{p}.feed_forward.experts.{j}")
        else:
            swiglu(ff, f"{p}.feed_forward")
    put(model.norm.weight, "norm.weight", False)
    if model.lm_head is not None:
        put(model.lm_head.kernel, "lm_head.weight")
    assert used == set(w.files), sorted(set(w.files) - used)
    out = model(np.load(f"{folder}/{name}.ids.npy").astype("int32"))
    logits = out[0] if isinstance(out, tuple) else out
    np.save(f"{folder}/{name}.tf.npy", np.asarray(logits))
"""


def test_exact_counts_of_the_big_members_without_allocating_them(framework_python: str, tmp_path: Path) -> None:
    """The tf backend counts every Llama and MoE member exactly, the 8B, 70B and Mixtral included, from their Keras
    builds made inside keras.StatelessScope (no weight allocated: 70B parameters would need 276 GB). The reference
    is the published configuration's formula (cases/llama.param_count) per member, the MoE's from its experts'
    widths, and the model cards' figures. (test_tf.py's count of every case checks them against the cases too.)"""
    names = ("llama_tiny", "llama3_1b", "llama3_8b", "llama2_70b", "moe_tiny", "mixtral_8x7b")
    answer = decoders.member_counts(framework_python, tmp_path, "tf", names)
    for name in names[:4]:
        assert answer[name] == param_count(llama_arch(get_case(name))), name
    assert answer["llama3_8b"] == 8_030_261_248  # Meta's Llama-3-8B
    for name in names[4:]:
        a = moe_arch(get_case(name))
        h, ff = a.base.hidden_size, a.expert_ffn
        dense = param_count(a.base) - a.base.num_layers * 3 * h * a.base.ffn_size  # the Llama without its MLPs
        assert answer[name] == dense + a.base.num_layers * a.num_experts * (3 * h * ff + h), name
    assert answer["mixtral_8x7b"] == 46_702_792_704  # Mistral's Mixtral-8x7B


def test_llama_and_moe_give_torchs_logits_with_torchs_weights(framework_python: str, tmp_path: Path) -> None:
    """Same weights, same tokens, same logits (fp32): RMSNorm, rotary positions, grouped-query attention, SwiGLU,
    and the MoE's top-k routing and (dense) dispatch compute what torch's do. The reference is the torch backend's
    model, run here."""
    want = decoders.torch_reference(tmp_path, parameters_only=True)  # not its buffers (a zero score bias)
    decoders.run_script(framework_python, tmp_path, SAME_MODEL, str(tmp_path), *decoders.REFERENCE, timeout=300)
    decoders.assert_same_logits(tmp_path, "tf", want)


def test_llama_tiny_learns_what_only_context_predicts(framework_python: str, tmp_path: Path) -> None:
    """TF's llama_tiny under --converge goes below the loss of the best context-free predictor of the Markov source
    (the entropy of its stationary distribution, 4.07 nats): half-way from there to the entropy rate (2.38), which
    only a model that reads the previous token can reach. Both figures come from the source's transition matrix,
    the verdict from the controller's judge."""
    context_free, target = decoders.halfway_target()
    point = decoders.converge(framework_python, tmp_path, "tf", target, 600)
    judged = point.judged(evaluated=False)
    assert point.target == target and judged.verdict == "converged", (judged.reason, point.curve.losses)
    assert point.curve.losses[0] > context_free > target >= point.curve.losses[-1]


def test_llama_and_moe_through_the_cli(
    framework_python: str, cli: Callable[..., decoders.CliResult], tmp_path: Path
) -> None:
    """`dlbench run -f tf -m llama_tiny,moe_tiny`: both train, with their FLOPs by the family's convention, the
    MoE's total and active parameters (torch's figures), its dispatch and the routing its steps did."""
    store = tmp_path / "r.db"
    code, out, err = cli("run", "-f", "tf", "-m", "llama_tiny,moe_tiny", *decoders.SMALL, "--store", str(store))
    assert code == 0, err
    assert "6N+attn/2" in out and "6Nact+attn/2" in out and "tokens/s" in out
    points = stored(store)
    assert sorted(r.spec.model for r in points) == ["llama_tiny", "moe_tiny"]
    decoders.assert_trained(points)
    rows = decoders.decoder_rows(cli, store)
    assert str(rows["moe_tiny"]["extra"]["moe_dispatch"]).startswith("dense")
