"""DeepSeek-V3's and GPT-OSS's pieces in the torch MoE decoder (#48), each against a reference written out here: the
modules hold exactly the case's count; group-limited choice with the routing bias, the gate weights and the
shared expert token by token; the sequence-wise auxiliary loss by its definition; the bias balance's sign rule;
GPT-OSS's sink attention and sliding window query by query, its clamped SwiGLU; latent attention is causal and
its rotary key shared; the routing history's windows; a one-device point records the balance over its steps."""

from __future__ import annotations

import math

import pytest

from dlbench.cases import get_case
from dlbench.cases.moe import moe_arch
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext

torch = pytest.importorskip("torch", reason="torch is not installed in this environment")

from dlbench.backends.torch.backend import TorchBackend  # noqa: E402
from dlbench.backends.torch.distributed import GradSync  # noqa: E402
from dlbench.backends.torch.models import build_model, count_trainable  # noqa: E402
from dlbench.backends.torch.moe import moe_layers  # noqa: E402
from dlbench.backends.torch.moe_attention import Expert, LatentAttention, SinkAttention  # noqa: E402
from dlbench.backends.torch.routing import BiasBalance, RoutingHistory, choose, sequence_aux_loss  # noqa: E402


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("deepseek_tiny", {}),
        ("deepseek_tiny", {"q_rank": 0, "dense_layers": 0}),
        ("gpt_oss_tiny", {}),
        ("gpt_oss_tiny", {"window": 0, "shared_experts": 1}),
    ],
)
def test_the_model_has_exactly_the_cases_count(name: str, params: dict[str, int]) -> None:
    case = get_case(name).configured(params)
    assert count_trainable(build_model(case)) == case.param_count


def test_group_limited_choice_matches_a_brute_force_reference() -> None:
    torch.manual_seed(0)
    scores, bias = torch.rand(40, 16), torch.randn(16) * 0.1
    chosen = choose(scores, bias, top_k=4, groups=4, topk_groups=2)
    for t in range(40):
        biased = scores[t] + bias
        group_score = [sorted(biased[g * 4 : (g + 1) * 4].tolist())[-2:] for g in range(4)]
        best = sorted(range(4), key=lambda g: -sum(group_score[g]))[:2]
        allowed = [e for e in range(16) if e // 4 in best]
        want = sorted(allowed, key=lambda e: -float(biased[e]))[:4]
        assert sorted(chosen[t].tolist()) == sorted(want)


def test_deepseek_layer_matches_a_token_by_token_reference() -> None:
    """The bias steers the choice only; the gate weights are the unbiased sigmoid scores of the chosen, normalised
    and scaled by routed_scale; the shared expert is added for every token."""
    torch.manual_seed(1)
    layer = moe_layers(build_model(get_case("deepseek_tiny")))[0]
    cfg = layer.cfg
    with torch.no_grad():
        layer.score_bias.copy_(torch.randn(cfg.num_experts) * 0.05)
    t = torch.randn(2, 12, cfg.base.hidden_size)
    with torch.no_grad():
        got = layer(t)
        flat = t.reshape(-1, cfg.base.hidden_size)
        scores = layer.router(flat).float().sigmoid()
        chosen = choose(scores, layer.score_bias, cfg.top_k, cfg.groups, cfg.topk_groups)
        want = torch.zeros_like(flat)
        for i in range(flat.shape[0]):
            w = scores[i, chosen[i]]
            w = w / w.sum() * cfg.routed_scale
            for j, e in enumerate(chosen[i].tolist()):
                want[i] += w[j] * layer.experts[str(e)](flat[i : i + 1])[0]
            want[i] += layer.shared(flat[i : i + 1])[0]
    torch.testing.assert_close(got.reshape(-1, cfg.base.hidden_size), want, rtol=1e-5, atol=1e-6)


def test_sequence_aux_loss_is_deepseeks_definition() -> None:
    torch.manual_seed(2)
    b, s, e, k = 3, 10, 8, 2
    probs = torch.rand(b * s, e)
    probs = probs / probs.sum(-1, keepdim=True)
    chosen = torch.stack([torch.randperm(e)[:k] for _ in range(b * s)])
    want = 0.0
    for q in range(b):
        rows = range(q * s, (q + 1) * s)
        for i in range(e):
            f = e / (k * s) * sum(int(i in chosen[r].tolist()) for r in rows)
            p = sum(float(probs[r, i]) for r in rows) / s
            want += f * p / b
    assert float(sequence_aux_loss(probs, chosen, b, e)) == pytest.approx(want, rel=1e-6)


def test_bias_balance_moves_each_bias_toward_the_mean_load_after_the_step() -> None:
    layer = moe_layers(build_model(get_case("deepseek_tiny")))[0]
    e, rate = layer.cfg.num_experts, layer.cfg.bias_update_rate
    layer.step_counts = torch.arange(e, dtype=torch.int64)  # expert i took i assignments: mean (e - 1) / 2
    stepped: list[int] = []
    BiasBalance(GradSync(), [layer]).update(lambda: stepped.append(1))
    assert stepped == [1]
    mean = (e - 1) / 2
    want = [rate if i < mean else -rate for i in range(e)]  # no expert sits exactly on the mean here
    torch.testing.assert_close(layer.score_bias, torch.tensor(want))
    assert not layer.score_bias.requires_grad


def _sink_reference(att: SinkAttention, x: torch.Tensor) -> torch.Tensor:
    """Query by query: softmax over the allowed keys' scores and the head's sink logit, the sink's share dropped."""
    b, s, _ = x.shape
    d = att.head_dim
    from dlbench.backends.torch.llama import apply_rope, rope_tables

    q, k, v = (proj(x).view(b, s, -1, d) for proj in (att.wq, att.wk, att.wv))
    cos, sin = rope_tables(s, d, att.theta, x.device)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    out = torch.zeros(b, s, q.shape[2], d)
    for h in range(q.shape[2]):
        kv = h // att.groups
        for i in range(s):
            keys = [j for j in range(i + 1) if not att.window or i - j < att.window]
            logits = [float(q[0, i, h] @ k[0, j, kv]) / math.sqrt(d) for j in keys]
            z = torch.tensor([*logits, float(att.sinks[h]) if att.sinks is not None else -math.inf])
            p = z.softmax(-1)[:-1]
            out[0, i, h] = sum(p[n] * v[0, j, kv] for n, j in enumerate(keys))
    return att.wo(out.reshape(b, s, -1))


@pytest.mark.parametrize("layer", [0, 1])  # sliding window, full
def test_sink_attention_matches_a_query_by_query_reference(layer: int) -> None:
    torch.manual_seed(3)
    cfg = moe_arch(get_case("gpt_oss_tiny").configured({"window": 4}))
    att = SinkAttention(cfg, layer)
    with torch.no_grad():
        for p in att.parameters():
            p.normal_(0, 0.3)
    x = torch.randn(1, 9, cfg.base.hidden_size)
    assert att.window == (4 if layer == 0 else 0)
    with torch.no_grad():
        torch.testing.assert_close(att(x), _sink_reference(att, x), rtol=1e-4, atol=1e-5)
    att(x).sum().backward()
    assert att.sinks is not None and att.sinks.grad is not None and bool(att.sinks.grad.abs().sum() > 0)


def test_latent_attention_is_causal_and_shares_its_rotary_key() -> None:
    torch.manual_seed(4)
    cfg = moe_arch(get_case("deepseek_tiny"))
    assert cfg.mla is not None
    att = LatentAttention(cfg)
    x = torch.randn(1, 10, cfg.base.hidden_size)
    y = att(x)
    x2 = x.clone()
    x2[:, 6:] += 1.0  # change the future of position 5
    torch.testing.assert_close(att(x2)[:, :6], y[:, :6])
    assert not torch.allclose(att(x2)[:, 6:], y[:, 6:])
    assert att.wkv_a.out_features == cfg.mla.kv_rank + cfg.mla.rope  # one rotary key for every head
    assert att.wkv_b.out_features == cfg.base.num_heads * (cfg.mla.nope + cfg.mla.v)


def test_clamped_swiglu_is_gpt_oss_activation() -> None:
    e = Expert(1, 1, bias=True, clamped=True)
    with torch.no_grad():
        for lin in (e.w1, e.w2, e.w3):
            lin.weight.fill_(1.0)
            lin.bias.zero_()
    for x in (-9.0, -1.0, 0.5, 3.0, 9.0):
        g, u = min(x, 7.0), max(-7.0, min(x, 7.0))
        want = (u + 1) * g / (1 + math.exp(-1.702 * g))
        with torch.no_grad():
            assert float(e(torch.tensor([[x]]))) == pytest.approx(want, rel=1e-6)


def test_history_keeps_at_most_its_windows_over_any_number_of_steps() -> None:
    h = RoutingHistory(4)
    for step in range(100):
        h.add(torch.tensor([step, 0, 0, 1]))
    stacked = h.stacked()
    assert stacked.shape[0] <= 32 and h.span == 4 and h.steps == 100
    assert int(stacked[:, 3].sum()) == 100 and int(stacked[:, 0].sum()) == sum(range(100))
    assert int(stacked[0, 3]) == 4  # the first window holds steps 0-3


def test_a_one_device_point_trains_and_records_the_balance_over_its_steps() -> None:
    spec = PointSpec(
        framework="torch",
        model="deepseek_tiny",
        batch_size=2,
        protocol=Protocol(0, 1, 1, "median"),
        case_params=(("layers", 2), ("seq", 16)),
    )
    backend = TorchBackend()
    case = get_case("deepseek_tiny").configured(dict(spec.case_params))
    trainer = backend.build(spec, case, RankContext())
    batch = trainer.next_batch()
    losses = []
    for _ in range(4):
        trainer.train_step(batch)
        losses.append(trainer.loss())
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    routing = backend.facts()["routing"]
    assert isinstance(routing, dict)
    over = routing["imbalance_over_steps"]
    assert [w["steps"] for w in over] == [[0, 1], [1, 2], [2, 3], [3, 4]]
    assert all(w["imbalance_mean"] >= 1.0 for w in over)
    balance = routing["bias_balance"]
    assert balance["rate"] == 0.001 and balance["bias_spread_per_layer"][0] == pytest.approx(0.008, abs=1e-6)
