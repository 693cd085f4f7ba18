"""A Llama-3-style decoder in Keras 3 (#46), written with keras.ops and keras.layers only, so that it trains on any
Keras backend (TensorFlow, JAX, PyTorch); laid out like the torch backend's llama.py.

Pre-norm blocks: RMSNorm (computed in float32); grouped-query attention with rotary positions (rotate-half form,
base ``rope_theta``) through ``keras.ops.dot_product_attention`` (``is_causal=True``; each key/value head repeated
over its group of query heads first, as torch's ``repeat_interleave``); a SwiGLU MLP ``w2(silu(w1 x) * w3 x)``; no
biases, no dropout; a final RMSNorm and the LM head, tied to the token embedding (its transpose) or not.
Trainable parameters: exactly ``dlbench.cases.llama.param_count`` (a kernel is [in, out], the same count). Init as
torch's: every matrix normal(0, 0.02), the residual output projections (``wo``, ``w2``) / sqrt(2 x layers), norms 1.

Every layer makes its weights in its constructor (shapes come from the configuration, not from an input), so that
a model built inside ``keras.StatelessScope`` holds only deferred variables: `count_decoder` counts the 8B member
exactly without allocating it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
from keras import layers, ops

from dlbench.cases.arch import LlamaConfig

Tensor = Any  # a backend tensor (tf.Tensor, jax.Array, torch.Tensor) or a KerasTensor


class Linear(layers.Layer):
    """A bias-free x @ kernel, kernel [in, out] drawn from normal(0, std)."""

    def __init__(self, fan_in: int, fan_out: int, std: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        init = keras.initializers.RandomNormal(0.0, std)
        self.kernel = self.add_weight(shape=(fan_in, fan_out), initializer=init, name="kernel")
        self.built = True

    def call(self, x: Tensor) -> Tensor:
        """[..., in] -> [..., out]."""
        return ops.matmul(x, self.kernel)


def linear(cfg: LlamaConfig, fan_in: int, fan_out: int, residual: bool = False, name: str = "") -> Linear:
    """A Linear with the family's init (the residual outputs scaled by 1 / sqrt(2 x layers))."""
    std = cfg.initializer_range / (math.sqrt(2 * cfg.num_layers) if residual else 1.0)
    return Linear(fan_in, fan_out, std, name=name or None)


class RMSNorm(layers.Layer):
    """x / sqrt(mean(x^2) + eps) x weight, computed in float32."""

    def __init__(self, width: int, eps: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.eps = eps
        self.weight = self.add_weight(shape=(width,), initializer="ones", name="weight")
        self.built = True

    def call(self, x: Tensor) -> Tensor:
        """Normalised x, in x's dtype."""
        h = ops.cast(x, "float32")
        h = h * ops.rsqrt(ops.mean(ops.square(h), axis=-1, keepdims=True) + self.eps)
        return ops.cast(h * ops.cast(self.weight, "float32"), x.dtype)


def rope(x: Tensor, theta: float) -> Tensor:
    """Rotate [B, S, heads, d] by position x theta^(-2i/d) (channel i pairs with channel i + d/2)."""
    s, d = x.shape[1], x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype="float32") / d)
    angles = np.outer(np.arange(s, dtype="float32"), inv)  # the sequence length is static: a constant table
    both = np.concatenate([angles, angles], axis=-1)
    cos = ops.convert_to_tensor(np.cos(both)[None, :, None, :])
    sin = ops.convert_to_tensor(np.sin(both)[None, :, None, :])
    first, second = x[..., : d // 2], x[..., d // 2 :]
    turned = ops.concatenate([-second, first], axis=-1)
    out = ops.cast(x, "float32") * cos + ops.cast(turned, "float32") * sin
    return ops.cast(out, x.dtype)


class Attention(layers.Layer):
    """Causal grouped-query self-attention with rotary positions."""

    def __init__(self, cfg: LlamaConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        h, d = cfg.hidden_size, cfg.head_dim
        self.head_dim, self.theta, self.group = d, cfg.rope_theta, cfg.num_heads // cfg.num_kv_heads
        self.heads, self.kv_heads = cfg.num_heads, cfg.num_kv_heads
        self.wq, self.wk = linear(cfg, h, cfg.num_heads * d, name="wq"), linear(cfg, h, cfg.num_kv_heads * d, name="wk")
        self.wv = linear(cfg, h, cfg.num_kv_heads * d, name="wv")
        self.wo = linear(cfg, cfg.num_heads * d, h, residual=True, name="wo")
        self.built = True

    def call(self, x: Tensor) -> Tensor:
        """[B, S, h] -> [B, S, h]."""
        b, s, d = ops.shape(x)[0], x.shape[1], self.head_dim
        q = rope(ops.reshape(self.wq(x), (b, s, self.heads, d)), self.theta)
        k = rope(ops.reshape(self.wk(x), (b, s, self.kv_heads, d)), self.theta)
        v = ops.reshape(self.wv(x), (b, s, self.kv_heads, d))
        if self.group > 1:  # each key/value head serves its group of query heads
            k, v = ops.repeat(k, self.group, axis=2), ops.repeat(v, self.group, axis=2)
        y = ops.dot_product_attention(q, k, v, is_causal=True)  # [B, S, heads, d]
        return self.wo(ops.reshape(y, (b, s, self.heads * d)))


class FeedForward(layers.Layer):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: LlamaConfig, width: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        h, f = cfg.hidden_size, width or cfg.ffn_size
        self.w1, self.w3 = linear(cfg, h, f, name="w1"), linear(cfg, h, f, name="w3")
        self.w2 = linear(cfg, f, h, residual=True, name="w2")
        self.built = True

    def call(self, x: Tensor) -> Tensor:
        """[..., h] -> [..., h]."""
        return self.w2(ops.silu(self.w1(x)) * self.w3(x))


class LlamaBlock(layers.Layer):
    """x + attention(RMSNorm(x)), then x + MLP(RMSNorm(x)); an MLP that returns (y, aux) adds its aux to the
    block's second output (a MoE layer's load-balancing loss, moe.py), else that output is 0."""

    def __init__(self, cfg: LlamaConfig, feed_forward: layers.Layer | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.attention_norm = RMSNorm(cfg.hidden_size, cfg.norm_eps, name="attention_norm")
        self.attention = Attention(cfg, name="attention")
        self.ffn_norm = RMSNorm(cfg.hidden_size, cfg.norm_eps, name="ffn_norm")
        self.feed_forward = feed_forward if feed_forward is not None else FeedForward(cfg, name="feed_forward")
        self.built = True

    def call(self, x: Tensor) -> Tensor:
        """[B, S, h] -> [B, S, h] (a MoE block: and its auxiliary loss)."""
        x = x + self.attention(self.attention_norm(x))
        out = self.feed_forward(self.ffn_norm(x))
        if isinstance(out, tuple):
            return x + out[0], out[1]
        return x + out


class LlamaModel(keras.Model):
    """Token embedding, the decoder blocks, a final RMSNorm and the LM head: token ids [B, S] -> logits [B, S, V]
    (a MoE, moe.py: (logits, the layers' summed auxiliary loss)). `feed_forward`, where set, makes each block's
    MLP."""

    def __init__(
        self, cfg: LlamaConfig, feed_forward: Callable[[int], layers.Layer] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.cfg = cfg
        init = keras.initializers.RandomNormal(0.0, cfg.initializer_range)
        self.wte = self.add_weight(shape=(cfg.vocab_size, cfg.hidden_size), initializer=init, name="wte")
        self.blocks = [
            LlamaBlock(cfg, feed_forward(i) if feed_forward else None, name=f"blocks_{i}")
            for i in range(cfg.num_layers)
        ]
        self.norm = RMSNorm(cfg.hidden_size, cfg.norm_eps, name="norm")
        self.lm_head = None if cfg.tied_embeddings else linear(cfg, cfg.hidden_size, cfg.vocab_size, name="lm_head")
        self.built = True

    def call(self, input_ids: Tensor) -> Tensor:
        """Token ids [B, S] -> logits [B, S, V], or (logits, auxiliary loss) for a MoE."""
        x = ops.take(self.wte, input_ids, axis=0)
        aux = []
        for block in self.blocks:
            x = block(x)
            if isinstance(x, tuple):
                x, extra = x
                aux.append(extra)
        x = self.norm(x)
        # tied: the embedding's transpose is the head
        logits = ops.matmul(x, ops.transpose(self.wte)) if self.lm_head is None else self.lm_head(x)
        if aux:
            return logits, ops.sum(ops.stack(aux))
        return logits


def count_decoder(build: Callable[[], keras.Model]) -> int:
    """The trainable parameters of the model `build` makes, counted from its variables' shapes: built inside
    ``keras.StatelessScope`` every variable is deferred (no weight allocated, the 8B member in well under a second);
    the deferred variables are dropped after with the Keras session."""
    with keras.StatelessScope(initialize_variables=False):  # True would make every weight on leaving the scope
        model = build()
        n = int(sum(math.prod(v.shape) for v in model.trainable_variables))
    keras.backend.clear_session()  # forgets the deferred variables (Keras' global list of uninitialised ones)
    return n


__all__ = ["Attention", "FeedForward", "Linear", "LlamaBlock", "LlamaModel", "RMSNorm", "count_decoder", "rope"]
