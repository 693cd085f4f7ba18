"""The evaluation forward that OneFlow's, Paddle's, MXNet's, MegEngine's, MindSpore's and Jittor's evaluators share
(#44): held-out numpy batches in, float32 logits out, batch norm's averages recomputed first (precise_bn.py). A
framework's subclass supplies only its own calls (a tensor from numpy, numpy from a tensor, no-grad, its batch-norm
statistics; where its layers have no train/eval mode and keep their statistics in the backward pass, MXNet's, or
switch modes otherwise, MindSpore's set_train, the calibration's context and forward), so they all stay one path."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import numpy as np

from dlbench.backends.precise_bn import average_batch_statistics
from dlbench.cases import Case


class HeldOutForward:
    """The forward of a fresh model holding saved weights (a decoder's or an image classifier's)."""

    def __init__(self, case: Case, model: Any, norms: list[Any]) -> None:
        self.case, self.model, self.norms = case, model, norms

    def tensor(self, array: np.ndarray) -> Any:
        """The framework's tensor holding `array`."""
        raise NotImplementedError

    def numpy(self, tensor: Any) -> np.ndarray:
        """`tensor` as a float32 numpy array."""
        raise NotImplementedError

    def no_grad(self) -> AbstractContextManager[Any]:
        """The framework's no-gradient context."""
        raise NotImplementedError

    def keep_batch_statistics(self, norm: Any) -> None:
        """Make a training-mode forward leave exactly its batch's statistics in `norm`."""
        raise NotImplementedError

    def statistics(self) -> list[Any]:
        """Every batch norm's running mean and variance tensors, in order."""
        raise NotImplementedError

    def assign(self, target: Any, value: np.ndarray) -> None:
        """Write `value` into the statistics tensor `target`."""
        raise NotImplementedError

    @contextmanager
    def calibrating(self) -> Iterator[None]:
        """The calibration forwards' context: every batch norm in training mode, keeping exactly its batch's
        statistics, no gradients; the model in eval mode after (layers that carry their mode: torch's kind)."""
        for norm in self.norms:
            self.keep_batch_statistics(norm)
            norm.train()
        with self.no_grad():
            yield
        self.model.eval()

    def calibration_forward(self, batch: dict[str, np.ndarray]) -> None:
        """One calibration forward (inside `calibrating`): it leaves its batch's statistics in the batch norms."""
        self.model(self.tensor(batch["images"]))

    def calibrate(self, batches: Iterable[dict[str, np.ndarray]]) -> None:
        """Each batch norm's averages: the mean of the calibration batches' own statistics."""
        if not self.norms:
            return

        def read() -> list[np.ndarray]:
            return [self.numpy(t) for t in self.statistics()]

        def write(stats: list[np.ndarray]) -> None:
            for target, value in zip(self.statistics(), stats, strict=True):
                self.assign(target, value)

        with self.calibrating():
            average_batch_statistics(batches, self.calibration_forward, read, write)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The logits of one held-out batch."""
        key = "input_ids" if self.case.loss.kind == "causal_lm" else "images"
        with self.no_grad():
            out = self.model(self.tensor(np.ascontiguousarray(batch[key])))
        logits = out[0] if isinstance(out, (list, tuple)) else out
        return {"logits": self.numpy(logits)}
