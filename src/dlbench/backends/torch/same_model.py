"""The torch model's canonical weights (`dlbench check same-model`): the canonical names and layouts are the torch
backend's own `state_dict` (dlbench.canonical.names says so and a test checks it), so the map is the identity;
a tied weight (a decoder's LM head) is its embedding's tensor and is set once."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from dlbench.backends import same_model as common
from dlbench.backends.base import Backend, Trainer
from dlbench.backends.same_model import Arrays, WeightMap, as_model_input, named_outputs, torchlike_inputs
from dlbench.backends.torch.step import TorchTrainer
from dlbench.cases import Case
from dlbench.spec import PointSpec
from dlbench.wire import RankContext


def _model(trainer: Trainer) -> torch.nn.Module:
    assert isinstance(trainer, TorchTrainer), type(trainer)
    return trainer.model


class TorchWeights(WeightMap):
    """The identity map onto the model's `state_dict`."""

    def load(self, trainer: Trainer, case: Case, weights: Mapping[str, np.ndarray]) -> None:
        state = _model(trainer).state_dict()
        with torch.no_grad():
            for name, value in weights.items():
                state[name].copy_(torch.from_numpy(value))  # copy_ casts to the model's dtype

    def float64_trainer(self, backend: Backend, spec: PointSpec, case: Case) -> Trainer:
        """The backend's trainer with its model in float64 (the optimizer keeps the same parameter objects)."""
        trainer = backend.build(spec, case, RankContext())
        _model(trainer).double()
        return trainer

    def read(self, trainer: Trainer, case: Case) -> Arrays:
        state = _model(trainer).state_dict()
        return {k: v.detach().cpu().numpy().copy() for k, v in state.items() if not k.endswith("num_batches_tracked")}

    def forward(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray], train: bool) -> Arrays:
        model = _model(trainer)
        inputs = torchlike_inputs(case, self.feed(trainer, case, batch))
        parts = common.eval_outputs(
            model, train, torch.no_grad(), lambda: model(*inputs), lambda p: p.detach().float().cpu().numpy()
        )
        return named_outputs(case, parts)

    def feed(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
        assert isinstance(trainer, TorchTrainer)
        dtype = str(next(trainer.model.parameters()).dtype).removeprefix("torch.")
        fed = as_model_input(batch, dtype)
        return {k: torch.from_numpy(np.ascontiguousarray(v)).to(trainer.device) for k, v in fed.items()}


WEIGHTS = TorchWeights()
