"""The OneFlow models' canonical weights (`dlbench check same-model`): they are torch's own descriptions
(backends/torchlike) on oneflow.nn, so their `state_dict` names and layouts are the canonical ones, as torch's are;
the map is the identity. Its float64 model is the backend's, `.double()`."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import oneflow as flow

from dlbench.backends import same_model as common
from dlbench.backends.base import Backend, Trainer
from dlbench.backends.oneflow.step import OneflowTrainer
from dlbench.backends.same_model import Arrays, WeightMap, as_model_input, named_outputs, torchlike_inputs
from dlbench.cases import Case
from dlbench.spec import PointSpec
from dlbench.wire import RankContext


def _model(trainer: Trainer) -> flow.nn.Module:
    assert isinstance(trainer, OneflowTrainer), type(trainer)
    return trainer.model


class OneflowWeights(WeightMap):
    """The identity map onto the model's `state_dict`."""

    def load(self, trainer: Trainer, case: Case, weights: Mapping[str, np.ndarray]) -> None:
        state = _model(trainer).state_dict()
        with flow.no_grad():
            for name, value in weights.items():
                target = state[name]
                target.copy_(flow.tensor(value, dtype=target.dtype, device=target.device))

    def read(self, trainer: Trainer, case: Case) -> Arrays:
        state = _model(trainer).state_dict()
        return {k: v.numpy().copy() for k, v in state.items() if not k.endswith("num_batches_tracked")}

    def float64_trainer(self, backend: Backend, spec: PointSpec, case: Case) -> Trainer:
        """The backend's trainer with its model in float64 (the optimizer keeps the same parameter objects)."""
        trainer = backend.build(spec, case, RankContext())
        _model(trainer).double()
        return trainer

    def forward(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray], train: bool) -> Arrays:
        model = _model(trainer)
        inputs = torchlike_inputs(case, self.feed(trainer, case, batch))
        parts = common.eval_outputs(model, train, flow.no_grad(), lambda: model(*inputs), lambda p: p.numpy())
        return named_outputs(case, parts)

    def feed(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray]) -> dict[str, flow.Tensor]:
        assert isinstance(trainer, OneflowTrainer)
        dtype = "float64" if next(trainer.model.parameters()).dtype == flow.float64 else "float32"
        return {k: flow.tensor(v, device=trainer.device) for k, v in as_model_input(batch, dtype).items()}


WEIGHTS = OneflowWeights()
