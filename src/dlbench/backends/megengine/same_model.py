"""The MegEngine models' canonical weights (`dlbench check same-model`): they are torch's own descriptions
(backends/torchlike) on megengine.module, so their `state_dict` names are the canonical ones; MegEngine keeps a
BatchNorm's scale, shift and running statistics as [1, C, 1, 1], so the map reshapes those. MegEngine's CPU
kernels have no float64, so its float32 run is judged (marked)."""

from __future__ import annotations

from collections.abc import Mapping

import megengine as mge
import numpy as np

from dlbench.backends.base import Trainer
from dlbench.backends.megengine.step import MegengineTrainer
from dlbench.backends.same_model import Arrays, WeightMap, named_outputs, torchlike_inputs
from dlbench.canonical.names import tensors
from dlbench.cases import Case


def _model(trainer: Trainer) -> mge.module.Module:
    assert isinstance(trainer, MegengineTrainer), type(trainer)
    return trainer.model


class MegengineWeights(WeightMap):
    """The model's `state_dict` by canonical name, BatchNorm's [1, C, 1, 1] reshaped."""

    def load(self, trainer: Trainer, case: Case, weights: Mapping[str, np.ndarray]) -> None:
        model = _model(trainer)
        state = model.state_dict()
        missing = sorted(set(weights) - set(state))
        if missing:
            raise ValueError(f"MegEngine's model has no {', '.join(missing[:3])}")
        model.load_state_dict(
            {k: (weights[k].reshape(np.shape(v)) if k in weights else v) for k, v in state.items()}, strict=True
        )

    def read(self, trainer: Trainer, case: Case) -> Arrays:
        state = _model(trainer).state_dict()
        return {t.name: np.asarray(state[t.name]).reshape(t.shape) for t in tensors(case)}

    def forward(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray], train: bool) -> Arrays:
        model = _model(trainer)
        model.train(train)
        try:
            out = model(*torchlike_inputs(case, self.feed(trainer, case, batch)))
        finally:
            model.train()
        parts = out if isinstance(out, tuple) else (out,)
        return named_outputs(case, tuple(p.numpy() for p in parts))

    def feed(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray]) -> dict[str, mge.Tensor]:
        ints = {k: v.astype(np.int32) if np.issubdtype(v.dtype, np.integer) else v for k, v in batch.items()}
        return {k: mge.tensor(v) for k, v in ints.items()}


WEIGHTS = MegengineWeights()
