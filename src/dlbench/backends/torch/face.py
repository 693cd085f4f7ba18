"""Face recognition in torch (dlbench.cases.face): the ResNet-50 backbone of `torchlike.cnn` with a 512-wide head
as the embedding, BatchNorm1d, and the ArcFace classifier in its three modes.

- full: the whole classifier on every rank (DDP all-reduces its gradient with the backbone's).
- model parallel: rank r holds classes [lo_r, hi_r); the embeddings and labels of the global batch are
  all-gathered (``torch.distributed.nn``, so the gradient flows back to each rank's own samples), and the softmax
  runs across the ranks: its maximum and its sum of exponentials are all-reduced, so the loss equals the
  one-device loss over all classes. Only the backbone is wrapped in DDP (`replicated`); each shard is its own.
- Partial FC: as model parallel, but a step uses, per rank, the positive classes of the global batch in its shard
  and a uniform sample of the others, `sample` percent of the shard in all.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
import torch.nn.functional as F
from torch import Tensor, nn

from dlbench.cases import Case
from dlbench.cases.face import face_arch, sampled_classes


def shard_bounds(classes: int, rank: int, ranks: int) -> tuple[int, int]:
    """Rank `rank`'s classes [lo, hi) of `classes` split as evenly as possible over `ranks`."""
    base, extra = divmod(classes, ranks)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


class FaceModel(nn.Module):
    """Images -> normalised-ready embeddings (`replicated`: backbone + BatchNorm1d); `weight` is this rank's
    classifier shard [classes here, embedding]."""

    def __init__(self, case: Case, backbone: nn.Module, rank: int = 0, world: int = 1) -> None:
        super().__init__()
        a = face_arch(case)
        self.arch = a
        self.sharded = a.model_parallel and world > 1
        self.lo, self.hi = shard_bounds(a.classes, rank, world) if self.sharded else (0, a.classes)
        self.replicated = nn.Sequential(backbone, nn.BatchNorm1d(a.embedding))
        g = torch.Generator().manual_seed(1_000 + rank)  # each shard its own draw
        self.weight = nn.Parameter(torch.empty(self.hi - self.lo, a.embedding).normal_(0.0, 0.01, generator=g))

    def forward(self, images: Tensor) -> Tensor:
        return self.replicated(images)


def _classes_used(model: FaceModel, labels: Tensor) -> Tensor | None:
    """Partial FC: the shard's rows a step uses, or None for all: every class of the global batch in this shard,
    then uniformly sampled others, `sampled_classes` rows in all (as many as the global batch where it outnumbers
    them, so that every positive stays). Without a host read: the positives' random scores are raised above any
    other's and the top rows taken, as arcface_torch's PartialFC does, so no count reaches the host mid-step."""
    shard = model.hi - model.lo
    k = max(sampled_classes(model.arch, shard), min(shard, labels.numel()))
    if k >= shard:
        return None
    score = torch.rand(shard, device=labels.device)
    here = (labels >= model.lo) & (labels < model.hi)
    raised = torch.where(here, 2.0, 0.0).to(score.dtype)
    score = score.scatter_reduce(0, (labels - model.lo).clamp(0, shard - 1), raised, reduce="amax")
    return torch.topk(score, k).indices


def arcface_loss(model: nn.Module, batch: Mapping[str, Tensor]) -> Tensor:
    """ArcFace's loss on the batch: cos(theta + m) at the true class, s x cos elsewhere, softmax cross-entropy over
    every class (across the ranks when the classifier is split); mean over the global batch. Every shape is known
    before the step (gathers and masks, no nonzero): nothing waits for the device mid-step."""
    face: FaceModel = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model  # type: ignore[assignment]
    emb, labels = model(batch["images"]), batch["labels"]
    if face.sharded:
        # DDP averages the backbone's gradients over the ranks, while each rank's embeddings already receive the
        # whole loss's gradient through the gather: scale it by the ranks, as arcface_torch does.
        world = dist.get_world_size()
        emb = torch.cat(dist_nn.all_gather(emb * world - emb.detach() * (world - 1)))
        gathered = [torch.empty_like(labels) for _ in range(world)]
        dist.all_gather(gathered, labels)
        labels = torch.cat(gathered)
    a = face.arch
    weight: Tensor = face.weight
    shard = face.hi - face.lo
    valid = (labels >= face.lo) & (labels < face.hi)  # rows whose class is in this rank's shard
    local = (labels - face.lo).clamp(0, shard - 1)
    used = _classes_used(face, labels)
    if used is not None:
        weight = weight[used]
        position = torch.full((shard,), -1, dtype=local.dtype, device=local.device)
        position[used] = torch.arange(used.numel(), device=local.device)
        valid = valid & (position[local] >= 0)
        local = position[local].clamp(min=0)
    cos = F.normalize(emb.float()) @ F.normalize(weight.float()).t()  # [global batch, classes used here]
    column = local[:, None]  # a valid row's class; column 0 elsewhere, left as it is
    here = cos.gather(1, column).squeeze(1)
    margin = torch.cos(torch.acos(here.clamp(-1 + 1e-7, 1 - 1e-7)) + a.margin)
    cos = cos.scatter(1, column, torch.where(valid, margin, here)[:, None])
    logits = a.scale * cos
    top = logits.detach().max(dim=1).values
    if face.sharded:
        dist.all_reduce(top, op=dist.ReduceOp.MAX)
    z = logits - top[:, None]
    total = z.exp().sum(dim=1)
    picked = torch.where(valid, z.gather(1, column).squeeze(1), torch.zeros_like(total))
    if face.sharded:
        total, picked = _summed(total), _summed(picked)
    return (total.log() - picked).mean()


def _summed(x: Tensor) -> Tensor:
    """The sum of x over the ranks, with the gradient of x alone: each rank's shard then gets exactly its part of
    the loss's gradient (an autograd all-reduce would return the sum of every rank's, world times too much)."""
    total = x.detach().clone()
    dist.all_reduce(total)
    return x + (total - x.detach())


__all__ = ["FaceModel", "arcface_loss", "shard_bounds"]
