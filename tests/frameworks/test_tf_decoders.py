"""The Llama and MoE families in TensorFlow/Keras 3 (#46), from the backend-agnostic Keras code in backends/keras:
exact counts without allocating the big members, torch's logits with torch's weights, learning what only context
predicts under --converge, and `dlbench run -f tf -m llama_tiny,moe_tiny` as a user types it.

TF runs in its environment's interpreter (a worker, or a script), so this file never imports TF or Keras; torch,
the reference, runs here. Without the tf environment every test skips, naming it (`dlbench setup tf`).
"""

from __future__ import annotations

import json
import math
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlbench.analysis.convergence import CURVE_KEY, judge
from dlbench.cases import get_case
from dlbench.cases.llama import llama_arch, param_count
from dlbench.cases.moe import moe_arch
from dlbench.data.learnable import MARKOV_STATES, MarkovTokens, stationary
from dlbench.protocol.converge import Curve
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import read_result
from tests.support.scaling import stored

pytestmark = [pytest.mark.framework("tf"), pytest.mark.slow]
CliResult = tuple[int, str, str]
SMALL = ("--input-size", "16", "-b", "2", "--warmup", "1", "--steps", "2", "--repeats", "1", "--threads", "1")

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


COUNT = """
import json, sys
from dlbench.backends.tf.backend import TfBackend
from dlbench.cases import get_case

backend = TfBackend()
print(json.dumps({name: backend.count_params(get_case(name)) for name in sys.argv[1:]}))
"""


def test_exact_counts_of_the_big_members_without_allocating_them(framework_python: str, tmp_path: Path) -> None:
    """The tf backend counts every Llama and MoE member exactly, the 8B, 70B and Mixtral included, from their Keras
    builds made inside keras.StatelessScope (no weight allocated: 70B parameters would need 276 GB). The reference
    is the published configuration's formula (cases/llama.param_count) per member, the MoE's from its experts'
    widths, and the model cards' figures. (test_tf.py's count of every case checks them against the cases too.)"""
    names = ("llama_tiny", "llama3_1b", "llama3_8b", "llama2_70b", "moe_tiny", "mixtral_8x7b")
    script = tmp_path / "count.py"
    script.write_text(COUNT)
    proc = subprocess.run([framework_python, str(script), *names], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
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
    torch = pytest.importorskip("torch", reason="torch (the reference) is not installed: pip install -e '.[torch]'")
    from dlbench.backends.torch.llama import LlamaModel
    from dlbench.backends.torch.moe import MoeModel

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
        trained = {k: v.detach().numpy() for k, v in model.named_parameters()}  # not its buffers (a zero score bias)
        np.savez(tmp_path / f"{name}.weights.npz", **trained)
        np.save(tmp_path / f"{name}.ids.npy", ids.numpy())
    script = tmp_path / "same_model.py"
    script.write_text(textwrap.dedent(SAME_MODEL))
    proc = subprocess.run(
        [framework_python, str(script), str(tmp_path), *reference], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name, want in logits.items():
        got = np.load(tmp_path / f"{name}.tf.npy")
        assert got.shape == want.shape and float(np.abs(want).max()) > 0.1, name  # logits of some size
        assert np.allclose(got, want, rtol=0, atol=1e-5), (name, float(np.abs(got - want).max()))


def test_llama_tiny_learns_what_only_context_predicts(framework_python: str, tmp_path: Path) -> None:
    """TF's llama_tiny under --converge goes below the loss of the best context-free predictor of the Markov source
    (the entropy of its stationary distribution, 4.07 nats): half-way from there to the entropy rate (2.38), which
    only a model that reads the previous token can reach. Both figures come from the source's transition matrix,
    the verdict from the controller's judge."""
    source = MarkovTokens(MARKOV_STATES)
    pi = stationary(source.transition)
    context_free = float(-(pi * np.log(pi)).sum())
    target = round((context_free + source.best_loss) / 2, 3)
    spec = PointSpec(
        framework="tf",
        model="llama_tiny",
        batch_size=8,
        input_size=16,
        threads=1,
        protocol=Protocol(0, 1, 1, "median"),
        converge=True,
        converge_target=target,
        converge_steps=600,
    )
    (tmp_path / "spec.json").write_text(spec.to_json())
    proc = subprocess.run(
        [framework_python, "-m", "dlbench.worker", str(tmp_path / "spec.json"), str(tmp_path / "result.json")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = read_result(tmp_path / "result.json")
    assert result.status == "ok", result.error
    assert str(result.facts["loader"]).startswith("learnable")
    raw = result.facts[CURVE_KEY]
    assert isinstance(raw, dict) and float(raw["target"]["loss"]) == target
    curve = Curve.from_dict(raw)
    judged = judge(curve, target)
    assert judged.verdict == "converged", (judged.reason, curve.losses)
    assert curve.losses[0] > context_free > target >= curve.losses[-1]


def test_llama_and_moe_through_the_cli(framework_python: str, cli: Callable[..., CliResult], tmp_path: Path) -> None:
    """`dlbench run -f tf -m llama_tiny,moe_tiny`: both train, with their FLOPs by the family's convention, the
    MoE's total and active parameters (torch's figures), its dispatch and the routing its steps did."""
    store = tmp_path / "r.db"
    code, out, err = cli("run", "-f", "tf", "-m", "llama_tiny,moe_tiny", *SMALL, "--store", str(store))
    assert code == 0, err
    assert "6N+attn/2" in out and "6Nact+attn/2" in out and "tokens/s" in out
    points = stored(store)
    assert sorted(r.spec.model for r in points) == ["llama_tiny", "moe_tiny"]
    for r in points:
        assert r.status == "ok" and r.metrics is not None, r.error
        assert math.isfinite(r.metrics.final_loss or math.nan)
    code, out, _ = cli("results", "--format", "json", "--store", str(store))
    rows = {row["spec"]["model"]: row for row in json.loads(out)}
    assert "causal attention counted as half" in rows["llama_tiny"]["llm"]["flop_convention"]
    moe = rows["moe_tiny"]
    assert (moe["llm"]["params_total"], moe["llm"]["params_active"]) == (484_672, 189_760)
    assert str(moe["extra"]["moe_dispatch"]).startswith("dense")
    routing = moe["extra"]["routing"]
    per_step = 2 * 16 * 2  # 2 sequences x 16 tokens x top-2
    sums = {sum(layer) for layer in routing["tokens_per_expert"]}
    assert len(sums) == 1 and sums.pop() == per_step * (1 + 2)  # every layer: the warm-up and 2 measured steps
    assert routing["imbalance_max"] >= 1.0 and routing["dropped_fraction"] == 0.0
