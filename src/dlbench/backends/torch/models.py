"""The benchmark's models in PyTorch (no torchvision, no transformers), and their losses.

The CNNs and BERT are the torch-shaped descriptions in `dlbench.backends.torchlike` (shared with OneFlow and
MegEngine) built on torch's ``nn``; attention is ``scaled_dot_product_attention``. GPT-2 (gpt.py), Llama (llama.py)
and Wide & Deep (wide_deep.py), FLUX.1's DiT (dit.py) are torch's own. Each model has exactly the case's reference trainable-parameter count
(``dlbench.cases``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dlbench.backends.context import SINGLE, BuildContext
from dlbench.backends.torch import dlrm
from dlbench.backends.torch.dit import DitModel, flow_matching_loss
from dlbench.backends.torch.face import FaceModel, arcface_loss
from dlbench.backends.torch.gpt import GptLMHeadModel
from dlbench.backends.torch.llama import LlamaModel
from dlbench.backends.torch.lora import apply_lora
from dlbench.backends.torch.moe import MoeModel, aux_loss
from dlbench.backends.torch.wide_deep import WideDeep, bce_loss
from dlbench.backends.torchlike import bert, cnn
from dlbench.backends.torchlike.ops import TorchOps
from dlbench.cases import Case
from dlbench.cases.arch import BertConfig, DlrmArch, MoeConfig
from dlbench.cases.dit import dit_arch
from dlbench.cases.face import face_arch
from dlbench.cases.gpt import gpt_arch
from dlbench.cases.llama import llama_arch
from dlbench.cases.lora import lora_of
from dlbench.cases.moe import moe_arch


class Ops(TorchOps):
    """torch's primitives; attention through the fused ``scaled_dot_product_attention`` with a boolean mask."""

    def attention_mask(self, attention_mask: Tensor) -> Tensor:
        return attention_mask.to(torch.bool)[:, None, None, :]

    def attention(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dropout: nn.Dropout) -> Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout.p if dropout.training else 0.0)


OPS = Ops(torch)
CNN = cnn.define(OPS)
BertForPretraining = bert.define(OPS)


def _face(case: Case, ctx: BuildContext = SINGLE) -> nn.Module:
    """The face model: ResNet backbone with the embedding as its head, and this rank's classifier shard."""
    a = face_arch(case)
    return FaceModel(case, CNN.ResNet(a.backbone, a.embedding), ctx.rank, ctx.world)


def _gpt(case: Case, ctx: BuildContext = SINGLE) -> nn.Module:
    """A GPT decoder: the whole model, or this rank's pipeline stage with its tensor-parallel shards
    (gpt_parallel.py) where the layout splits it; activations recomputed where the layout says."""
    if ctx.layout.splits_model:
        from dlbench.backends.torch import gpt_parallel  # the distributed machinery, only where it is used

        return gpt_parallel.build_stage(gpt_arch(case), ctx)
    return GptLMHeadModel(gpt_arch(case), recompute=ctx.layout.recompute)


def _llama(case: Case, ctx: BuildContext = SINGLE) -> nn.Module:
    """A Llama decoder: the whole model, or this rank's stage with its tensor- and sequence-parallel shards
    (llama_parallel.py) where the layout splits it."""
    if ctx.layout.splits_model or ctx.groups is not None:
        from dlbench.backends.torch import llama_parallel  # the distributed machinery, only where it is used

        model = llama_parallel.build_stage(llama_arch(case), ctx)
    else:
        model = LlamaModel(llama_arch(case), recompute=ctx.layout.recompute)
    adapters = lora_of(case)  # LoRA (#47): the base frozen, adapters added (on one device or FSDP's replicas)
    return model if adapters is None else apply_lora(model, llama_arch(case), adapters)


def _moe(case: Case, ctx: BuildContext = SINGLE) -> nn.Module:
    """A mixture-of-experts decoder: the whole model, or where the point is expert parallel this rank's experts
    with their all-to-all exchange (moe_parallel.py; `ctx.groups` is its ExpertGroups)."""
    if ctx.groups is not None:
        from dlbench.backends.torch import moe_parallel  # the distributed machinery, only where it is used

        return moe_parallel.build(moe_arch(case), ctx)
    return MoeModel(moe_arch(case), recompute=ctx.layout.recompute)


def _dlrm(case: Case, ctx: BuildContext = SINGLE) -> nn.Module:
    """DLRM-DCNv2 (dlrm.py): every table, or this rank's where the case shards them table-wise."""
    return dlrm.build(case, ctx.rank, ctx.world)


def _dit(case: Case, ctx: BuildContext = SINGLE) -> nn.Module:
    """FLUX.1's transformer (dit.py), its noise and times seeded from torch's seed (the point's) and the rank: each
    data-parallel rank draws its own."""
    seed = int(torch.randint(0, 2**31 - 1, (), device="cpu")) + ctx.rank
    return DitModel(dit_arch(case), recompute=ctx.layout.recompute, seed=seed)


def _wide_deep(case: Case, ctx: BuildContext = SINGLE) -> nn.Module:
    """Wide & Deep: the same tables on every rank."""
    return WideDeep(case)


# The model table: case name -> builder(case, ctx) reading the case's architecture and where it builds
# (backends/context.py). The only place a case is named.
MODELS: dict[str, Callable[[Case, BuildContext], nn.Module]] = {
    "resnet50": CNN.resnet,
    "resnet152": CNN.resnet,
    "vgg16": CNN.vgg,
    "alexnet": CNN.alexnet,
    "inception_v3": CNN.inception_v3,
    "bert_base": bert.builder(OPS),
    "gpt2_small": _gpt,
    "gpt": _gpt,
    "llama": _llama,
    "llama3_8b": _llama,
    "llama3_1b": _llama,
    "llama2_70b": _llama,
    "llama_tiny": _llama,
    "mixtral_8x7b": _moe,
    "moe_tiny": _moe,
    "deepseek_v3": _moe,
    "deepseek_tiny": _moe,
    "gpt_oss_20b": _moe,
    "gpt_oss_tiny": _moe,
    "wide_deep": _wide_deep,
    "dlrm_v2": _dlrm,
    "dlrm_tiny": _dlrm,
    "face": _face,
    "flux1": _dit,
    "dit_tiny": _dit,
}


def build_model(case: Case, ctx: BuildContext = SINGLE) -> nn.Module:
    """A freshly initialised model for a case, built where `ctx` says (one device and the whole model by
    default; a rank's shard or stage where the point splits the model)."""
    return MODELS[case.name](case, ctx)


def count_trainable(model: nn.Module) -> int:
    """Number of trainable parameters, counting shared (tied) parameters once."""
    return OPS.count(model)


def train_loss(case: Case, model: nn.Module, batch: Mapping[str, Tensor]) -> Tensor:
    """The case's training loss on one batch: the causal LM's mean next-token cross-entropy over every position,
    Wide & Deep's BCE, a DiT's flow matching (dit.py), ArcFace's margin softmax (face.py), or the image and BERT
    losses (`torchlike.bert.train_loss`)."""
    if case.loss.kind == "causal_lm":
        loss = OPS.xent(model(batch["input_ids"]), batch["labels"])
        if isinstance(case.arch, MoeConfig) and case.loss.aux_weight:  # the experts' load-balancing loss
            loss = loss + case.loss.aux_weight * aux_loss(model)
        return loss
    if case.loss.kind == "bce":
        return dlrm.bce_loss(model, batch) if isinstance(case.arch, DlrmArch) else bce_loss(model, batch)
    if case.loss.kind == "flow_matching":
        return flow_matching_loss(model, batch)
    if case.loss.kind == "arcface":
        return arcface_loss(model, batch)
    return bert.train_loss(OPS, case, model, batch)


__all__ = ["MODELS", "BertForPretraining", "GptLMHeadModel", "build_model", "count_trainable", "train_loss"]


def fused_attention_kernels(q: torch.Tensor, mask: torch.Tensor | None, dropout: float) -> list[str]:
    """Which of scaled_dot_product_attention's fused kernels accept these inputs (q as query, key and value):
    torch's own checks (torch.backends.cuda.SDPAParams, can_use_flash_attention, can_use_efficient_attention)."""
    from torch.backends.cuda import SDPAParams, can_use_efficient_attention, can_use_flash_attention

    params = SDPAParams(q, q, q, mask, dropout, False, False)
    checks = (("flash", can_use_flash_attention), ("memory-efficient", can_use_efficient_attention))
    return [name for name, check in checks if check(params, False)]


def attention_kernels(case: Case, seq_len: int, masked: bool, device: torch.device, dtype: torch.dtype) -> str:
    """BERT's attention as the point runs it, for its facts: with or without a mask and, on a GPU, which of
    scaled_dot_product_attention's fused kernels accept its inputs (torch takes flash, then memory-efficient,
    then the unfused math; which one ran is torch's choice among these). The probe is a description: where this
    torch's API differs or fails, the fact says so and the point goes on."""
    how = "boolean padding mask" if masked else "no mask (every token real)"
    if device.type != "cuda":
        return f"scaled_dot_product_attention, {how}, on the CPU"
    cfg = case.arch
    assert isinstance(cfg, BertConfig), f"{case.name}: attention_kernels reads a BERT configuration"
    try:
        q = torch.empty(1, cfg.num_heads, seq_len, cfg.hidden_size // cfg.num_heads, device=device, dtype=dtype)
        mask = torch.ones(1, 1, 1, seq_len, dtype=torch.bool, device=device) if masked else None
        fused = fused_attention_kernels(q, mask, cfg.attention_dropout)
    except Exception as exc:  # an API this torch lacks or changed (SDPAParams' arguments have changed before)
        return f"scaled_dot_product_attention, {how}; fused kernels it accepts: unknown ({type(exc).__name__}: {exc})"[
            :300
        ]
    return f"scaled_dot_product_attention, {how}; fused kernels it accepts: {', '.join(fused) or 'none (math)'}"
