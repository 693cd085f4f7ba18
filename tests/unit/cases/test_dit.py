"""The diffusion-transformer family (#48): FLUX.1's exact count written out from its transformer configuration,
independently of cases/dit.py's helpers; the FLOPs per image by the stated convention; shapes refused; the
refusals of layouts a DiT does not take; the convergence target on latent templates."""

from __future__ import annotations

import pytest

from dlbench.analysis.targets import target_for
from dlbench.cases import get_case
from dlbench.cases.dit import FLOP_CONVENTION, dit_arch, flops_per_sample, param_count, parts
from dlbench.cases.dit_layout import dit_layout_refusal
from dlbench.data.latents import LatentTemplates
from dlbench.parallel import Layout
from dlbench.spec import PointSpec, Protocol, SpecError

# black-forest-labs/FLUX.1-schnell transformer/config.json (diffusers' FluxTransformer2DModel): the keys' names.
FLUX_SCHNELL = {
    "in_channels": 64,
    "num_layers": 19,
    "num_single_layers": 38,
    "attention_head_dim": 128,
    "num_attention_heads": 24,
    "joint_attention_dim": 4096,
    "pooled_projection_dim": 768,
    "guidance_embeds": False,
}


def _flux_by_hand(c: dict[str, int | bool]) -> int:
    """The transformer's count from its configuration, module by module as diffusers names them."""
    h = int(c["attention_head_dim"]) * int(c["num_attention_heads"])
    d, p = int(c["attention_head_dim"]), int(c["in_channels"])

    def lin(n_in: int, n_out: int) -> int:
        return n_in * n_out + n_out

    time_text = lin(256, h) + lin(h, h) + lin(int(c["pooled_projection_dim"]), h) + lin(h, h)
    guidance = lin(256, h) + lin(h, h) if c["guidance_embeds"] else 0
    embedders = lin(int(c["joint_attention_dim"]), h) + lin(p, h)  # context_embedder, x_embedder
    # norm1 and norm1_context (6h each), to_q/k/v and add_q/k/v, to_out and to_add_out, four QK norms, ff and ff_context
    double = 2 * lin(h, 6 * h) + 6 * lin(h, h) + 2 * lin(h, h) + 4 * d + 2 * (lin(h, 4 * h) + lin(4 * h, h))
    # norm (3h), proj_mlp, to_q/k/v, proj_out over attention and MLP, two QK norms
    single = lin(h, 3 * h) + lin(h, 4 * h) + 3 * lin(h, h) + lin(5 * h, h) + 2 * d
    out = lin(h, 2 * h) + lin(h, p)  # norm_out, proj_out
    return time_text + guidance + embedders + int(c["num_layers"]) * double + int(c["num_single_layers"]) * single + out


def test_flux1_counts_match_its_configuration_exactly() -> None:
    case = get_case("flux1")
    assert _flux_by_hand(FLUX_SCHNELL) == case.param_count == param_count(dit_arch(case)) == 11_891_178_560
    dev = {**FLUX_SCHNELL, "guidance_embeds": True}  # FLUX.1-dev's guidance embedding
    assert _flux_by_hand(dev) == case.configured({"guidance": 1}).param_count == 11_901_408_320


def test_mlperf_shape_and_flops_by_the_stated_convention() -> None:
    case = get_case("flux1")
    a = dit_arch(case)
    assert (a.image_tokens, a.text_tokens, a.patch_dim, a.axes) == (256, 256, 64, (16, 56, 56))
    p = parts(a)
    assert sum(p.values()) == case.param_count
    h, joint, blocks = a.hidden_size, 512, 19 + 38
    by_hand = 6 * (256 * p["image"] + 256 * p["text"] + joint * p["joint"] + p["sample"]) + 12 * joint**2 * h * blocks
    assert flops_per_sample(case) == pytest.approx(by_hand)
    # One more text token: the text stream's and the single blocks' parameters once more, the modulations not
    more = case.configured({"text_tokens": 257})
    attention = 12 * (joint + 1) ** 2 * h * blocks - 12 * joint**2 * h * blocks
    assert flops_per_sample(more) - flops_per_sample(case) == pytest.approx(6 * (p["text"] + p["joint"]) + attention)
    assert "per image token" in FLOP_CONVENTION and "12 L^2 h" in FLOP_CONVENTION
    assert flops_per_sample(case, 16) < flops_per_sample(case)  # --input-size shrinks the latent side


@pytest.mark.parametrize(
    ("params", "match"),
    [({"heads": 8}, "multiple of 32"), ({"hidden": 100}, "multiple of heads"), ({"side": 15}, "patch")],
)
def test_shapes_the_transformer_cannot_take_are_refused(params: dict[str, int], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        get_case("dit_tiny").configured(params)


def _spec(
    devices: int = 1, framework: str = "torch", model: str = "dit_tiny", strategy: str = "none", **lay: object
) -> PointSpec:
    return PointSpec(
        framework=framework,
        model=model,
        batch_size=2,
        protocol=Protocol(0, 1, 1, "median"),
        devices_per_node=devices,
        strategy=strategy,
        layout=Layout(**lay),  # type: ignore[arg-type]
    )


def test_layouts_a_dit_does_not_take_are_refused_in_one_line() -> None:
    assert dit_layout_refusal(_spec(2, fsdp=True)) is None
    assert dit_layout_refusal(_spec(recompute=True)) is None
    assert "tensor or pipeline" in str(dit_layout_refusal(_spec(2, tensor_parallel=2)))
    assert "torch only" in str(dit_layout_refusal(_spec(2, "jax", fsdp=True)))
    assert "--strategy" in str(dit_layout_refusal(_spec(2, fsdp=True, strategy="ddp")))
    assert dit_layout_refusal(_spec(2, model="llama_tiny", tensor_parallel=2)) is None


def test_the_convergence_target_sits_between_the_best_and_the_blind_loss() -> None:
    case = get_case("dit_tiny")
    target = target_for(case)
    assert target is not None and target.best_loss == 0.0
    source = LatentTemplates(case.input, 8)  # type: ignore[arg-type]
    assert 1.75 < source.blind_loss < 2.0  # +-1 templates: 1 + Var(x0) over 8 of them (7/8 in expectation)
    assert target.best_loss < target.loss < source.blind_loss / 2
    a, b = source.batch(0, 4), source.batch(0, 4)
    assert all((a[k] == b[k]).all() for k in a)  # the same batch for the same step
    assert a["latents"].shape == (4, 16, 8, 8) and a["text"].shape == (4, 16, 64)
    for i in range(4):  # the text names the latent: equal texts, equal latents
        j = int(((source.text - a["text"][i]) ** 2).sum(axis=(1, 2)).argmin())
        assert (source.latents[j] == a["latents"][i]).all()
