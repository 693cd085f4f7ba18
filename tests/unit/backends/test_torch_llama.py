"""The torch Llama (#35) on one CPU device: exact parameter counts (the 8B and 1B on the meta device), the parts
that make it a Llama (rotary positions see only relative offsets, grouped-query attention equals repeating the
key/value heads, a tied head is the embedding), and a point built as the backend builds it trains."""

from __future__ import annotations

import dataclasses

import pytest

from dlbench.cases import get_case
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext

torch = pytest.importorskip("torch", reason="torch is not installed in this environment")

from dlbench.backends.torch.backend import TorchBackend  # noqa: E402
from dlbench.backends.torch.data import synthetic_batch  # noqa: E402
from dlbench.backends.torch.llama import Attention, LlamaModel, apply_rope, rope_tables  # noqa: E402
from dlbench.backends.torch.models import build_model, count_trainable  # noqa: E402
from dlbench.worker import refusal  # noqa: E402


@pytest.mark.parametrize("name", ["llama3_8b", "llama3_1b", "llama_tiny"])
def test_the_model_has_the_case_count(name: str) -> None:
    case = get_case(name)
    with torch.device("meta"):  # shapes only: no memory for 8 B parameters
        assert count_trainable(build_model(case)) == case.param_count


def test_a_tied_head_is_the_embedding() -> None:
    model = LlamaModel(get_case("llama_tiny").configured({"tied": 1}).arch)  # type: ignore[arg-type]
    assert model.lm_head.weight is model.wte.weight
    untied = LlamaModel(get_case("llama_tiny").arch)  # type: ignore[arg-type]
    assert not torch.equal(untied.lm_head.weight, untied.wte.weight)


def test_rotary_scores_depend_on_the_offset_only() -> None:
    torch.manual_seed(0)
    d, seq = 16, 12
    q, k = torch.randn(1, 1, 1, d), torch.randn(1, 1, 1, d)
    cos, sin = rope_tables(seq, d, 10000.0, torch.device("cpu"))

    def score(i: int, j: int) -> float:
        qi = apply_rope(q.expand(1, seq, 1, d), cos, sin)[0, i, 0]
        kj = apply_rope(k.expand(1, seq, 1, d), cos, sin)[0, j, 0]
        return float(qi @ kj)

    assert score(5, 2) == pytest.approx(score(9, 6), rel=1e-5)  # the same offset: the same score
    assert score(5, 2) != pytest.approx(score(5, 4), rel=1e-3)
    assert float(apply_rope(q, cos[:1], sin[:1]).norm()) == pytest.approx(float(q.norm()), rel=1e-6)  # a rotation


def test_grouped_query_attention_is_repeated_key_value_heads() -> None:
    torch.manual_seed(0)
    cfg = get_case("llama_tiny").arch  # 8 query heads over 4 key/value heads
    attn = Attention(cfg)  # type: ignore[arg-type]
    x = torch.randn(2, 10, cfg.hidden_size)  # type: ignore[union-attr]
    b, s, d = 2, 10, cfg.head_dim  # type: ignore[union-attr]
    q, k, v = (p(x).view(b, s, -1, d) for p in (attn.wq, attn.wk, attn.wv))
    cos, sin = rope_tables(s, d, cfg.rope_theta, x.device)  # type: ignore[union-attr]
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    group = q.shape[2] // k.shape[2]
    k, v = (t.repeat_interleave(group, dim=2) for t in (k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
    )
    want = attn.wo(ref.transpose(1, 2).reshape(b, s, -1))
    torch.testing.assert_close(attn(x), want, rtol=1e-5, atol=1e-6)


def test_a_point_trains_on_one_device_and_records_its_flop_convention() -> None:
    case = dataclasses.replace(get_case("llama_tiny").configured({"seq": 32}))
    spec = PointSpec(
        framework="torch",
        model="llama_tiny",
        batch_size=4,
        protocol=Protocol(0, 1, 1, "median"),
        case_params=(("seq", 32),),
    )
    backend = TorchBackend()
    assert refusal(backend, spec) is None  # the worker's whole check: the table's rules, then torch's
    torch.manual_seed(0)
    trainer = backend.build(spec, case, RankContext())
    batch = synthetic_batch(case, 4, torch.device("cpu"), seed=1)
    losses = []
    for _ in range(4):
        trainer.train_step(batch)
        losses.append(trainer.loss())
    assert losses[0] == pytest.approx(torch.log(torch.tensor(1024.0)).item(), abs=0.1)  # uniform at the start
    assert losses[-1] < losses[0] - 0.1  # it trains
    flops = backend.facts()["llm_flops_per_sample"]
    assert flops["model"] == pytest.approx(case.train_flops_per_sample())  # type: ignore[index]
    assert "causal attention counted as half" in flops["convention"]  # type: ignore[index]


def test_the_backend_counts_the_8b_without_its_memory() -> None:
    """`dlbench setup`'s case check counts every case: the 8B is counted on the meta device, not in 32 GB."""
    assert TorchBackend().count_params(get_case("llama3_8b")) == 8_030_261_248
