"""Points for tests written as flat keyword tables: a layout option named among the spec's own fields
(`tensor_parallel=2`, `pipeline_schedule="gpipe"`, as version 2 stored them) goes into the point's `Layout`."""

from __future__ import annotations

import dataclasses
from typing import Any

from dlbench.parallel import Layout, option_fields
from dlbench.spec import PointSpec

_OLD_NAMES = {"pipeline_schedule": "schedule"}
_OPTIONS = {f.name for f in option_fields()}


def _split(kw: dict[str, Any], layout: Layout) -> dict[str, Any]:
    options = {_OLD_NAMES.get(k, k): kw.pop(k) for k in list(kw) if _OLD_NAMES.get(k, k) in _OPTIONS}
    if options:
        kw["layout"] = dataclasses.replace(layout, **options)
    return kw


def flat_spec(**kw: Any) -> PointSpec:
    """A PointSpec from flat keywords (layout options among them)."""
    return PointSpec(**_split(kw, Layout()))


def flat_replace(spec: PointSpec, **kw: Any) -> PointSpec:
    """dataclasses.replace over flat keywords (layout options among them)."""
    return dataclasses.replace(spec, **_split(kw, spec.layout))
