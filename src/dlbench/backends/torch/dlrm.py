"""DLRMv2 (DLRM-DCNv2, #47) in native torch: one ``nn.EmbeddingBag`` per sparse feature (sum-pooled multi-hot bags,
sparse gradients), the bottom MLP, low-rank DCNv2 cross layers and the top MLP, laid out as torchrec's
``DLRM_DCN`` (bottom output first, then the 26 pooled vectors, concatenated). Its trainable parameters are exactly
``dlbench.cases.dlrm.param_count``.

Init as torchrec's: each table uniform(-sqrt(1/rows), sqrt(1/rows)), dense layers nn.Linear's own, cross kernels
xavier-normal and zero biases; every parameter from a generator of its own name (as the decoders), so that a rank
holding some tables starts where the one-device model does.

Two layouts over several ranks (the case's `sharding` parameter):
- data parallel: every rank holds every table; DDP averages the gradients (the tables' sparse ones too);
- table-wise model parallel (`table_wise`): table f lives whole on rank f mod world. Each rank looks up its tables
  for the global batch's ids (all-gathered), and one autograd all-to-all (``torch.distributed.nn``) hands every
  rank its own samples' pooled vectors, the backward pass sending the gradients back to the tables' owners; only
  the dense layers (`replicated`) are wrapped in DDP, as face's split classifier is.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping
from itertools import pairwise
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
from torch import Tensor, nn

from dlbench.cases import Case
from dlbench.cases.arch import DlrmArch
from dlbench.cases.dlrm import dlrm_arch, interaction_width
from dlbench.data.recsys import PlantedClicks, roc_auc


def _seeded(name: str) -> torch.Generator:
    """A generator for one parameter, from the global seed and its name: the same weights on any rank."""
    return torch.Generator().manual_seed((torch.initial_seed() + zlib.crc32(name.encode())) % 2**63)


class CrossNet(nn.Module):
    """DCNv2's low-rank cross layers: ``x_{l+1} = x_0 * (W_l (V_l x_l) + b_l) + x_l``."""

    def __init__(self, width: int, layers: int, rank: int) -> None:
        super().__init__()
        self.W = nn.ParameterList([nn.Parameter(torch.empty(width, rank)) for _ in range(layers)])
        self.V = nn.ParameterList([nn.Parameter(torch.empty(rank, width)) for _ in range(layers)])
        self.bias = nn.ParameterList([nn.Parameter(torch.zeros(width)) for _ in range(layers)])

    def forward(self, x0: Tensor) -> Tensor:
        x = x0
        for w, v, b in zip(self.W, self.V, self.bias, strict=True):
            x = x0 * (nn.functional.linear(nn.functional.linear(x, v), w) + b) + x
        return x


def _mlp(widths: tuple[int, ...], last_activation: bool) -> nn.Sequential:
    """Linear layers through `widths`, ReLU after each (after the last one too where `last_activation`)."""
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(pairwise(widths)):
        layers.append(nn.Linear(fan_in, fan_out))
        if last_activation or i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DenseArch(nn.Module):
    """Everything but the tables: the bottom MLP, the cross layers and the top MLP (one logit)."""

    def __init__(self, a: DlrmArch) -> None:
        super().__init__()
        n = interaction_width(a)
        self.bottom = _mlp((a.dense, *a.bottom), last_activation=True)
        self.cross = CrossNet(n, a.cross_layers, a.low_rank)
        self.top = _mlp((n, *a.top), last_activation=False)

    def forward(self, dense: Tensor, pooled: Tensor) -> Tensor:
        """[B, dense] and the pooled vectors [B, F, D] -> logits [B, 1]."""
        x = self.bottom(dense)
        z = torch.cat([x.unsqueeze(1), pooled], dim=1).flatten(1)
        return self.top(self.cross(z))


def owner(feature: int, world: int) -> int:
    """The rank that holds table `feature` under table-wise sharding."""
    return feature % world


class Dlrm(nn.Module):
    """DLRM-DCNv2: dense features [B, 13] and ids [B, sum(hotness)] -> one logit per sample. `rank` of `world`
    holds every table, or with `table_wise` on several ranks those it owns (`owner`)."""

    def __init__(self, case: Case, rank: int = 0, world: int = 1) -> None:
        super().__init__()
        a = dlrm_arch(case)
        self.arch, self.rank, self.world = a, rank, world
        self.sharded = a.table_wise and world > 1
        self.mine = [f for f in range(len(a.rows)) if not self.sharded or owner(f, world) == rank]
        self.tables = nn.ModuleDict(
            {str(f): nn.EmbeddingBag(a.rows[f], a.embedding, mode="sum", sparse=True) for f in self.mine}
        )
        self.replicated = DenseArch(a)
        offsets = [0]
        for hot in a.hotness:
            offsets.append(offsets[-1] + hot)
        self.offsets = offsets
        for name, p in self.named_parameters():
            _init(name, p, a)

    def _pool(self, ids: Tensor) -> Tensor:
        """This rank's tables' pooled vectors for these ids: [rows, tables here, D]."""
        return torch.stack(
            [self.tables[str(f)](ids[:, self.offsets[f] : self.offsets[f + 1]]) for f in self.mine], dim=1
        )

    def forward(self, dense: Tensor, ids: Tensor) -> Tensor:
        if not self.sharded:
            return self.replicated(dense, self._pool(ids))
        return self.replicated(dense, self._exchange(ids))

    def _exchange(self, ids: Tensor) -> Tensor:
        """Table-wise: the global batch's ids gathered, this rank's tables looked up for all of them, and one
        all-to-all that gives each rank every table's vectors for its own samples, in feature order."""
        batch = ids.shape[0]
        every = [torch.empty_like(ids) for _ in range(self.world)]
        dist.all_gather(every, ids)
        pooled = _ScaleGrad.apply(self._pool(torch.cat(every)), 1.0 / self.world)
        sends = list(pooled.split(batch))  # rank s's samples, this rank's tables
        features = [[f for f in range(len(self.arch.rows)) if owner(f, self.world) == s] for s in range(self.world)]
        recvs = [pooled.new_empty(batch, len(fs), self.arch.embedding) for fs in features]
        received = dist_nn.all_to_all(recvs, sends)
        order = [f for fs in features for f in fs]
        merged = torch.cat(list(received), dim=1)
        return merged[:, torch.argsort(torch.tensor(order, device=merged.device))]


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; the gradient scaled. A table's gradient arrives summed over the ranks' losses (each the mean
    of its own samples): x 1/world makes it the global batch's mean, as DDP makes the dense layers'."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, scale: float) -> Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad * ctx.scale, None


def _init(name: str, p: Tensor, a: DlrmArch) -> None:
    """torchrec's init of the parameter called `name`, from that name's generator; meta tensors are left alone."""
    if p.is_meta:
        return
    g = _seeded(name)
    with torch.no_grad():
        if name.startswith("tables."):
            bound = math.sqrt(1.0 / p.shape[0])
            p.uniform_(-bound, bound, generator=g)
        elif ".cross.bias." in name:
            p.zero_()
        elif ".cross." in name:
            std = math.sqrt(2.0 / (p.shape[0] + p.shape[1]))  # xavier-normal
            p.normal_(0.0, std, generator=g)
        else:  # nn.Linear's own: kaiming-uniform(a=sqrt 5) weights, uniform(+-1/sqrt(fan_in)) biases
            fan_in = p.shape[1] if p.dim() == 2 else _fan_in(name, a)
            bound = 1.0 / math.sqrt(fan_in)
            p.uniform_(-bound, bound, generator=g)


def _fan_in(name: str, a: DlrmArch) -> int:
    """The fan-in of a dense layer's bias (its weight's columns), from the layer's position."""
    part, index = name.split(".")[1], int(name.split(".")[2])
    widths = (a.dense, *a.bottom) if part == "bottom" else (interaction_width(a), *a.top)
    return widths[index // 2]  # every Linear but the top's last is followed by a ReLU: 2 modules per layer


def bce_loss(model: nn.Module, batch: Mapping[str, Tensor]) -> Tensor:
    """Sigmoid binary cross-entropy of the logit against the 0/1 label, in float32."""
    logits = model(batch["dense"], batch["ids"])
    return nn.functional.binary_cross_entropy_with_logits(logits.float(), batch["labels"])


def held_out_scorer(model: nn.Module, case: Case, device: torch.device) -> Callable[[], float]:
    """What a convergence curve reads at each reading: the model's AUC on the planted source's held-out set (moved
    to the device once), in eval mode, without gradients."""
    held = PlantedClicks(dlrm_arch(case)).held_out()
    dense, ids = (torch.from_numpy(held[k]).to(device) for k in ("dense", "ids"))

    def score() -> float:
        model.eval()
        with torch.no_grad():
            logits = model(dense, ids)
        model.train()
        return roc_auc(logits.float().cpu().numpy(), held["labels"])

    return score


def build(case: Case, rank: int = 0, world: int = 1) -> Dlrm:
    """The model for a case, this rank's tables where they are sharded."""
    return Dlrm(case, rank, world)


__all__ = ["CrossNet", "DenseArch", "Dlrm", "bce_loss", "build", "held_out_scorer", "owner"]
