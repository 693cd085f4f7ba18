"""The diffusion-transformer family (#48): FLUX.1's multimodal diffusion transformer (MMDiT) trained by flow
matching, as MLPerf Training v6.0's text-to-image benchmark trains it; its shape as parameters, its members, its
exact parameter count and its model-FLOPs formula. Framework-free.

The model (Black Forest Labs' FLUX.1; Esser et al. 2024 for the MMDiT): image latents patched 2 x 2 into tokens
(``img_in``), T5 text embeddings (``txt_in``); a conditioning vector ``time_in(sinusoidal(1000 t)) +
vector_in(pooled CLIP embedding)`` (+ ``guidance_in`` for FLUX.1-dev); `double_blocks` double-stream blocks (image
and text each with their own adaptive-LayerNorm modulation ``Linear(h, 6h)``, QKV ``Linear(h, 3h)``, RMS-normalised
queries and keys, output projection and GELU MLP ``h -> r h -> h``; one joint attention over text then image
tokens); `single_blocks` single-stream blocks over the joined sequence (modulation ``Linear(h, 3h)``, one
``Linear(h, 3h + r h)`` for QKV and the MLP's input, one ``Linear(h + r h, h)``); a final adaptive LayerNorm
(``Linear(h, 2h)``) and ``Linear(h, patch^2 x channels)``. Rotary positions over (0, row, column) ids, the text's
all zero. Every Linear has a bias; LayerNorms have no weights.

Parameters of width h, MLP ratio r, patch width P (channels x patch^2), text width T, pooled width C, timestep
width D (256), head width d: ``img_in (P h + h) + txt_in (T h + h) + time_in (D h + h + h^2 + h) + vector_in
(C h + h + h^2 + h) [+ guidance_in (D h + h + h^2 + h)]`` + per double block ``2 (6 h^2 + 6 h + 3 h^2 + 3 h + 2 d
+ h^2 + h + 2 r h^2 + r h + h)`` + per single block ``3 h^2 + 3 h + (3 + r) h^2 + (3 + r) h + 2 d + (1 + r) h^2 +
h`` + ``2 h^2 + 2 h + P h + P``. FLUX.1-schnell's (MLPerf's model): 11,891,178,560; FLUX.1-dev's 11,901,408,320.

Training (``Loss("flow_matching")``): per sample a time t (``timesteps`` "uniform": t ~ U(0, 1), as torchtitan's
FLUX trainer, MLPerf's reference, draws it; "logit_normal": t = sigmoid(n), n ~ N(0, 1), Esser et al.'s choice)
and Gaussian noise e; the transformer sees ``x_t = (1 - t) x0 + t e`` at time t and regresses the velocity ``e -
x0``: the loss is the mean squared error over every latent element. Noise and times are drawn on the device in the
timed step, as MLPerf's step draws them.

What is and is not timed: MLPerf's benchmark trains the transformer only; the VAE and the T5 and CLIP text encoders
are frozen, and its recommended setup reads their outputs precomputed (torchtitan's preprocessed CC12M). dlbench
feeds synthetic stand-ins of those outputs (latents, text embeddings, pooled embeddings) made once on the device:
the timed step is the transformer's forward and backward, the optimizer step, and drawing the noise and times;
no encoder, no VAE, no data loading, no classifier-free-guidance prompt dropout (which swaps in the empty prompt's
embeddings in the loader).

Model FLOPs of one image (``FLOP_CONVENTION``): every parameter counts 6 FLOPs per use (2 forward, 4 backward):
image-stream parameters (img_in, the double blocks' image halves, the final projection) per image token, the
text stream's per text token, the single blocks' per joint token, and the modulations and embedders once per
sample; plus the attention scores and weighted values, ``12 L^2 h`` per block over L = image + text tokens
(not causal: the whole square). Images/s x this / the peak is the MFU.
"""

from __future__ import annotations

import dataclasses

from dlbench.cases import Case, CaseParam, LatentInput, Optimizer, register
from dlbench.cases.arch import DitConfig, Loss
from dlbench.cases.flops import register_forward_flops
from dlbench.spec import SpecError

FLOP_CONVENTION = (
    "6 x each parameter per use: image-stream per image token, text-stream per text token, single blocks per "
    "joint token, modulations and embedders per image; + 12 L^2 h per block (full attention)"
)
TIMESTEPS = ("uniform", "logit_normal")  # the `timesteps` parameter's 0 and 1

# FLUX.1-schnell's transformer (black-forest-labs/FLUX.1-schnell's transformer config: 19 double and 38 single
# blocks, 24 heads of 128, 64 input channels, joint attention width 4096, pooled projection 768, no guidance
# embedding), at MLPerf's shape: 256 x 256 images (32 x 32 latents of 16 channels) and 256 T5 tokens.
FLUX1 = DitConfig()  # 11,891,178,560 parameters
# The same blocks at CPU size: 2 double and 4 single blocks of width 128 (4 heads of 32), 16 x 16 latents (64
# image tokens) and 16 text tokens 64 wide.
DIT_TINY = DitConfig(
    hidden_size=128,
    num_heads=4,
    double_blocks=2,
    single_blocks=4,
    latent_side=16,
    text_tokens=16,
    text_dim=64,
    pooled_dim=32,
)

PARAM_NAMES = ("hidden", "heads", "double", "single", "mlp_ratio", "side", "text_tokens", "guidance", "timesteps")


def _linear(n_in: int, n_out: int) -> int:
    """A Linear with its bias."""
    return n_in * n_out + n_out


def _embedder(n_in: int, h: int) -> int:
    """An MLP embedder: Linear(n_in, h), SiLU, Linear(h, h)."""
    return _linear(n_in, h) + _linear(h, h)


def parts(a: DitConfig) -> dict[str, int]:
    """The parameters by where they act (FLOP_CONVENTION): per image token, per text token, per joint token
    (the single blocks), per sample (modulations and embedders)."""
    h, r, d = a.hidden_size, a.mlp_ratio, a.head_dim
    stream = _linear(h, 3 * h) + 2 * d + _linear(h, h) + _linear(h, r * h) + _linear(r * h, h)  # qkv, norms, proj, mlp
    single = _linear(h, (3 + r) * h) + 2 * d + _linear((1 + r) * h, h)
    per_sample = _embedder(a.time_dim, h) + _embedder(a.pooled_dim, h) + (_embedder(a.time_dim, h) if a.guidance else 0)
    per_sample += a.double_blocks * 2 * _linear(h, 6 * h) + a.single_blocks * _linear(h, 3 * h) + _linear(h, 2 * h)
    return {
        "image": _linear(a.patch_dim, h) + a.double_blocks * stream + _linear(h, a.patch_dim),
        "text": _linear(a.text_dim, h) + a.double_blocks * stream,
        "joint": a.single_blocks * single,
        "sample": per_sample,
    }


def param_count(a: DitConfig) -> int:
    """Trainable parameters of the transformer (this module's docstring)."""
    return sum(parts(a).values())


def dit_arch(case: Case) -> DitConfig:
    """The case's diffusion-transformer architecture."""
    if not isinstance(case.arch, DitConfig):
        raise TypeError(f"case {case.name} is not a diffusion transformer")
    return case.arch


def at_side(a: DitConfig, side: int | None) -> DitConfig:
    """The architecture at a latent side (--input-size), checked: a multiple of the patch."""
    if side is None or side == a.latent_side:
        return a
    if side % a.patch:
        raise SpecError(f"--input-size {side}: the latent side must be a multiple of the patch ({a.patch})")
    return dataclasses.replace(a, latent_side=side)


def flops_per_sample(case: Case, input_size: int | None = None) -> float:
    """Training FLOPs of one image by FLOP_CONVENTION."""
    a = at_side(dit_arch(case), input_size)
    p = parts(a)
    image, text = a.image_tokens, a.text_tokens
    joint = image + text
    uses = p["image"] * image + p["text"] * text + p["joint"] * joint + p["sample"]
    return 6.0 * uses + 12.0 * joint * joint * a.hidden_size * (a.double_blocks + a.single_blocks)


def point_figures(case: Case, input_size: int | None = None) -> dict[str, object]:
    """What a DiT point records about its model: parameters, tokens, timestep sampling, FLOPs per image with their
    convention, and what the timed step holds."""
    a = at_side(dit_arch(case), input_size)
    flops = flops_per_sample(case, input_size)
    return {
        "params_total": param_count(a),
        "image_tokens": a.image_tokens,
        "text_tokens": a.text_tokens,
        "timesteps": a.timesteps,
        "guidance_embedding": a.guidance,
        "flops_per_sample": {"model": flops, "hardware": flops, "convention": FLOP_CONVENTION},
        "timed": "the transformer's forward and backward, the optimizer step, the noise and times drawn on the "
        "device; not the VAE or the T5 and CLIP encoders (frozen: their outputs are synthetic inputs made once)",
    }


def _config(case: Case) -> DitConfig:
    """The architecture at the case's parameters, checked."""
    v = {n: case.param(n) for n in PARAM_NAMES}
    hidden, heads = v["hidden"], v["heads"]
    if hidden % heads or (hidden // heads) % 32:
        raise SpecError(
            f"case {case.name}: hidden ({hidden}) must be a multiple of heads ({heads}) and the head width a "
            "multiple of 32 (its rotary widths over text, row and column are d/8, 7d/16, 7d/16, each even)"
        )
    a = dit_arch(case)
    if v["side"] % a.patch:
        raise SpecError(f"case {case.name}: side ({v['side']}) must be a multiple of the patch ({a.patch})")
    return dataclasses.replace(
        a,
        hidden_size=hidden,
        num_heads=heads,
        double_blocks=v["double"],
        single_blocks=v["single"],
        mlp_ratio=v["mlp_ratio"],
        latent_side=v["side"],
        text_tokens=v["text_tokens"],
        guidance=bool(v["guidance"]),
        timesteps=TIMESTEPS[v["timesteps"]],  # type: ignore[arg-type]
    )


def _input(a: DitConfig) -> LatentInput:
    """The batch a shape takes."""
    return LatentInput(a.latent_channels, a.latent_side, a.text_tokens, a.text_dim, a.pooled_dim)


def _shaped(case: Case) -> Case:
    """The member at its parameters: architecture, parameter count and input."""
    arch = _config(case)
    return dataclasses.replace(case, arch=arch, param_count=param_count(arch), input=_input(arch))


def _params(a: DitConfig) -> tuple[CaseParam, ...]:
    """The family's parameters with this member's shape as their defaults."""
    return (
        CaseParam("hidden", a.hidden_size, "width of the transformer (FLUX.1: 3072)"),
        CaseParam("heads", a.num_heads, "attention heads; the head width a multiple of 32 (24 of 128)"),
        CaseParam("double", a.double_blocks, "double-stream blocks (19)", minimum=0),
        CaseParam("single", a.single_blocks, "single-stream blocks (38)", minimum=0),
        CaseParam("mlp_ratio", a.mlp_ratio, "MLP width over hidden (4)"),
        CaseParam("side", a.latent_side, "latent side: image side / 8 (MLPerf's 256 px: 32)"),
        CaseParam("text_tokens", a.text_tokens, "T5 tokens per prompt (MLPerf: 256)"),
        CaseParam("guidance", int(a.guidance), "1: FLUX.1-dev's guidance embedding, 0: schnell's none", choices=(0, 1)),
        CaseParam(
            "timesteps",
            TIMESTEPS.index(a.timesteps),
            "0: t ~ U(0, 1) (MLPerf's reference), 1: logit-normal (Esser et al. 2024)",
            choices=(0, 1),
        ),
    )


# MLPerf's reference (torchtitan's FLUX.1-schnell config): AdamW lr 1e-4, weight decay 0.1, betas (0.9, 0.95) (dlbench's
# AdamW keeps torch's 0.999). The tiny member trains at 1e-3 to reach --converge's target within its budget.
OPTIMIZER = Optimizer("adamw", lr=1e-4, weight_decay=0.1)
TINY_OPTIMIZER = Optimizer("adamw", lr=1e-3, weight_decay=0.1)


def _member(name: str, title: str, arch: DitConfig, optimizer: Optimizer, batch: int, notes: str) -> Case:
    """Register one member of the family: its shape as parameter defaults, its exact count."""
    return register(
        Case(
            name=name,
            title=title,
            task="text_to_image",
            input=_input(arch),
            optimizer=optimizer,
            param_count=param_count(arch),
            batch_fixed=batch,
            batch_cpu=batch,
            arch=arch,
            loss=Loss("flow_matching"),
            notes=notes,
            params=_params(arch),
            derive=_shaped,
        )
    )


FLUX1_CASE = _member(
    "flux1",
    "FLUX.1-schnell",
    FLUX1,
    OPTIMIZER,
    1,
    "FLUX.1-schnell's transformer at MLPerf's shape (256 px: 256 image + 256 text tokens), flow matching; the VAE "
    "and text encoders are frozen inputs (synthetic, not timed).",
)
DIT_TINY_CASE = _member(
    "dit_tiny",
    "DiT tiny",
    DIT_TINY,
    TINY_OPTIMIZER,
    4,
    "FLUX's blocks at CPU size: 2 double + 4 single blocks of 128, 64 image + 16 text tokens.",
)

__all__ = [
    "DIT_TINY",
    "FLOP_CONVENTION",
    "FLUX1",
    "OPTIMIZER",
    "PARAM_NAMES",
    "TIMESTEPS",
    "at_side",
    "dit_arch",
    "flops_per_sample",
    "param_count",
    "parts",
    "point_figures",
]

register_forward_flops(DitConfig, lambda case, input_size: flops_per_sample(case, input_size) / 3.0)
