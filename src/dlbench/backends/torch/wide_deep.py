"""Wide & Deep in PyTorch: `nn.EmbeddingBag` tables (sparse gradients when the case asks for them) and the
deep MLP, with the optimizer split the way sparse training needs it: SparseAdam for the tables, Adam for the
dense layers (OneFlow-WDL's lazy Adam: only the rows a batch touches move)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from dlbench.cases import Case
from dlbench.cases.wide_deep import ctr_input, deep_input_width, sparse_embeddings, wide_deep_arch


class WideDeep(nn.Module):
    """The wide table (vocab x 1, summed over the wide ids) plus the deep part (vocab x e embeddings of the
    categorical ids, concatenated with the dense features, through ReLU + dropout layers to one logit)."""

    def __init__(self, case: Case) -> None:
        super().__init__()
        a, inp = wide_deep_arch(case), ctr_input(case)
        self.sparse = sparse_embeddings(case)
        self.wide = nn.EmbeddingBag(a.vocab, 1, mode="sum", sparse=self.sparse)
        self.deep = nn.Embedding(a.vocab, a.embedding, sparse=self.sparse)
        layers: list[nn.Module] = []
        width = deep_input_width(a, inp)
        for h in a.hidden:
            layers += [nn.Linear(width, h), nn.ReLU(inplace=True), nn.Dropout(a.dropout)]
            width = h
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)
        for table in (self.wide.weight, self.deep.weight):  # OneFlow-WDL's uniform(-0.05, 0.05)
            nn.init.uniform_(table, -0.05, 0.05)

    def forward(self, dense: Tensor, deep_ids: Tensor, wide_ids: Tensor) -> Tensor:
        """One logit per sample: [B, 1]."""
        wide = self.wide(wide_ids)
        deep = self.deep(deep_ids).flatten(1)
        return wide + self.mlp(torch.cat([deep, dense], dim=1))

    def tables(self) -> list[Tensor]:
        """The embedding tables (the parameters whose gradients are sparse when `sparse` is set)."""
        return [self.wide.weight, self.deep.weight]

    def embedding_path(self) -> str:
        """How the tables train, for the point's facts."""
        if self.sparse:
            return "nn.EmbeddingBag/nn.Embedding sparse=True; SparseAdam for tables, Adam for dense layers"
        return "nn.EmbeddingBag/nn.Embedding dense gradients; Adam over every parameter"


class SplitAdam(torch.optim.Optimizer):
    """SparseAdam over sparse-gradient tables and Adam over the rest, stepped together as one optimizer (so
    that zero_grad, GradScaler and the gradient strategies see a single object)."""

    def __init__(self, sparse: Sequence[Tensor], dense: Sequence[Tensor], lr: float, fused: bool) -> None:
        self.parts: list[torch.optim.Optimizer] = [
            torch.optim.SparseAdam(sparse, lr=lr),
            torch.optim.Adam(dense, lr=lr, fused=True if fused else None),
        ]
        super().__init__([*sparse, *dense], {"lr": lr})
        self.param_groups = [g for part in self.parts for g in part.param_groups]

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> None:  # type: ignore[override]
        """One step of each part."""
        for part in self.parts:
            part.step()


def optimizer_for(model: nn.Module, lr: float, fused: bool) -> torch.optim.Optimizer | None:
    """The split optimizer for a Wide & Deep model with sparse tables; None for any other model."""
    inner = getattr(model, "module", model)  # under DDP
    if not isinstance(inner, WideDeep) or not inner.sparse:
        return None
    tables = {id(p) for p in inner.tables()}
    dense = [p for p in inner.parameters() if id(p) not in tables]
    return SplitAdam(inner.tables(), dense, lr, fused)


def bce_loss(model: nn.Module, batch: Mapping[str, Tensor]) -> Tensor:
    """Sigmoid binary cross-entropy of the logit against the 0/1 label, in float32."""
    logits = model(batch["dense"], batch["deep_ids"], batch["wide_ids"])
    return nn.functional.binary_cross_entropy_with_logits(logits.float(), batch["labels"])


__all__ = ["SplitAdam", "WideDeep", "bce_loss", "optimizer_for"]
