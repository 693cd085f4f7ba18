"""FLUX.1's multimodal diffusion transformer in pure torch (#48), and its flow-matching loss (cases/dit.py says
what it is; its trainable parameters are exactly cases.dit.param_count).

Layout as Black Forest Labs' reference and torchtitan's: ``img_in``, ``txt_in``, ``time_in`` and ``vector_in``
(``guidance_in``) embedders; ``double_blocks`` (per stream ``*_mod``, ``*_qkv``, ``*_q_norm``/``*_k_norm``,
``*_proj``, ``*_mlp_in``/``*_mlp_out``), ``single_blocks`` (``mod``, ``linear1``, ``q_norm``/``k_norm``,
``linear2``), ``final_mod`` and ``final``. Attention is ``scaled_dot_product_attention`` over the joined text and
image tokens (no mask); rotary positions turn rotate-half pairs (the reference turns adjacent pairs: a fixed
permutation of each head's channels, the same parameters and FLOPs). GELU is the tanh approximation; LayerNorms
have no weights, eps 1e-6.

Init (torchtitan's, after DiT's adaLN-Zero): every modulation and the final projection zero, so each block starts
as the identity and the output at zero; attention and MLP matrices Xavier-uniform, embedders normal(0, 0.02),
biases zero, norms one; each parameter from a generator of its own name (as gpt.py), so that FSDP's shards start
from the whole model's values.

The loss draws, per sample, a time t and Gaussian noise on the device from the model's own generator (seeded per
rank: each data-parallel rank its own noise, as MLPerf requires), forms ``x_t = (1 - t) x0 + t e`` and regresses
``e - x0`` (mean squared error over every latent element). A batch that carries ``t`` and ``noise`` (tests) uses
them instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from dlbench.backends.torch.gpt import _seeded
from dlbench.backends.torch.llama import apply_rope
from dlbench.cases.arch import DitConfig

EPS = 1e-6
TIME_FACTOR = 1000.0  # the reference embeds 1000 t


def timestep_embedding(t: Tensor, dim: int, theta: float = 10000.0) -> Tensor:
    """The sinusoidal embedding of 1000 t, [B, dim]: cosines then sines of dim / 2 frequencies."""
    half = dim // 2
    freqs = torch.exp(-math.log(theta) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = (TIME_FACTOR * t.float())[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def position_ids(cfg: DitConfig, side: int, device: torch.device) -> Tensor:
    """(text index 0, row, column) of every token, text first: [text + image tokens, 3]."""
    grid = side // cfg.patch
    rows = torch.arange(grid, device=device).repeat_interleave(grid)
    cols = torch.arange(grid, device=device).repeat(grid)
    image = torch.stack([torch.zeros_like(rows), rows, cols], dim=-1)
    return torch.cat([torch.zeros(cfg.text_tokens, 3, dtype=image.dtype, device=device), image]).float()


def rope_tables(cfg: DitConfig, ids: Tensor) -> tuple[Tensor, Tensor]:
    """cos and sin [tokens, head_dim] of the rotary angles: per axis, position x theta^(-2i / width)."""
    angles = []
    for axis, width in enumerate(cfg.axes):
        inv = 1.0 / cfg.theta ** (torch.arange(0, width, 2, device=ids.device, dtype=torch.float32) / width)
        angles.append(ids[:, axis : axis + 1] * inv[None])
    both = torch.cat(angles, dim=-1)
    both = torch.cat([both, both], dim=-1)
    return both.cos(), both.sin()


class Embedder(nn.Module):
    """Linear, SiLU, Linear."""

    def __init__(self, n_in: int, hidden: int) -> None:
        super().__init__()
        self.inp = nn.Linear(n_in, hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(F.silu(self.inp(x)))


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    """(1 + scale) LayerNorm(x) + shift, the modulation per sample."""
    return (1 + scale[:, None]) * F.layer_norm(x, x.shape[-1:], eps=EPS) + shift[:, None]


def attention(q: Tensor, k: Tensor, v: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary positions on q and k [B, L, heads, d], then full attention: [B, L, heads x d]."""
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return y.transpose(1, 2).flatten(2)


class Stream(nn.Module):
    """One stream's weights in a double block: modulation, QKV, QK norms, output projection, MLP."""

    def __init__(self, cfg: DitConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.mod = nn.Linear(h, 6 * h)
        self.qkv = nn.Linear(h, 3 * h)
        self.q_norm = nn.RMSNorm(d, eps=EPS)
        self.k_norm = nn.RMSNorm(d, eps=EPS)
        self.proj = nn.Linear(h, h)
        self.mlp_in = nn.Linear(h, cfg.mlp_ratio * h)
        self.mlp_out = nn.Linear(cfg.mlp_ratio * h, h)
        self.heads = cfg.num_heads

    def qkv_of(self, x: Tensor, shift: Tensor, scale: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values [B, L, heads, d] of the modulated stream, queries and keys normalised."""
        b, n, _ = x.shape
        q, k, v = self.qkv(modulate(x, shift, scale)).view(b, n, 3, self.heads, -1).unbind(2)
        return self.q_norm(q), self.k_norm(k), v

    def finish(self, x: Tensor, attended: Tensor, mod: list[Tensor]) -> Tensor:
        """The residual updates after attention: gated projection, then the gated modulated MLP."""
        x = x + mod[2][:, None] * self.proj(attended)
        mlp = self.mlp_out(F.gelu(self.mlp_in(modulate(x, mod[3], mod[4])), approximate="tanh"))
        return x + mod[5][:, None] * mlp


class DoubleBlock(nn.Module):
    """Image and text streams with their own weights, one joint attention (text tokens first)."""

    def __init__(self, cfg: DitConfig) -> None:
        super().__init__()
        self.img, self.txt = Stream(cfg), Stream(cfg)

    def forward(self, img: Tensor, txt: Tensor, vec: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        im = list(self.img.mod(F.silu(vec)).chunk(6, dim=-1))
        tm = list(self.txt.mod(F.silu(vec)).chunk(6, dim=-1))
        iq, ik, iv = self.img.qkv_of(img, im[0], im[1])
        tq, tk, tv = self.txt.qkv_of(txt, tm[0], tm[1])
        y = attention(torch.cat([tq, iq], 1), torch.cat([tk, ik], 1), torch.cat([tv, iv], 1), cos, sin)
        n = txt.shape[1]
        return self.img.finish(img, y[:, n:], im), self.txt.finish(txt, y[:, :n], tm)


class SingleBlock(nn.Module):
    """One stream over the joined tokens: QKV and the MLP's input in one matrix, its output and attention's in one."""

    def __init__(self, cfg: DitConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.h, self.heads = h, cfg.num_heads
        self.mod = nn.Linear(h, 3 * h)
        self.linear1 = nn.Linear(h, (3 + cfg.mlp_ratio) * h)
        self.q_norm = nn.RMSNorm(d, eps=EPS)
        self.k_norm = nn.RMSNorm(d, eps=EPS)
        self.linear2 = nn.Linear((1 + cfg.mlp_ratio) * h, h)

    def forward(self, x: Tensor, vec: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        shift, scale, gate = self.mod(F.silu(vec)).chunk(3, dim=-1)
        b, n, _ = x.shape
        qkv, mlp = self.linear1(modulate(x, shift, scale)).split(
            [3 * self.h, self.linear1.out_features - 3 * self.h], -1
        )
        q, k, v = qkv.view(b, n, 3, self.heads, -1).unbind(2)
        y = attention(self.q_norm(q), self.k_norm(k), v, cos, sin)
        return x + gate[:, None] * self.linear2(torch.cat([y, F.gelu(mlp, approximate="tanh")], -1))


ZERO = (".mod.weight", "final_mod.weight", "final.weight")
NORMAL = ("img_in.", "txt_in.", "time_in.", "vector_in.", "guidance_in.")


def init_parameter(name: str, p: Tensor) -> None:
    """The init of the parameter called `name` (this module's docstring), from that name's generator."""
    if p.is_meta:
        return
    with torch.no_grad():
        if name.endswith("norm.weight"):
            p.fill_(1.0)
        elif name.endswith(".bias") or name.endswith(ZERO):
            p.zero_()
        elif name.startswith(NORMAL):
            p.normal_(0.0, 0.02, generator=_seeded(name))
        else:
            nn.init.xavier_uniform_(p, generator=_seeded(name))


class DitModel(nn.Module):
    """FLUX.1's transformer: (latents [B, C, side, side] at time t, text [B, T, text_dim], pooled [B, pooled_dim])
    -> the predicted velocity, patched [B, image tokens, C x patch^2]. With `recompute`, each block's activations
    are recomputed in the backward pass. `seed`: the seed of its noise and times (each rank its own)."""

    def __init__(self, cfg: DitConfig, recompute: bool = False, seed: int = 0) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.cfg, self.recompute, self.seed = cfg, recompute, seed
        self.img_in = nn.Linear(cfg.patch_dim, h)
        self.txt_in = nn.Linear(cfg.text_dim, h)
        self.time_in = Embedder(cfg.time_dim, h)
        self.vector_in = Embedder(cfg.pooled_dim, h)
        if cfg.guidance:
            self.guidance_in = Embedder(cfg.time_dim, h)
        self.double_blocks = nn.ModuleList(DoubleBlock(cfg) for _ in range(cfg.double_blocks))
        self.single_blocks = nn.ModuleList(SingleBlock(cfg) for _ in range(cfg.single_blocks))
        self.final_mod = nn.Linear(h, 2 * h)
        self.final = nn.Linear(h, cfg.patch_dim)
        for name, p in self.named_parameters():
            init_parameter(name, p)
        self._generator: torch.Generator | None = None

    def _run(self, block: nn.Module, *args: Tensor) -> Any:
        """The block on its inputs, its activations recomputed in the backward pass with `recompute`."""
        if self.recompute and self.training:
            return checkpoint(block, *args, use_reentrant=False)
        return block(*args)

    def forward(self, x: Tensor, t: Tensor, text: Tensor, pooled: Tensor, guidance: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        img = self.img_in(patchify(x, cfg.patch))
        txt = self.txt_in(text)
        vec = self.time_in(timestep_embedding(t, cfg.time_dim).to(img.dtype)) + self.vector_in(pooled)
        if cfg.guidance:
            g = guidance if guidance is not None else torch.ones_like(t)
            vec = vec + self.guidance_in(timestep_embedding(g, cfg.time_dim).to(img.dtype))
        cos, sin = rope_tables(cfg, position_ids(cfg, x.shape[-1], x.device))
        for block in self.double_blocks:
            img, txt = self._run(block, img, txt, vec, cos, sin)
        joint = torch.cat([txt, img], 1)
        for block in self.single_blocks:
            joint = self._run(block, joint, vec, cos, sin)
        shift, scale = self.final_mod(F.silu(vec)).chunk(2, dim=-1)
        return self.final(modulate(joint[:, txt.shape[1] :], shift, scale))

    def draws(self, x0: Tensor) -> tuple[Tensor, Tensor]:
        """This step's times [B] and noise like x0, from the model's generator on x0's device."""
        if self._generator is None or self._generator.device != x0.device:
            self._generator = torch.Generator(device=x0.device).manual_seed(self.seed)
        b = x0.shape[0]
        if self.cfg.timesteps == "logit_normal":
            t = torch.sigmoid(torch.randn(b, device=x0.device, generator=self._generator))
        else:
            t = torch.rand(b, device=x0.device, generator=self._generator)
        return t, torch.randn(x0.shape, device=x0.device, dtype=x0.dtype, generator=self._generator)


def patchify(x: Tensor, patch: int) -> Tensor:
    """[B, C, H, W] -> [B, (H / p)(W / p), C p p], row-major patches, each channel-major."""
    b, c, hh, ww = x.shape
    x = x.view(b, c, hh // patch, patch, ww // patch, patch).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (hh // patch) * (ww // patch), c * patch * patch)


def unwrapped(model: nn.Module) -> DitModel:
    """The DitModel inside DDP's wrapper (or the model itself)."""
    inner = getattr(model, "module", model)
    assert isinstance(inner, DitModel)
    return inner


def flow_matching_loss(model: nn.Module, batch: Mapping[str, Tensor]) -> Tensor:
    """The velocity regression of this module's docstring on one batch (latents, text, pooled)."""
    x0 = batch["latents"]
    t, noise = (batch["t"], batch["noise"]) if "t" in batch else unwrapped(model).draws(x0)
    s = t.to(x0.dtype).view(-1, 1, 1, 1)
    xt = (1 - s) * x0 + s * noise
    target = patchify(noise - x0, unwrapped(model).cfg.patch)
    pred = model(xt, t, batch["text"], batch["pooled"])
    return F.mse_loss(pred.float(), target.float())


__all__ = [
    "DitModel",
    "DoubleBlock",
    "SingleBlock",
    "flow_matching_loss",
    "patchify",
    "position_ids",
    "rope_tables",
    "timestep_embedding",
]
