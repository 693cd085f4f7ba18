"""Published training-throughput figures from the seed studies, shipped as versioned YAML reference data.

Each file under ``data/`` transcribes one source document: a ``source`` block, ``notes`` and one row per
published figure. Nothing here imports a framework; the numbers are as published, never computed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

from dlbench.cases import CASES, get_case

SCHEMA_VERSION = 1
FRAMEWORKS: frozenset[str] = frozenset({"torch", "tf", "mxnet", "paddle", "oneflow", "mindspore", "jax"})
PRECISIONS: frozenset[str] = frozenset({"fp32", "amp"})
DATA_KINDS: frozenset[str] = frozenset({"synthetic", "real"})
UNITS: frozenset[str] = frozenset({"samples/s"})

_SOURCE_KEYS = ("title", "organisation", "year", "seed_file", "url")
_ROW_REQUIRED = (
    "framework",
    "framework_version",
    "model",
    "hardware",
    "devices",
    "nodes",
    "devices_per_node",
    "precision",
    "batch_size",
    "data",
    "conditions",
    "throughput",
    "unit",
    "speedup",
    "table",
    "source_line",
)
_ROW_OPTIONAL = ("model_variant", "case_params", "parallel", "tflops_per_device", "tflops_line")
_LAYOUT_KEYS = ("data", "tensor", "pipeline", "micro_batches")  # a row's `parallel` mapping (GPT, #23)


class ReferenceDataError(ValueError):
    """A reference data file or one of its rows does not follow the schema."""


@dataclass(frozen=True)
class ReferenceSource:
    """The document a reference file transcribes, and the file it lives in."""

    file: str
    title: str
    organisation: str
    year: int | None
    seed_file: str
    url: str | None
    notes: str


@dataclass(frozen=True)
class ReferenceRow:
    """One published throughput figure with the conditions it was measured under."""

    source: ReferenceSource
    index: int
    framework: str
    framework_version: str | None
    model: str
    model_variant: str | None
    hardware: str
    devices: int
    nodes: int | None
    devices_per_node: int | None
    precision: str
    batch_size: int
    data: str | None
    conditions: tuple[str, ...]
    throughput: float
    unit: str
    speedup: float | None
    table: str
    source_line: int
    case_params: tuple[tuple[str, int], ...] = ()  # the case's parameters the figure was measured at (GPT's shape)
    parallel: tuple[tuple[str, int], ...] = ()  # data, tensor, pipeline, micro_batches (DLPerf's GPT layouts)
    tflops_per_device: float | None = None  # the achieved TFLOP/s per device the source gives beside it
    tflops_line: int | None = None

    @property
    def params(self) -> dict[str, int]:
        """The case parameters, by name."""
        return dict(self.case_params)

    @property
    def layout(self) -> dict[str, int]:
        """The parallel layout, by name (empty: not stated, one replica per device)."""
        return dict(self.parallel)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _opt_str(value: object) -> bool:
    return value is None or isinstance(value, str)


def _pos_int(value: object) -> bool:
    return _is_int(value) and value > 0  # type: ignore[operator]


def _opt_pos_int(value: object) -> bool:
    return value is None or _pos_int(value)


def _source(file: str, doc: Any) -> ReferenceSource:
    def fail(why: str) -> ReferenceDataError:
        return ReferenceDataError(f"{file}: {why}")

    if not isinstance(doc, dict):
        raise fail("top level must be a mapping")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise fail(f"schema_version must be {SCHEMA_VERSION}, got {doc.get('schema_version')!r}")
    src = doc.get("source")
    if not isinstance(src, dict):
        raise fail("source must be a mapping")
    missing = [k for k in _SOURCE_KEYS if k not in src]
    if missing:
        raise fail(f"source lacks {', '.join(missing)}")
    for key in ("title", "organisation", "seed_file"):
        if not isinstance(src[key], str) or not src[key]:
            raise fail(f"source.{key} must be a non-empty string")
    if src["year"] is not None and not _is_int(src["year"]):
        raise fail("source.year must be an integer or null")
    if not _opt_str(src["url"]):
        raise fail("source.url must be a string or null")
    if not isinstance(doc.get("notes"), str):
        raise fail("notes must be a string")
    if not isinstance(doc.get("rows"), list):
        raise fail("rows must be a list")
    return ReferenceSource(
        file=file,
        title=src["title"],
        organisation=src["organisation"],
        year=src["year"],
        seed_file=src["seed_file"],
        url=src["url"],
        notes=doc["notes"],
    )


_CHECKS: dict[str, tuple[Any, str]] = {
    "framework": (lambda v: v in FRAMEWORKS, f"one of {sorted(FRAMEWORKS)}"),
    "framework_version": (_opt_str, "a string or null"),
    "model": (lambda v: isinstance(v, str) and v in CASES, f"a case name ({', '.join(CASES)})"),
    "model_variant": (_opt_str, "a string or null"),
    "hardware": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "devices": (_pos_int, "a positive integer"),
    "nodes": (_opt_pos_int, "a positive integer or null"),
    "devices_per_node": (_opt_pos_int, "a positive integer or null"),
    "precision": (lambda v: v in PRECISIONS, f"one of {sorted(PRECISIONS)}"),
    "batch_size": (_pos_int, "a positive integer"),
    "data": (lambda v: v is None or v in DATA_KINDS, f"one of {sorted(DATA_KINDS)} or null"),
    "conditions": (
        lambda v: isinstance(v, list) and all(isinstance(c, str) and c for c in v),
        "a list of non-empty strings",
    ),
    "throughput": (lambda v: _is_number(v) and v > 0, "a number > 0"),
    "unit": (lambda v: v in UNITS, f"one of {sorted(UNITS)}"),
    "speedup": (lambda v: v is None or (_is_number(v) and v > 0), "a number > 0 or null"),
    "table": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "source_line": (_pos_int, "a positive integer"),
}


def _row(source: ReferenceSource, index: int, raw: Any) -> ReferenceRow:
    def fail(why: str) -> ReferenceDataError:
        return ReferenceDataError(f"{source.file}: row {index}: {why}")

    if not isinstance(raw, dict):
        raise fail("must be a mapping")
    missing = [k for k in _ROW_REQUIRED if k not in raw]
    if missing:
        raise fail(f"missing {', '.join(missing)}")
    unknown = sorted(set(raw) - set(_ROW_REQUIRED) - set(_ROW_OPTIONAL))
    if unknown:
        raise fail(f"unknown field(s) {', '.join(map(str, unknown))}")
    values: dict[str, Any] = {k: raw.get(k) for k in _CHECKS}
    for key, (ok, what) in _CHECKS.items():
        if not ok(values[key]):
            raise fail(f"{key} must be {what}, got {values[key]!r}")
    nodes, per_node = values["nodes"], values["devices_per_node"]
    if nodes is not None and per_node is not None and nodes * per_node != values["devices"]:
        raise fail(f"nodes x devices_per_node ({nodes} x {per_node}) != devices ({values['devices']})")
    values["conditions"] = tuple(values["conditions"])
    return ReferenceRow(source=source, index=index, **values, **_gpt_fields(raw, fail))


def _int_map(value: object, keys: tuple[str, ...] | None) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and (keys is None or k in keys) and _pos_int(v) for k, v in value.items()
    )


def _gpt_fields(raw: dict[str, Any], fail: Any) -> dict[str, Any]:
    """The optional fields of a row measured at case parameters and a parallel layout (DLPerf's GPT table)."""
    params, layout = raw.get("case_params", {}), raw.get("parallel", {})
    if not _int_map(params, None):
        raise fail(f"case_params must map parameter names to positive integers, got {params!r}")
    if not _int_map(layout, _LAYOUT_KEYS):
        raise fail(f"parallel must map {', '.join(_LAYOUT_KEYS)} to positive integers, got {layout!r}")
    if layout and layout.get("data", 1) * layout.get("tensor", 1) * layout.get("pipeline", 1) != raw["devices"]:
        raise fail(f"parallel data x tensor x pipeline != devices ({raw['devices']})")
    tflops, line = raw.get("tflops_per_device"), raw.get("tflops_line")
    if tflops is not None and not (_is_number(tflops) and tflops > 0):
        raise fail(f"tflops_per_device must be a number > 0 or absent, got {tflops!r}")
    if line is not None and not _pos_int(line):
        raise fail(f"tflops_line must be a positive integer or absent, got {line!r}")
    return {
        "case_params": tuple(sorted(params.items())),
        "parallel": tuple(sorted(layout.items())),
        "tflops_per_device": tflops,
        "tflops_line": line,
    }


def load_file(name: str, text: str) -> list[ReferenceRow]:
    """Parse and validate one reference YAML document; name is used in error messages."""
    import yaml  # here, not at import: a point's controller imports this package (start-up)

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ReferenceDataError(f"{name}: not valid YAML: {exc}") from exc
    source = _source(name, doc)
    return [_row(source, i, raw) for i, raw in enumerate(doc["rows"])]


def data_files() -> list[str]:
    """Names of the reference YAML files shipped in the package, sorted."""
    folder = resources.files(__name__).joinpath("data")
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".yaml"))


@functools.lru_cache(maxsize=1)
def _load_sources() -> tuple[tuple[ReferenceSource, tuple[ReferenceRow, ...]], ...]:
    import yaml

    folder = resources.files(__name__).joinpath("data")
    out = []
    for name in data_files():
        text = folder.joinpath(name).read_text(encoding="utf-8")
        doc_rows = load_file(name, text)
        source = doc_rows[0].source if doc_rows else _source(name, yaml.safe_load(text))
        out.append((source, tuple(doc_rows)))
    return tuple(out)


def load_sources() -> list[ReferenceSource]:
    """Every shipped reference source, rows or not, in file-name order."""
    return [source for source, _ in _load_sources()]


def load_all() -> list[ReferenceRow]:
    """Every row of every shipped reference file, validated, in file then row order."""
    return [row for _, rows in _load_sources() for row in rows]


def find(model: str, precision: str, batch_size: int, framework: str | None = None) -> list[ReferenceRow]:
    """Published rows for a model (name or alias), precision and per-device batch, optionally one framework; rows
    measured at case parameters or a parallel layout (DLPerf's GPT table) match only where those are compared too
    (report/gpt_layouts.py), so they are left out here."""
    name = get_case(model).name
    return [
        r
        for r in load_all()
        if r.model == name
        and r.precision == precision
        and r.batch_size == batch_size
        and (framework is None or r.framework == framework)
        and not r.case_params
        and not r.parallel
    ]


__all__ = [
    "DATA_KINDS",
    "FRAMEWORKS",
    "PRECISIONS",
    "ReferenceDataError",
    "ReferenceRow",
    "ReferenceSource",
    "data_files",
    "find",
    "load_all",
    "load_file",
    "load_sources",
]
