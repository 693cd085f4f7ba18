"""LoRA on the torch Llama (#47), in native modules (no peft): the base model frozen, low-rank adapters trained.

An adapter is ``B(A(dropout(x))) x alpha / r`` beside a frozen matrix: A (r x in) kaiming-uniform as peft inits
it, B (out x r) zeros, so that the first step starts from the base model's output. A fused QKV adapter (MLPerf's
``qkv_proj`` target) has one A over the block's input and one B whose output is split over the query, key and
value projections (the attention's `qkv_adapter`); every other target wraps its matrix (`Adapted`). Each adapter
draws its A from a generator of its own name, so that FSDP ranks and a one-device model start alike. Trainable
parameters are exactly ``dlbench.cases.lora.adapter_params``.
"""

from __future__ import annotations

import math
import os
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn

from dlbench.backends.torch.gpt import _seeded
from dlbench.backends.torch.llama import LlamaModel
from dlbench.cases import Case
from dlbench.cases.arch import LlamaConfig
from dlbench.cases.llama import OPTIMIZER, llama_arch
from dlbench.cases.lora import PRETRAIN_LR, PRETRAIN_STEPS, LoraConfig, base_key
from dlbench.data.learnable import pretraining_batches
from dlbench.paths import cache_dir

OPTIMIZER_WD = OPTIMIZER.weight_decay  # the family's pretraining AdamW (0.1)


class Adapter(nn.Module):
    """The low-rank update of one matrix: ``B(A(dropout(x))) x scale``."""

    def __init__(self, fan_in: int, fan_out: int, lora: LoraConfig, name: str) -> None:
        super().__init__()
        self.dropout = nn.Dropout(lora.dropout)
        self.A = nn.Linear(fan_in, lora.rank, bias=False)
        self.B = nn.Linear(lora.rank, fan_out, bias=False)
        self.scale = lora.scale
        if not self.A.weight.is_meta:
            with torch.no_grad():  # peft's init: A kaiming-uniform (a = sqrt 5), B zero
                bound = 1.0 / math.sqrt(fan_in)
                self.A.weight.uniform_(-bound, bound, generator=_seeded(name + ".A"))
                self.B.weight.zero_()

    def forward(self, x: Tensor) -> Tensor:
        return self.B(self.A(self.dropout(x))) * self.scale


class Adapted(nn.Module):
    """A frozen linear layer plus its adapter."""

    def __init__(self, base: nn.Linear, lora: LoraConfig, name: str) -> None:
        super().__init__()
        self.base = base
        self.adapter = Adapter(base.in_features, base.out_features, lora, name)

    def forward(self, x: Tensor) -> Tensor:
        return self.base(x) + self.adapter(x)


def apply_lora(model: nn.Module, cfg: LlamaConfig, lora: LoraConfig) -> nn.Module:
    """Freeze every parameter of a Llama model (or stage) and add the adapters its targets name, in place; the
    model back."""
    for p in model.parameters():
        p.requires_grad_(False)
    h, kv = cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim
    for index, block in cast(LlamaModel, model).blocks.items():
        attention: Any = block.attention
        mlp: Any = block.feed_forward
        where = f"blocks.{index}"
        if "qkv" in lora.targets:
            attention.qkv_adapter = Adapter(h, h + 2 * kv, lora, f"{where}.attention.qkv")
        for target, module, attr in (("q", attention, "wq"), ("k", attention, "wk"), ("v", attention, "wv")):
            if target in lora.targets:
                setattr(module, attr, Adapted(getattr(module, attr), lora, f"{where}.attention.{attr}"))
        if "o" in lora.targets:
            attention.wo = Adapted(attention.wo, lora, f"{where}.attention.wo")
        if "mlp" in lora.targets:
            for attr in ("w1", "w2", "w3"):
                setattr(mlp, attr, Adapted(getattr(mlp, attr), lora, f"{where}.feed_forward.{attr}"))
    return model


def _pretrain(case: Case, input_size: int | None, device: torch.device) -> dict[str, np.ndarray]:
    """The base model trained from seed 0 on the unshifted Markov chain by cases/lora.py's recipe: its weights."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(0)
        base = LlamaModel(llama_arch(case)).to(device)
        opt = torch.optim.AdamW(base.parameters(), lr=PRETRAIN_LR, weight_decay=OPTIMIZER_WD)
        for _, arrays in zip(range(PRETRAIN_STEPS), pretraining_batches(case, input_size), strict=False):
            batch = {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}
            loss = torch.nn.functional.cross_entropy(base(batch["input_ids"]).flatten(0, 1), batch["labels"].flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return {n: p.detach().cpu().numpy() for n, p in base.named_parameters()}


def load_pretrained(model: nn.Module, case: Case, input_size: int | None, device: torch.device) -> str:
    """Give a LoRA model (before any sharding) the base dlbench pretrains for --converge (#47): from the cache, else
    trained now and cached; what was done, for the point's facts."""
    path = cache_dir("lora-base") / f"{base_key(case, 'torch', input_size)}.npz"
    made = not path.is_file()
    if made:
        weights = _pretrain(case, input_size, device)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.npz")  # ranks pretrain alike; each writes whole, then renames
        cast(Any, np.savez)(partial, **weights)
        os.replace(partial, path)
    with np.load(path) as stored:
        weights = {k: stored[k] for k in stored.files}
    with torch.no_grad():
        for name, p in model.named_parameters():
            key = name.removeprefix("module.").replace(".base.", ".")  # under DDP; an adapted matrix's base
            if not p.requires_grad and key in weights:
                p.copy_(torch.from_numpy(weights[key]))
    how = "pretrained now and cached" if made else "read from the cache"
    return f"{how}: {PRETRAIN_STEPS} AdamW steps on the unshifted Markov chain ({path.name})"


def frozen_count(model: nn.Module) -> int:
    """Parameters that do not train (shared ones once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters() if not p.requires_grad}.values())


__all__ = ["Adapted", "Adapter", "apply_lora", "frozen_count", "load_pretrained"]
