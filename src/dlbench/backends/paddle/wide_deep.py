"""Wide & Deep in Paddle: `nn.Embedding(sparse=True)` tables, whose gradients are SelectedRows (the rows a batch
touched), trained with Adam in lazy mode (only those rows' moments move, OneFlow-WDL's lazy Adam); `sparse` 0
gives dense gradients and ordinary Adam."""

from __future__ import annotations

import paddle
import paddle.nn.functional as F
from paddle import Tensor, nn

from dlbench.cases import Case
from dlbench.cases.wide_deep import ctr_input, deep_input_width, sparse_embeddings, wide_deep_arch


class WideDeep(nn.Layer):
    """The wide table (vocab x 1, summed over the wide ids) plus the deep part (vocab x e embeddings of the
    categorical ids with the dense features, through ReLU + dropout layers to one logit)."""

    def __init__(self, case: Case) -> None:
        super().__init__()
        a, inp = wide_deep_arch(case), ctr_input(case)
        self.sparse = sparse_embeddings(case)
        init = paddle.ParamAttr(initializer=nn.initializer.Uniform(-0.05, 0.05))  # OneFlow-WDL's tables
        self.wide = nn.Embedding(a.vocab, 1, sparse=self.sparse, weight_attr=init)
        self.deep = nn.Embedding(a.vocab, a.embedding, sparse=self.sparse, weight_attr=init)
        layers: list[nn.Layer] = []
        width = deep_input_width(a, inp)
        for h in a.hidden:
            layers += [nn.Linear(width, h), nn.ReLU(), nn.Dropout(a.dropout)]
            width = h
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, dense: Tensor, deep_ids: Tensor, wide_ids: Tensor) -> Tensor:
        """One logit per sample: [B, 1]."""
        wide = self.wide(wide_ids).sum(axis=1)
        deep = self.deep(deep_ids).flatten(1)
        return wide + self.mlp(paddle.concat([deep, dense], axis=1))

    def embedding_path(self) -> str:
        """How the tables train, for the point's facts."""
        if self.sparse:
            return "nn.Embedding sparse=True (SelectedRows gradients); paddle.optimizer.Adam lazy_mode=True"
        return "nn.Embedding dense gradients; paddle.optimizer.Adam"


class CtrLoss(nn.Layer):
    """Wide & Deep plus sigmoid binary cross-entropy; takes the batch in synthetic_ctr's order."""

    def __init__(self, model: nn.Layer) -> None:
        super().__init__()
        self.model = model

    def forward(self, dense: Tensor, deep_ids: Tensor, wide_ids: Tensor, labels: Tensor) -> Tensor:
        logits = self.model(dense, deep_ids, wide_ids)
        return F.binary_cross_entropy_with_logits(logits.astype("float32"), labels)


def lazy_adam(model: nn.Layer) -> bool:
    """Whether the optimizer should update only the rows a batch touched (a Wide & Deep with sparse tables)."""
    return isinstance(model, WideDeep) and model.sparse


__all__ = ["CtrLoss", "WideDeep", "lazy_adam"]
