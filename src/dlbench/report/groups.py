"""Stored points arranged the seeds' way: one section per model, precision and data, rows of configurations
(batch per device, scale), columns of frameworks; failures as numbered footnotes, caveats of ok points as
lettered remarks; speedup against 1 device.

No configuration is hidden: points of a section that differ in any other field of their spec's key (a case
parameter such as vocab= or classes=, threads, the launcher, a memory limit ...) get rows of their own, labelled
with what differs, and points of one framework that differ in an identity key (its version, the device ...)
get columns of their own. Only exact repeats of one configuration share a cell: the newest is shown and the
older ones are counted beside it.

Plain data only: charts.py, html.py and markdown.py render it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from dlbench.analysis.scaling import Scaling, scaled
from dlbench.analysis.variants import Field, config_fields, field_label
from dlbench.analysis.variants import varying as variant_names
from dlbench.backends import all_backends
from dlbench.cases import CASES, UnknownCase, get_case
from dlbench.report.caveats import caveats
from dlbench.store.store import StoredPoint

STATUS_TEXT: dict[str, str] = {
    "oom": "OOM",
    "unsupported": "unsupported",
    "timeout": "timeout",
    "crashed": "crashed",
    "error": "error",
    "failed_check": "failed check",
}


def framework_title(name: str) -> str:
    """'torch' -> 'PyTorch' where the backend registry knows it; the name itself otherwise."""
    info = all_backends(include_test=True).get(name)
    return info.title if info else name


def model_title(name: str) -> str:
    """'resnet50' -> 'ResNet-50 v1.5' from the case registry; the name itself otherwise."""
    try:
        return get_case(name).title
    except UnknownCase:
        return name


def max_batch_of(p: StoredPoint) -> int | None:
    """The max batch a sweep found, from extra['max_batch'] ({'max': N, ...} or N); None when there is none."""
    v = p.result.extra.get("max_batch")
    if isinstance(v, dict):
        v = v.get("max")
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def batch_groups(p: StoredPoint) -> set[str]:
    """The sweep's batch groups of a point (extra['batch_group'], e.g. 'fixed+max'), plus 'max' for a max search."""
    groups = {g for g in str(p.result.extra.get("batch_group") or "").split("+") if g}
    return groups | ({"max"} if max_batch_of(p) is not None else set())


@dataclass(frozen=True)
class Column:
    """A framework, with the switches that make it a distinct series (compile, channels last)."""

    framework: str
    compile: bool = False
    channels_last: bool = False
    variant: tuple[str, ...] = ()  # identity keys that set this column apart, e.g. ('framework_version=2.13',)

    @property
    def title(self) -> str:
        """'PyTorch +compile', with what sets the column apart: 'PyTorch · framework_version=2.13'."""
        return (
            framework_title(self.framework)
            + (" +compile" if self.compile else "")
            + (" +channels-last" if self.channels_last else "")
            + "".join(f" · {v}" for v in self.variant)
        )


@dataclass(frozen=True)
class RowKey:
    """A configuration row: batch per device and scale (and the strategy where it is not 'none')."""

    batch_size: int
    nodes: int
    devices_per_node: int
    strategy: str = "none"
    variant: tuple[str, ...] = ()  # what sets these points apart in the section, e.g. ('vocab=3.2M', 'threads=2')
    order: tuple[tuple[int, float, str], ...] = field(default=(), compare=False)  # the variant's sort key

    @property
    def devices(self) -> int:
        """Devices across all nodes."""
        return self.nodes * self.devices_per_node

    @property
    def scale(self) -> str:
        """The seeds' notation, e.g. 2n8c."""
        return f"{self.nodes}n{self.devices_per_node}c"

    @property
    def label(self) -> str:
        """'bs 64 · 1n4c (ddp)', then what sets the row apart: ' · vocab=3.2M threads=2'."""
        return (
            f"bs {self.batch_size} · {self.scale}"
            + (f" ({self.strategy})" if self.strategy != "none" else "")
            + (f" · {' '.join(self.variant)}" if self.variant else "")
        )

    @property
    def chart_label(self) -> str:
        """The label with what sets the row apart on a line of its own (chart tick labels stay narrow)."""
        return (
            f"bs {self.batch_size} · {self.scale}"
            + (f" ({self.strategy})" if self.strategy != "none" else "")
            + (f"\n{' '.join(self.variant)}" if self.variant else "")
        )

    @property
    def config(self) -> tuple[int, tuple[str, ...]]:
        """The row less its scale: the points a scaling line joins (batch per device and what sets it apart)."""
        return self.batch_size, self.variant


@dataclass(frozen=True)
class Cell:
    """The point shown in one table cell, with its speedup and, for a failure, its footnote number."""

    point: StoredPoint
    scaling: Scaling | None = None
    baseline_id: int | None = None
    footnote: int | None = None
    hidden: int = 0  # earlier exact repeats of this configuration (same spec key and identity), not shown
    scaling_marks: tuple[str, ...] = ()  # where the speedup's evidence is weak (analysis/scaling.py Scaled.marks)
    remark: str | None = None  # the mark of an ok point's caveat note (report/caveats.py), e.g. 'a'

    @property
    def repeats_text(self) -> str:
        """'+2 earlier repeats of this configuration' ('' when the point is the only one)."""
        return (
            f"+{self.hidden} earlier repeat{'s' if self.hidden != 1 else ''} of this configuration"
            if self.hidden
            else ""
        )

    @property
    def ok(self) -> bool:
        """Whether the point measured a throughput."""
        return self.point.result.status == "ok" and self.point.result.metrics is not None

    @property
    def status_text(self) -> str:
        """'OOM', 'unsupported' ... for a failure."""
        return STATUS_TEXT.get(self.point.result.status, self.point.result.status)


@dataclass(frozen=True)
class Footnote:
    """A failure explained under its table, the way the seeds footnoted OOMs and missing cells."""

    number: int
    status: str
    text: str


@dataclass(frozen=True)
class Remark:
    """A caveat of ok cells (a framework's own per-step host sync ...), marked in them and said under the table."""

    mark: str
    text: str


@dataclass
class Section:
    """One table: a model at a precision and data source on one kind of device."""

    model: str
    precision: str
    data: str
    device: str
    input_size: int | None
    columns: list[Column] = field(default_factory=list)
    rows: list[RowKey] = field(default_factory=list)
    cells: dict[tuple[RowKey, Column], Cell] = field(default_factory=dict)
    footnotes: list[Footnote] = field(default_factory=list)
    groups: dict[RowKey, set[str]] = field(default_factory=dict)
    common: tuple[str, ...] = ()  # case parameters every point of the section sets alike, e.g. ('vocab=4M',)
    remarks: list[Remark] = field(default_factory=list)

    @property
    def slug(self) -> str:
        """An id for anchors and file names."""
        size = f"-{self.input_size}px" if self.input_size else ""
        return f"{self.model}-{self.precision}-{self.data}-{self.device}{size}"

    @property
    def title(self) -> str:
        """'ResNet-50 v1.5 · fp32 · synthetic data · CPU' (and the case parameters all its points set)."""
        size = f" · input {self.input_size}" if self.input_size else ""
        return (
            f"{model_title(self.model)} · {self.precision} · {self.data} data · {self.device.upper()}{size}"
            + "".join(f" · {c}" for c in self.common)
        )

    @property
    def configs(self) -> list[tuple[int, tuple[str, ...]]]:
        """Distinct rows less their scale (batch per device and variant), in row order."""
        return list(dict.fromkeys(r.config for r in self.rows))

    @property
    def scales(self) -> list[int]:
        """Distinct device counts in this section, ascending."""
        return sorted({r.devices for r in self.rows})

    @property
    def batches(self) -> list[int]:
        """Distinct per-device batch sizes in this section, ascending."""
        return sorted({r.batch_size for r in self.rows})

    def group_label(self, row: RowKey) -> str:
        """The batch groups of a row as the seeds named them, e.g. 'max' or 'fixed'; '' when not from a sweep."""
        return "+".join(sorted(self.groups.get(row, set())))

    def cell(self, row: RowKey, col: Column) -> Cell | None:
        """The cell at row and column, if measured."""
        return self.cells.get((row, col))

    def points(self) -> list[StoredPoint]:
        """Every point shown in this section."""
        return [c.point for c in self.cells.values()]


def _section_key(p: StoredPoint) -> tuple[str, str, str, str, int | None]:
    s = p.result.spec
    return (s.model, s.precision, s.data, s.device, s.input_size)


def _order(model: str) -> int:
    names = list(CASES)
    return names.index(model) if model in names else len(names)


def _footnote_text(p: StoredPoint) -> str:
    r, s = p.result, p.result.spec
    lines = [ln for ln in (r.error or "").strip().splitlines() if ln.strip()]
    why = (lines[-1] if lines[0].startswith("Traceback") else lines[0]).strip() if lines else "no error recorded"
    return (
        f"{framework_title(s.framework)}, batch {s.batch_size}, {s.scale}: "
        f"{STATUS_TEXT.get(r.status, r.status)}: {why[:200]}"
    )


def _add_scaling(sec: Section, pool: Sequence[StoredPoint]) -> None:
    """Speedup and efficiency of each multi-device cell, against the 1-device point analysis/scaling.py picks."""
    for (row, col), cell in list(sec.cells.items()):
        if not cell.ok or row.devices == 1:
            continue
        sc = scaled(pool, cell.point.result)
        if sc is not None:
            sec.cells[(row, col)] = Cell(cell.point, sc.scaling, sc.baseline.id, None, cell.hidden, sc.marks)


def _add_footnotes(sec: Section) -> None:
    texts: dict[str, int] = {}
    for row in sec.rows:
        for col in sec.columns:
            cell = sec.cells.get((row, col))
            if cell is None or cell.ok:
                continue
            text = _footnote_text(cell.point)
            if text not in texts:
                texts[text] = len(texts) + 1
                sec.footnotes.append(Footnote(texts[text], cell.point.result.status, text))
            sec.cells[(row, col)] = Cell(cell.point, None, None, texts[text], cell.hidden)


# Configuration fields the section, a row or a column shows already (report/variants.py names every field; the
# protocol's fields are not here: two protocols get rows of their own).
_SHOWN = frozenset(
    {
        "framework",
        "model",
        "batch_size",
        "precision",
        "compile",
        "channels_last",
        "device",
        "data",
        "input_size",
        "nodes",
        "devices_per_node",
        "strategy",
    }
)
_NOT_IDENTITY = frozenset({"framework", "threads"})  # the column's own name; threads makes rows, not columns


def _row_fields(p: StoredPoint) -> dict[str, Field]:
    """Every field of a point's configuration that a section's rows may differ in (report/variants.py)."""
    return {k: v for k, v in config_fields(p.result).items() if k not in _SHOWN}


def _identity_fields(p: StoredPoint) -> dict[str, Field]:
    return {k: ((1, 0.0, v), f"{k}={v}") for k, v in p.result.env.identity.items() if k not in _NOT_IDENTITY}


def _column_variants(points: Sequence[StoredPoint]) -> dict[int, tuple[str, ...]]:
    """Per point id, the identity keys that set it apart from other points of its framework's column ('unknown'
    where it reported none: a worker that died before saying its version)."""
    by_column: dict[tuple[str, bool, bool], list[StoredPoint]] = defaultdict(list)
    for p in points:
        s = p.result.spec
        by_column[(s.framework, s.compile, s.channels_last)].append(p)
    out: dict[int, tuple[str, ...]] = {}
    for pts in by_column.values():
        fields = [_identity_fields(p) for p in pts]
        varying = [k for k in sorted({k for f in fields for k in f}) if len({f[k][1] for f in fields if k in f}) > 1]
        for p, f in zip(pts, fields):
            out[p.id] = tuple(f[k][1] if k in f else f"{k}=unknown" for k in varying)
    return out


def _common_params(points: Sequence[StoredPoint]) -> tuple[str, ...]:
    """Case parameters every point of a section sets to the same value ('vocab=4M'), for the section's title."""
    sets = [dict(p.result.spec.case_params) for p in points]
    same = set.intersection(*(set(d.items()) for d in sets)) if sets else set()
    return tuple(field_label(k, v)[1] for k, v in sorted(same))


def _add_remarks(sec: Section) -> None:
    """Mark each ok cell whose point carries a caveat; one remark per distinct text, lettered a, b ..."""
    marks: dict[str, str] = {}
    for row in sec.rows:
        for col in sec.columns:
            cell = sec.cells.get((row, col))
            if cell is None or not cell.ok:
                continue
            found = caveats(cell.point.result)
            if not found:
                continue
            text = f"{framework_title(col.framework)} {sec.precision}: {'; '.join(found)}"
            if text not in marks:
                marks[text] = chr(ord("a") + len(marks)) if len(marks) < 26 else str(len(marks) + 1)
                sec.remarks.append(Remark(marks[text], text))
            sec.cells[(row, col)] = replace(cell, remark=marks[text])


def build_sections(points: list[StoredPoint], pool: Sequence[StoredPoint] | None = None) -> list[Section]:
    """Points grouped into sections, rows, columns and cells. Points that differ in their configuration or
    identity get rows or columns of their own; of exact repeats the newest is shown and the rest counted.
    Speedups use 1-device points from pool (the whole store, say), else from points."""
    grouped: dict[tuple[str, str, str, str, int | None], list[StoredPoint]] = defaultdict(list)
    for p in sorted(points, key=lambda p: p.id):
        grouped[_section_key(p)].append(p)
    sections = []
    for key in sorted(grouped, key=lambda k: (_order(k[0]), k[0], k[1], k[2] != "synthetic", k[3], k[4] or 0)):
        sec = Section(*key, common=_common_params(grouped[key]))
        seen: dict[tuple[RowKey, Column], int] = defaultdict(int)
        fields = {p.id: _row_fields(p) for p in grouped[key]}
        varying = variant_names(list(fields.values()))
        columns = _column_variants(grouped[key])
        for p in grouped[key]:
            s, f = p.result.spec, fields[p.id]
            row = RowKey(
                s.batch_size,
                s.nodes,
                s.devices_per_node,
                s.strategy,
                tuple(f[k][1] if k in f else f"{k}=unknown" for k in varying),
                tuple(f[k][0] if k in f else (2, 0.0, "") for k in varying),
            )
            col = Column(s.framework, s.compile, s.channels_last, columns[p.id])
            seen[(row, col)] += 1
            sec.cells[(row, col)] = Cell(p, hidden=seen[(row, col)] - 1)
            sec.groups.setdefault(row, set()).update(batch_groups(p))
        sec.rows = sorted(
            {r for r, _ in sec.cells}, key=lambda r: (r.batch_size, r.order, r.devices, r.nodes, r.strategy)
        )
        sec.columns = sorted(
            {c for _, c in sec.cells}, key=lambda c: (c.framework, c.compile, c.channels_last, c.variant)
        )
        _add_scaling(sec, points if pool is None else pool)
        _add_footnotes(sec)
        _add_remarks(sec)
        sections.append(sec)
    return sections
