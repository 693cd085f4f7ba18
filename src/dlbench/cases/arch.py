"""Architecture tables and losses: the "what" of each case, declared once and read by every backend.

A backend's model table maps a case name to a builder that reads these fields; it never repeats a depth, a
width or a loss weight. Framework-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

POOL = "M"  # a 2x2 max-pool in a VGG layer table


@dataclass(frozen=True)
class ResNetArch:
    """A bottleneck ResNet: blocks per stage; v1.5 puts the down-sampling stride on the 3x3 conv."""

    stages: tuple[int, ...]
    width: int = 64
    expansion: int = 4
    stride_on_3x3: bool = True


@dataclass(frozen=True)
class VggArch:
    """A VGG: 3x3 conv widths with POOL marks, an adaptive average pool to pool x pool, then the FC head."""

    layers: tuple[int | str, ...]
    pool: int = 7
    fc: tuple[int, ...] = (4096, 4096)
    dropout: float = 0.5
    batch_norm: bool = False


@dataclass(frozen=True)
class ConvLayer:
    """One convolution (square kernel), optionally followed by a 3x3/2 max-pool."""

    out: int
    kernel: int
    stride: int = 1
    padding: int = 0
    pool_after: bool = False


@dataclass(frozen=True)
class AlexNetArch:
    """AlexNet: its convolutions (ReLU after each), an adaptive average pool, then the FC head with dropout."""

    convs: tuple[ConvLayer, ...]
    pool: int = 6
    fc: tuple[int, ...] = (4096, 4096)
    dropout: float = 0.5


@dataclass(frozen=True)
class InceptionArch:
    """Inception v3 (torchvision's Inception3 layout); with `aux_logits` its auxiliary head trains too."""

    aux_logits: bool = True
    dropout: float = 0.5


@dataclass(frozen=True)
class BertConfig:
    """BERT-base's architecture, shared by every backend's model (uncased vocabulary)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int = 0


@dataclass(frozen=True)
class GptConfig:
    """A GPT-2 causal decoder: pre-LN blocks, learned positions, GELU MLP of `mlp_ratio` x width, and the LM head
    tied to the token embedding (GPT-2 small by default)."""

    vocab_size: int = 50257
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    max_positions: int = 1024
    mlp_ratio: int = 4
    tied_embeddings: bool = True
    dropout: float = 0.1
    layer_norm_eps: float = 1e-5
    initializer_range: float = 0.02


@dataclass(frozen=True)
class LlamaConfig:
    """A Llama-style causal decoder (Llama 3): pre-norm blocks with RMSNorm, rotary position embedding (base
    `rope_theta`), grouped-query attention (`num_heads` query heads sharing `num_kv_heads` key/value heads), a
    SwiGLU MLP `ffn_size` wide, no biases, no dropout, a final RMSNorm and an LM head tied to the token embedding
    or not. `max_positions` is the context the case trains at (RoPE has no learned positions)."""

    vocab_size: int = 128256
    hidden_size: int = 4096
    num_layers: int = 32
    num_heads: int = 32
    num_kv_heads: int = 8
    ffn_size: int = 14336
    max_positions: int = 8192
    tied_embeddings: bool = False
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5
    initializer_range: float = 0.02

    @property
    def head_dim(self) -> int:
        """Width of one attention head: hidden / heads."""
        return self.hidden_size // self.num_heads


@dataclass(frozen=True)
class MlaConfig:
    """DeepSeek-V2/V3's multi-head latent attention: queries through a low-rank bottleneck (`q_rank`; 0: one
    projection), keys and values from a shared `kv_rank`-wide latent (each normalised by an RMSNorm), every head's
    query and key the concatenation of a `nope`-wide part without positions and a `rope`-wide rotary part (the
    rotary key shared by all heads), values `v`-wide. DeepSeek-V3's by default."""

    q_rank: int = 1536
    kv_rank: int = 512
    nope: int = 128
    rope: int = 64
    v: int = 128

    @property
    def qk_dim(self) -> int:
        """Width of one head's query and key: nope + rope."""
        return self.nope + self.rope


@dataclass(frozen=True)
class MoeConfig:
    """A mixture-of-experts decoder on the Llama blocks (#36): `base`'s attention, norms and embeddings, and in every
    layer an MLP of `num_experts` SwiGLU experts `expert_ffn` wide of which a router sends each token to `top_k`
    (``gating`` "softmax": softmax over the chosen logits, as Mixtral; "sigmoid": sigmoid scores, the chosen ones
    normalised, as DeepSeek-V3), plus `shared_experts` experts every token visits. `capacity_factor` 0 routes
    every token (dropless); above 0 an expert takes at most ceil(factor x tokens x top_k / experts) tokens of a
    batch and drops the rest (they pass on the residual). The auxiliary load-balancing loss (Switch Transformer's,
    ``experts x sum_i f_i P_i``) is added with weight `aux_loss_weight`."""

    base: LlamaConfig = LlamaConfig()
    num_experts: int = 8
    top_k: int = 2
    expert_ffn: int = 14336
    shared_experts: int = 0
    capacity_factor: float = 0.0
    gating: Literal["softmax", "sigmoid"] = "softmax"
    aux_loss_weight: float = 0.01
    # DeepSeek-V3 and GPT-OSS (#48); the defaults are Mixtral's (none of it). Documented in cases/moe.py.
    mla: MlaConfig | None = None  # multi-head latent attention in place of grouped-query attention
    dense_layers: int = 0  # the first layers' MLP is one dense SwiGLU base.ffn_size wide (DeepSeek-V3: 3)
    head_dim: int = 0  # grouped-query attention's head width; 0: hidden / heads (GPT-OSS: 64 at hidden 2880)
    attention_bias: bool = False  # biases on the query, key, value and output projections (GPT-OSS)
    sinks: bool = False  # one learned logit per head in every softmax's denominator (GPT-OSS)
    sliding_window: int = 0  # > 0: the even layers (0, 2, ...) attend to the last `sliding_window` tokens
    router_bias: bool = False  # the router's Linear has a bias (GPT-OSS)
    expert_bias: bool = False  # the experts' matrices have biases (GPT-OSS)
    clamped_swiglu: bool = False  # GPT-OSS's expert activation: (clamp(up) + 1) * g * sigmoid(1.702 g), g clamped
    routed_scale: float = 1.0  # the routed experts' gate weights are multiplied by it (DeepSeek-V3: 2.5)
    groups: int = 1  # expert groups of group-limited routing (DeepSeek-V3: 8) ...
    topk_groups: int = 1  # ... of which a token's top_k come from the best `topk_groups` (4)
    bias_update_rate: float = 0.0  # auxiliary-loss-free balance: per-expert routing bias step (DeepSeek-V3: 0.001)
    sequence_aux: bool = False  # the auxiliary loss is DeepSeek-V3's sequence-wise one, not Switch's batch-wise


@dataclass(frozen=True)
class DitConfig:
    """FLUX.1's multimodal diffusion transformer (MMDiT, #48), FLUX.1-schnell's by default: image latents
    (`latent_channels` x `latent_side`^2, patched `patch` x `patch` into tokens) and `text_tokens` text embeddings
    (`text_dim` wide) through `double_blocks` double-stream blocks (each stream its own weights, one joint
    attention) and `single_blocks` single-stream blocks over the joined sequence, conditioned (adaptive LayerNorm
    modulation) on the timestep's sinusoidal embedding plus the pooled text embedding (`pooled_dim`) and, with
    `guidance`, a guidance embedding (FLUX.1-dev); rotary positions over (text 0, row, column) in `axes` widths
    (FLUX's 16, 56, 56 of a 128-wide head: an eighth, then the rest split in two); `num_heads` heads with RMS-normalised queries and keys; MLPs `mlp_ratio` x wide. `timesteps`: how training
    draws t (cases/dit.py)."""

    hidden_size: int = 3072
    num_heads: int = 24
    double_blocks: int = 19
    single_blocks: int = 38
    mlp_ratio: int = 4
    latent_channels: int = 16
    patch: int = 2
    latent_side: int = 32  # MLPerf's 256 x 256 images through the VAE's 8x down-sampling
    text_tokens: int = 256  # MLPerf's T5-XXL sequence
    text_dim: int = 4096  # T5-XXL's width
    pooled_dim: int = 768  # CLIP ViT-L's pooled width
    time_dim: int = 256
    guidance: bool = False
    theta: float = 10000.0
    timesteps: Literal["uniform", "logit_normal"] = "uniform"

    @property
    def head_dim(self) -> int:
        """Width of one attention head: hidden / heads."""
        return self.hidden_size // self.num_heads

    @property
    def axes(self) -> tuple[int, int, int]:
        """The rotary widths of the (text, row, column) position axes: d / 8, then (d - d / 8) / 2 twice."""
        first = self.head_dim // 8
        return first, (self.head_dim - first) // 2, (self.head_dim - first) // 2

    @property
    def patch_dim(self) -> int:
        """Width of one image token: latent channels x patch^2."""
        return self.latent_channels * self.patch * self.patch

    @property
    def image_tokens(self) -> int:
        """Image tokens of one sample: (latent side / patch)^2."""
        return (self.latent_side // self.patch) ** 2


@dataclass(frozen=True)
class WideDeepArch:
    """Wide & Deep (Cheng et al. 2016) as OneFlow-WDL, DLPerf's setup, builds it: a wide linear part (a vocab x 1
    table summed over the wide fields) plus a deep part (the categorical fields' `embedding`-wide vectors, with
    the dense features, through `hidden` ReLU layers with dropout, to one logit)."""

    vocab: int = 3_200_000
    embedding: int = 32
    hidden: tuple[int, ...] = (1024,) * 7
    dropout: float = 0.5


@dataclass(frozen=True)
class DlrmArch:
    """DLRMv2 (MLPerf's DLRM-DCNv2, torchrec's ``DLRM_DCN``): `dense` features through the bottom MLP (ReLU after
    every layer, the last `embedding` wide), one sum-pooled multi-hot embedding bag per sparse feature (`tables`:
    the published cardinalities, each hashed to at most `cap` rows; `hotness` ids per sample), the bottom output and the pooled vectors concatenated, `cross_layers`
    low-rank DCNv2 cross layers (``x_{l+1} = x_0 * (W_l (V_l x_l) + b_l) + x_l``, W `n x low_rank`, V
    `low_rank x n`) and the top MLP (ReLU between layers, one logit). `power_law` draws the synthetic ids from a
    heavy-tailed distribution (cases/dlrm.py), else uniformly; `table_wise` shards the tables over the ranks."""

    tables: tuple[int, ...] = ()
    hotness: tuple[int, ...] = ()
    cap: int = 40_000_000
    embedding: int = 128
    dense: int = 13
    bottom: tuple[int, ...] = (512, 256, 128)
    top: tuple[int, ...] = (1024, 1024, 512, 256, 1)
    cross_layers: int = 3
    low_rank: int = 512
    power_law: bool = True
    table_wise: bool = False

    @property
    def rows(self) -> tuple[int, ...]:
        """Each table's rows after the hashing cap."""
        return tuple(min(t, self.cap) for t in self.tables)


@dataclass(frozen=True)
class FaceArch:
    """Face recognition (InsightFace's recipe): a ResNet backbone, an `embedding`-d feature (Linear and
    BatchNorm1d), and a bias-free classifier over `classes` identities trained with ArcFace's additive angular
    margin (`margin`, logits scaled by `scale`). `model_parallel` splits the classifier by classes across the
    ranks; `sample` is the percent of its classes each step uses (Partial FC; 100 = all)."""

    backbone: ResNetArch = ResNetArch(stages=(3, 4, 6, 3))
    embedding: int = 512
    classes: int = 85_742
    margin: float = 0.5
    scale: float = 64.0
    model_parallel: bool = False
    sample: int = 100


Arch = (
    ResNetArch
    | VggArch
    | AlexNetArch
    | InceptionArch
    | BertConfig
    | GptConfig
    | LlamaConfig
    | MoeConfig
    | DitConfig
    | WideDeepArch
    | DlrmArch
    | FaceArch
)

LossKind = Literal["softmax_ce", "mlm_nsp", "causal_lm", "bce", "arcface", "flow_matching"]


@dataclass(frozen=True)
class Loss:
    """The training loss: softmax cross-entropy (plus `aux_weight` x the auxiliary head's, where there is one),
    BERT's masked-LM + next-sentence loss, a decoder's next-token (causal LM) cross-entropy, binary
    cross-entropy on one logit (a click-through model's), or a diffusion transformer's flow-matching mean squared
    error (cases/dit.py)."""

    kind: LossKind = "softmax_ce"
    aux_weight: float = 0.0


__all__ = [
    "POOL",
    "AlexNetArch",
    "Arch",
    "BertConfig",
    "ConvLayer",
    "DitConfig",
    "DlrmArch",
    "FaceArch",
    "GptConfig",
    "InceptionArch",
    "LlamaConfig",
    "Loss",
    "LossKind",
    "MlaConfig",
    "MoeConfig",
    "ResNetArch",
    "VggArch",
    "WideDeepArch",
]
