"""A torch-shaped backend's model functions from its model table: build, count, loss."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dlbench.backends.context import SINGLE, BuildContext
from dlbench.backends.torchlike import bert
from dlbench.backends.torchlike.ops import TorchOps
from dlbench.cases import Case

Builder = Callable[[Case, BuildContext], Any]  # every builder: the case, and where it builds (backends/context.py)


def functions(
    ops: TorchOps, models: Mapping[str, Builder]
) -> tuple[
    Callable[..., Any],  # (case, ctx=SINGLE)
    Callable[[Any], int],
    Callable[[Case, Any, Mapping[str, Any]], Any],
]:
    """``build_model(case, ctx)``, ``count_trainable(model)`` (tied parameters once) and ``train_loss(case, model,
    batch)`` (the image, BERT and decoder cases) for a backend whose table is `models`."""

    def build_model(case: Case, ctx: BuildContext = SINGLE) -> Any:
        """A freshly initialised model for a case, built where `ctx` says (one device by default)."""
        return models[case.name](case, ctx)

    def train_loss(case: Case, model: Any, batch: Mapping[str, Any]) -> Any:
        """The case's training loss on one batch: a decoder's mean next-token cross-entropy (plus the case's weight
        x a mixture of experts' auxiliary loss), else `bert.train_loss`'s."""
        if case.loss.kind != "causal_lm":
            return bert.train_loss(ops, case, model, batch)
        loss = ops.xent(model(batch["input_ids"]), batch["labels"])
        if hasattr(model, "aux_loss") and case.loss.aux_weight:  # the experts' load-balancing loss
            loss = loss + case.loss.aux_weight * model.aux_loss()
        return loss

    return build_model, ops.count, train_loss
