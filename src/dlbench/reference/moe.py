"""Published MoE training figures (#36): stack, GPU, layout, precision, tokens/s/GPU, TFLOP/s/GPU, whether the
source states force-balanced routing, and the source, read from moe_anchors.yaml. Only figures read from their
source are kept; none is a dlbench measurement. Framework-free."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Literal

import yaml

VERSION = 1


@dataclass(frozen=True)
class MoeAnchor:
    """One stack's published MoE training figure; None where the source gives none."""

    stack: str
    model_name: str
    gpu: str
    gpus: int
    layout: str
    precision: str
    tokens_per_s_per_gpu: float | None
    tflops_per_gpu: float | None
    balanced: Literal["yes", "no", "not stated"]
    source: str


@functools.cache
def moe_anchors() -> tuple[MoeAnchor, ...]:
    """Every row of the packaged file (a wrong version or field is a ValueError or TypeError)."""
    raw = yaml.safe_load(resources.files("dlbench.reference").joinpath("moe_anchors.yaml").read_text("utf-8"))
    if not isinstance(raw, dict) or raw.get("version") != VERSION:
        raise ValueError(f"moe_anchors.yaml: version {VERSION} expected")
    rows = tuple(MoeAnchor(**row) for row in raw["anchors"])
    for a in rows:
        if a.balanced not in ("yes", "no", "not stated") or not a.source.startswith("https://"):
            raise ValueError(f"moe_anchors.yaml: {a.model_name}: balanced must be yes/no/not stated, source https")
    return rows


__all__ = ["MoeAnchor", "moe_anchors"]
