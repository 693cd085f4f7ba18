"""DeepSeek-V3's routing in torch (#48), for the MoE layer (moe.py): group-limited choice, the sequence-wise
auxiliary loss, the auxiliary-loss-free bias balance, and the routing's imbalance over the steps.

- **Choice** (``choose``): the top_k of the scores plus the layer's routing bias; with expert groups, only among the
  experts of the best `topk_groups` groups, a group scored by the sum of its two best biased scores (DeepSeek-V3's
  node-limited routing, as Hugging Face's DeepseekV3 router). The gate weights are the chosen experts' *unbiased*
  scores (the bias steers the choice only), normalised over the chosen and multiplied by `routed_scale`.
- **Sequence-wise auxiliary loss** (``sequence_aux_loss``, DeepSeek-V3 eq. 17-20): per sequence of S tokens,
  ``sum_i f_i P_i`` with ``f_i = E / (k S) x`` (assignments to expert i) and ``P_i`` the mean over the sequence's
  tokens of expert i's score normalised over all experts; the mean over the sequences. Being per sequence, it is
  the same whether a batch is split over ranks or not.
- **Bias balance** (``BiasBalance``, section 2.1.2): after each optimizer step, outside the gradient, every
  expert's bias moves by ``rate x sign(mean load - load)`` where load is the step's assignments to it, summed over
  every rank of the point (one all-reduce on the device; no host read), so that every rank keeps the same bias.
- **History** (``RoutingHistory``): each training forward's assignments per expert, summed on the device into at
  most `WINDOWS` windows of steps (two neighbouring windows merge, and the window doubles, when they run out), so
  that the imbalance is visible over the steps (the bias balance's effect) at a bounded cost; read once at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from dlbench.backends.torch.distributed import GradSync

WINDOWS = 32  # windows of steps a layer's routing history keeps at most


def choose(scores: Tensor, bias: Tensor | None, top_k: int, groups: int, topk_groups: int) -> Tensor:
    """The chosen experts [T, top_k] of each token: the top_k of scores + bias among the best groups' experts."""
    choice = scores if bias is None else scores + bias
    if groups > 1:
        t, e = choice.shape
        grouped = choice.view(t, groups, e // groups)
        best = grouped.topk(min(2, e // groups), dim=-1).values.sum(-1)  # [T, groups]
        keep = torch.zeros_like(best, dtype=torch.bool).scatter_(1, best.topk(topk_groups, dim=-1).indices, True)
        choice = grouped.masked_fill(~keep[..., None], float("-inf")).view(t, e)
    return choice.topk(top_k, dim=-1).indices


def sequence_aux_loss(probs: Tensor, chosen: Tensor, sequences: int, experts: int) -> Tensor:
    """DeepSeek-V3's sequence-wise balance loss (this module's docstring): `probs` [T, E] the scores normalised
    over the experts, `chosen` [T, k], the T tokens `sequences` sequences of equal length."""
    t, k = chosen.shape
    per = t // sequences
    hits = torch.zeros(sequences, experts, device=chosen.device, dtype=probs.dtype)
    hits.scatter_add_(1, chosen.reshape(sequences, per * k), torch.ones_like(hits[:, :1]).expand(-1, per * k))
    f = hits * (experts / (k * per))
    p = probs.view(sequences, per, experts).mean(1)
    return (f * p).sum(-1).mean()


class RoutingHistory:
    """Assignments per expert summed per window of training steps (this module's docstring), on the device."""

    def __init__(self, experts: int) -> None:
        self.experts = experts
        self.windows: list[Tensor] = []
        self.span = 1  # steps per window
        self.steps = 0

    def add(self, counts: Tensor) -> None:
        """One training forward's assignments per expert (int64, on the device)."""
        if self.steps % self.span == 0:
            if len(self.windows) == WINDOWS:
                self.windows = [a + b for a, b in zip(self.windows[::2], self.windows[1::2])]
                self.span *= 2
            if self.steps % self.span == 0:
                self.windows.append(torch.zeros_like(counts))
        self.windows[-1] += counts
        self.steps += 1

    def stacked(self) -> Tensor:
        """[windows, experts] (no window: an empty [0, experts] tensor)."""
        if not self.windows:
            return torch.zeros(0, self.experts, dtype=torch.int64)
        return torch.stack(self.windows)


def imbalance_over_steps(per_layer: list[list[list[int]]], span: int, steps: int) -> list[dict[str, object]]:
    """Per window of steps, the mean over the layers of max / mean assignments (summed over the ranks)."""
    out: list[dict[str, object]] = []
    for w in range(len(per_layer[0]) if per_layer else 0):
        rows = [layer[w] for layer in per_layer if sum(layer[w])]
        if not rows:
            continue
        ratios = [max(r) / (sum(r) / len(r)) for r in rows]
        out.append({"steps": [w * span, min((w + 1) * span, steps)], "imbalance_mean": sum(ratios) / len(ratios)})
    return out


class BiasBalance(GradSync):
    """The gradient exchange `inner`, then the bias balance's update of every layer that has one (this module's
    docstring), summed over the point's ranks (`group`: None, the default group)."""

    def __init__(self, inner: GradSync, layers: list[Any], group: Any = None) -> None:
        self.inner, self.layers, self.group = inner, layers, group

    def update(self, optimizer_step: Callable[[], object]) -> None:
        self.inner.update(optimizer_step)
        with torch.no_grad():
            loads = torch.stack([m.step_counts for m in self.layers]).float()
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.all_reduce(loads, group=self.group)
            for m, load in zip(self.layers, loads):
                m.score_bias += m.cfg.bias_update_rate * torch.sign(load.mean() - load)


__all__ = [
    "WINDOWS",
    "BiasBalance",
    "RoutingHistory",
    "choose",
    "imbalance_over_steps",
    "sequence_aux_loss",
]
