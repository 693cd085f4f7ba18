"""MLPerf Training's published single-node times of LoRA and DLRMv2 (#47), read from mlperf_anchors.yaml, and the
ones of a case's benchmark. Framework-free."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import yaml

VERSION = 1


@dataclass(frozen=True)
class MlperfAnchor:
    """One MLPerf result: round, benchmark, the dlbench case of its model, minutes to its quality target, system."""

    round: str
    benchmark: str
    model: str
    minutes: float
    target: str
    system: str
    gpus: int
    mlperf_id: str
    source: str


@functools.cache
def anchors() -> tuple[MlperfAnchor, ...]:
    """Every anchor of the packaged file (a wrong version or field is a ValueError)."""
    text = resources.files("dlbench.reference").joinpath("mlperf_anchors.yaml").read_text("utf-8")
    raw = yaml.safe_load(text)
    if not isinstance(raw, dict) or raw.get("version") != VERSION:
        raise ValueError(f"mlperf_anchors.yaml: version {VERSION} expected")
    return tuple(MlperfAnchor(**row) for row in raw["anchors"])


def for_model(model: str) -> list[MlperfAnchor]:
    """The published times of the benchmark whose model the case is (llama2_70b, dlrm_v2), fastest first."""
    return sorted((a for a in anchors() if a.model == model), key=lambda a: a.minutes)


__all__ = ["MlperfAnchor", "anchors", "for_model"]
