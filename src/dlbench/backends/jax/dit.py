"""FLUX.1's multimodal diffusion transformer in flax.linen (#48), laid out as the torch backend's dit.py, with the
flow-matching draw inside the model.

The same blocks, widths, rotary positions (rotate-half pairs), GELU (tanh), weightless LayerNorms (eps 1e-6) and
init (adaLN-Zero: every modulation and the final projection zero; attention and MLP kernels Xavier-uniform,
embedders normal(0, 0.02), biases zero, RMSNorm scales one) as torch's; trainable parameters: exactly
``dlbench.cases.dit.param_count``. In training the model draws, from the step's ``dropout`` key (flax's rng stream
that the jitted step folds with the step number), each sample's time t (uniform, or logit-normal) and Gaussian
noise e, and returns (the predicted velocity at ``x_t = (1 - t) x0 + t e``, the target ``e - x0``), both patched;
the loss is their mean squared error (models.train_loss). On a mesh the batch is sharded, so each replica's samples
get their own noise.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn

from dlbench.cases.arch import DitConfig

Array = Any
EPS = 1e-6
XAVIER = nn.initializers.xavier_uniform()
ZEROS = nn.initializers.zeros
NORMAL = nn.initializers.normal(0.02)


def patchify(x: Array, patch: int) -> Array:
    """[B, C, H, W] -> [B, (H / p)(W / p), C p p], row-major patches, each channel-major (as torch's)."""
    b, c, hh, ww = x.shape
    x = x.reshape(b, c, hh // patch, patch, ww // patch, patch).transpose(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (hh // patch) * (ww // patch), c * patch * patch)


def timestep_embedding(t: Array, dim: int, theta: float = 10000.0) -> Array:
    """The sinusoidal embedding of 1000 t: cosines then sines of dim / 2 frequencies."""
    half = dim // 2
    freqs = jnp.exp(-math.log(theta) * jnp.arange(half, dtype=jnp.float32) / half)
    args = (1000.0 * t.astype(jnp.float32))[:, None] * freqs[None]
    return jnp.concatenate([jnp.cos(args), jnp.sin(args)], axis=-1)


def rope_tables(cfg: DitConfig, side: int) -> tuple[Array, Array]:
    """cos and sin [tokens, head_dim] of the rotary angles over (0, row, column), text first (torch's tables)."""
    grid = side // cfg.patch
    rows = jnp.repeat(jnp.arange(grid), grid)
    cols = jnp.tile(jnp.arange(grid), grid)
    image = jnp.stack([jnp.zeros_like(rows), rows, cols], axis=-1)
    ids = jnp.concatenate([jnp.zeros((cfg.text_tokens, 3), image.dtype), image]).astype(jnp.float32)
    angles = []
    for axis, width in enumerate(cfg.axes):
        inv = 1.0 / cfg.theta ** (jnp.arange(0, width, 2, dtype=jnp.float32) / width)
        angles.append(ids[:, axis : axis + 1] * inv[None])
    both = jnp.concatenate(angles, axis=-1)
    both = jnp.concatenate([both, both], axis=-1)
    return jnp.cos(both), jnp.sin(both)


def _rotate(x: Array, cos: Array, sin: Array) -> Array:
    """Rotary positions on [B, L, heads, d] (rotate-half pairs)."""
    first, second = jnp.split(x, 2, axis=-1)
    turned = jnp.concatenate([-second, first], axis=-1)
    return (x * cos[None, :, None, :] + turned * sin[None, :, None, :]).astype(x.dtype)


def _attention(q: Array, k: Array, v: Array, cos: Array, sin: Array, dtype: Any) -> Array:
    """Rotary positions on q and k, then full attention: [B, L, heads x d]."""
    y = nn.dot_product_attention(_rotate(q, cos, sin), _rotate(k, cos, sin), v, dtype=dtype)
    return y.reshape(*y.shape[:2], -1)


def _modulate(x: Array, shift: Array, scale: Array) -> Array:
    """(1 + scale) LayerNorm(x) + shift, per sample (a LayerNorm without weights, its statistics in float32)."""
    xf = x.astype(jnp.float32)
    mean = xf.mean(-1, keepdims=True)
    normed = ((xf - mean) * jax.lax.rsqrt(xf.var(-1, keepdims=True) + EPS)).astype(x.dtype)
    return (1 + scale[:, None]) * normed + shift[:, None]


class Embedder(nn.Module):
    """Dense, SiLU, Dense (normal(0, 0.02) kernels)."""

    hidden: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array) -> Array:
        dense = partial(nn.Dense, self.hidden, dtype=self.dtype, kernel_init=NORMAL)
        inp, out = dense(name="inp"), dense(name="out")
        return out(nn.silu(inp(x)))


class Stream(nn.Module):
    """One stream of a double block: its modulation, QKV, QK norms, projection and MLP (torch's Stream)."""

    cfg: DitConfig
    dtype: Any = jnp.float32

    def setup(self) -> None:
        h, dt = self.cfg.hidden_size, self.dtype
        self.mod = nn.Dense(6 * h, dtype=dt, kernel_init=ZEROS)
        self.qkv = nn.Dense(3 * h, dtype=dt, kernel_init=XAVIER)
        self.q_norm = nn.RMSNorm(epsilon=EPS, dtype=dt)
        self.k_norm = nn.RMSNorm(epsilon=EPS, dtype=dt)
        self.proj = nn.Dense(h, dtype=dt, kernel_init=XAVIER)
        self.mlp_in = nn.Dense(self.cfg.mlp_ratio * h, dtype=dt, kernel_init=XAVIER)
        self.mlp_out = nn.Dense(h, dtype=dt, kernel_init=XAVIER)

    def qkv_of(self, x: Array, mod: list[Array]) -> tuple[Array, Array, Array]:
        """Queries, keys and values [B, L, heads, d] of the modulated stream, queries and keys normalised."""
        b, n, _ = x.shape
        qkv = self.qkv(_modulate(x, mod[0], mod[1])).reshape(b, n, 3, self.cfg.num_heads, -1)
        return self.q_norm(qkv[:, :, 0]), self.k_norm(qkv[:, :, 1]), qkv[:, :, 2]

    def finish(self, x: Array, attended: Array, mod: list[Array]) -> Array:
        """The residual updates after attention: gated projection, then the gated modulated MLP."""
        x = x + mod[2][:, None] * self.proj(attended)
        mlp = self.mlp_out(nn.gelu(self.mlp_in(_modulate(x, mod[3], mod[4])), approximate=True))
        return x + mod[5][:, None] * mlp


class DoubleBlock(nn.Module):
    """Image and text streams with their own weights, one joint attention (text tokens first)."""

    cfg: DitConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, img: Array, txt: Array, vec: Array, cos: Array, sin: Array) -> tuple[Array, Array]:
        im_s, tx_s = Stream(self.cfg, self.dtype, name="img"), Stream(self.cfg, self.dtype, name="txt")
        im = jnp.split(im_s.mod(nn.silu(vec)), 6, axis=-1)
        tm = jnp.split(tx_s.mod(nn.silu(vec)), 6, axis=-1)
        iq, ik, iv = im_s.qkv_of(img, im)
        tq, tk, tv = tx_s.qkv_of(txt, tm)
        cat = partial(jnp.concatenate, axis=1)
        y = _attention(cat([tq, iq]), cat([tk, ik]), cat([tv, iv]), cos, sin, self.dtype)
        n = txt.shape[1]
        return im_s.finish(img, y[:, n:], im), tx_s.finish(txt, y[:, :n], tm)


class SingleBlock(nn.Module):
    """One stream over the joined tokens (torch's SingleBlock)."""

    cfg: DitConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, vec: Array, cos: Array, sin: Array) -> Array:
        h, r, dt = self.cfg.hidden_size, self.cfg.mlp_ratio, self.dtype
        shift, scale, gate = jnp.split(nn.Dense(3 * h, dtype=dt, kernel_init=ZEROS, name="mod")(nn.silu(vec)), 3, -1)
        b, n, _ = x.shape
        both = nn.Dense((3 + r) * h, dtype=dt, kernel_init=XAVIER, name="linear1")(_modulate(x, shift, scale))
        qkv, mlp = both[..., : 3 * h].reshape(b, n, 3, self.cfg.num_heads, -1), both[..., 3 * h :]
        q = nn.RMSNorm(epsilon=EPS, dtype=dt, name="q_norm")(qkv[:, :, 0])
        k = nn.RMSNorm(epsilon=EPS, dtype=dt, name="k_norm")(qkv[:, :, 1])
        y = _attention(q, k, qkv[:, :, 2], cos, sin, dt)
        out = nn.Dense(h, dtype=dt, kernel_init=XAVIER, name="linear2")(
            jnp.concatenate([y, nn.gelu(mlp, approximate=True)], axis=-1)
        )
        return x + gate[:, None] * out


class Transformer(nn.Module):
    """FLUX.1's transformer: (x_t [B, C, side, side], t [B], text [B, T, text_dim], pooled [B, pooled_dim]) -> the
    predicted velocity [B, image tokens, C p p]."""

    cfg: DitConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, xt: Array, t: Array, text: Array, pooled: Array) -> Array:
        cfg, dt = self.cfg, self.dtype
        h = cfg.hidden_size
        img = nn.Dense(h, dtype=dt, kernel_init=NORMAL, name="img_in")(patchify(xt, cfg.patch))
        txt = nn.Dense(h, dtype=dt, kernel_init=NORMAL, name="txt_in")(text)
        vec = Embedder(h, dt, name="time_in")(timestep_embedding(t, cfg.time_dim))
        vec = vec + Embedder(h, dt, name="vector_in")(pooled)
        if cfg.guidance:
            vec = vec + Embedder(h, dt, name="guidance_in")(timestep_embedding(jnp.ones_like(t), cfg.time_dim))
        cos, sin = rope_tables(cfg, xt.shape[-1])
        for i in range(cfg.double_blocks):
            img, txt = DoubleBlock(cfg, dt, name=f"double_{i}")(img, txt, vec, cos, sin)
        joint = jnp.concatenate([txt, img], axis=1)
        for i in range(cfg.single_blocks):
            joint = SingleBlock(cfg, dt, name=f"single_{i}")(joint, vec, cos, sin)
        shift, scale = jnp.split(nn.Dense(2 * h, dtype=dt, kernel_init=ZEROS, name="final_mod")(nn.silu(vec)), 2, -1)
        out = nn.Dense(cfg.patch_dim, dtype=dt, kernel_init=ZEROS, name="final")
        return out(_modulate(joint[:, txt.shape[1] :], shift, scale))


class DitModel(nn.Module):
    """The transformer with its flow-matching draw (this module's docstring): (latents [B, C, side, side], text
    [B, T, text_dim], pooled [B, pooled_dim]) -> (predicted velocity, target), both [B, tokens, C p p]."""

    cfg: DitConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, latents: Array, text: Array, pooled: Array, train: bool = True) -> tuple[Array, Array]:
        t, noise = draws(self.cfg, self.make_rng("dropout"), latents)
        s = t.reshape(-1, 1, 1, 1).astype(latents.dtype)
        xt = (1 - s) * latents + s * noise
        pred = Transformer(self.cfg, self.dtype, name="transformer")(xt, t, text, pooled)
        return pred, patchify(noise - latents, self.cfg.patch)


def draws(cfg: DitConfig, key: Array, latents: Array) -> tuple[Array, Array]:
    """Each sample's time t [B] (uniform or logit-normal) and Gaussian noise like the latents, from `key`."""
    k_t, k_noise = jax.random.split(key)
    b = latents.shape[0]
    if cfg.timesteps == "logit_normal":
        t = jax.nn.sigmoid(jax.random.normal(k_t, (b,)))
    else:
        t = jax.random.uniform(k_t, (b,))
    return t, jax.random.normal(k_noise, latents.shape, latents.dtype)


def flow_matching_loss(outputs: tuple[Array, Array]) -> jax.Array:
    """Mean squared error of the predicted velocity against its target, in float32."""
    pred, target = outputs
    return jnp.mean((pred.astype(jnp.float32) - target.astype(jnp.float32)) ** 2)


__all__ = ["DitModel", "Transformer", "draws", "flow_matching_loss", "patchify", "rope_tables", "timestep_embedding"]
