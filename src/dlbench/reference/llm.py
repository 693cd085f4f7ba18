"""Decoder-pretraining anchors (#35): stack, GPU, layout, precision, tokens/s/GPU, TFLOP/s/GPU and source, read
from llm_anchors.yaml, and the ones that match a point (same model shape, GPU, precision). Framework-free."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import yaml

from dlbench.cases import UnknownCase, get_case
from dlbench.spec import SpecError

VERSION = 1


@dataclass(frozen=True)
class LlmAnchor:
    """One stack's published decoder-pretraining figure; None where the source gives none."""

    stack: str
    gpu: str
    model: str | None
    model_name: str
    gpus: int
    layout: str
    precision: str | None
    tokens_per_s_per_gpu: float | None
    tflops_per_gpu: float | None
    mfu: str | None
    source: str


@functools.cache
def anchors() -> tuple[LlmAnchor, ...]:
    """Every anchor of the packaged file (a wrong version or field is a ValueError)."""
    raw = yaml.safe_load(resources.files("dlbench.reference").joinpath("llm_anchors.yaml").read_text("utf-8"))
    if not isinstance(raw, dict) or raw.get("version") != VERSION:
        raise ValueError(f"llm_anchors.yaml: version {VERSION} expected")
    return tuple(LlmAnchor(**row) for row in raw["anchors"])


def _shape(model: str, params: dict[str, int]) -> object:
    try:
        return get_case(model).configured(params).arch
    except (UnknownCase, SpecError):
        return None


def matching(model: str, params: dict[str, int], device_model: str, precision: str) -> list[LlmAnchor]:
    """The anchors measured on this point's model shape (a member or the family at its shape), on its GPU kind
    (the anchor's GPU name within the device's NVML name) and in its precision."""
    shape = _shape(model, params)
    if shape is None:
        return []
    return [
        a
        for a in anchors()
        if a.model is not None
        and _shape(a.model, {}) == shape
        and a.gpu.lower() in device_model.lower()
        and a.precision == precision
    ]


__all__ = ["LlmAnchor", "anchors", "matching"]
