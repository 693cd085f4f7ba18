"""Learnable text-to-image data for a diffusion transformer's `--converge` (#48): structured synthetic latents, made
by dlbench from a seed (no downloads), framework-free (numpy).

`templates` smooth latent images (each channel a GRID x GRID grid of +-1 scaled up to the side: unit variance, the
VAE latents' scale), each named by its own fixed text embedding and pooled embedding (standard normal). A sample is
one template with its embeddings. The latent is then a function of the text, so a flow-matching model that reads
its conditioning can predict the velocity e - x0 exactly from x_t, t and the text: the best possible loss is 0.
A model that ignores its inputs does no better than the mean velocity's error, 1 + Var(x0) (about 1.9, `blind_loss`),
which is where a zero-initialised FLUX output starts. The target sits between (analysis/targets.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dlbench.cases import LatentInput

GRID = 4  # template cells per side
LATENT_TEMPLATES = 8  # templates --converge feeds a diffusion transformer


@dataclass(frozen=True)
class LatentTemplates:
    """`templates` latent templates at `side`, with their text and pooled embeddings (this module's docstring)."""

    latent: LatentInput
    side: int
    templates: int = LATENT_TEMPLATES
    seed: int = 0
    order: int = 0  # which stream of examples (a run's seed): the templates stay those of `seed`
    latents: np.ndarray = field(init=False, repr=False, compare=False)
    text: np.ndarray = field(init=False, repr=False, compare=False)
    pooled: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.templates < 2 or self.side < 1:
            raise ValueError(f"latent templates need >= 2 templates and a side >= 1; got {self.templates}, {self.side}")
        rng = np.random.default_rng([self.seed, 48, 1])
        c = self.latent.channels
        grids = rng.choice([-1.0, 1.0], size=(self.templates, c, GRID, GRID))
        index = (np.arange(self.side) * GRID) // self.side
        up = grids[:, :, index][:, :, :, index].astype(np.float32)
        text = rng.standard_normal((self.templates, self.latent.text_tokens, self.latent.text_dim), dtype=np.float32)
        pooled = rng.standard_normal((self.templates, self.latent.pooled_dim), dtype=np.float32)
        object.__setattr__(self, "latents", up)
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "pooled", pooled)

    @property
    def blind_loss(self) -> float:
        """The flow-matching loss of predicting the mean velocity whatever the input: 1 + Var(x0) per element."""
        return float(1.0 + self.latents.var(axis=0).mean())

    def batch(self, step: int, size: int) -> dict[str, np.ndarray]:
        """Batch number `step`: `size` samples, each a template drawn uniformly with its embeddings."""
        ids = np.random.default_rng([self.seed, 48, 2, self.order, step]).integers(0, self.templates, size)
        return {"latents": self.latents[ids], "text": self.text[ids], "pooled": self.pooled[ids]}


__all__ = ["LATENT_TEMPLATES", "LatentTemplates"]
