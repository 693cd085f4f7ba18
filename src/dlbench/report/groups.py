"""Stored points arranged the seeds' way: one section per model, precision and data, rows of configurations
(batch per device, scale), columns of frameworks; failures as numbered footnotes, caveats of ok points as
lettered remarks; speedup against 1 device.

Plain data only: charts.py, html.py and markdown.py render it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from dlbench.backends import all_backends
from dlbench.cases import CASES, UnknownCase, get_case
from dlbench.report.caveats import caveats
from dlbench.results.scaling import Scaling, scaled
from dlbench.results.store import StoredPoint

STATUS_TEXT: dict[str, str] = {"oom": "OOM", "unsupported": "unsupported", "timeout": "timeout",
                               "crashed": "crashed", "error": "error", "failed_check": "failed check"}


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

    @property
    def title(self) -> str:
        """'PyTorch +compile'."""
        return framework_title(self.framework) + (" +compile" if self.compile else "") + \
            (" +channels-last" if self.channels_last else "")


@dataclass(frozen=True)
class RowKey:
    """A configuration row: batch per device and scale (and the strategy where it is not 'none')."""

    batch_size: int
    nodes: int
    devices_per_node: int
    strategy: str = "none"

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
        """'bs 64 · 1n4c (ddp)'."""
        return f"bs {self.batch_size} · {self.scale}" + (f" ({self.strategy})" if self.strategy != "none" else "")


@dataclass(frozen=True)
class Cell:
    """The point shown in one table cell, with its speedup and, for a failure, its footnote number."""

    point: StoredPoint
    scaling: Scaling | None = None
    baseline_id: int | None = None
    footnote: int | None = None
    hidden: int = 0  # earlier points of the same configuration (another run), not shown
    remark: str | None = None  # the mark of an ok point's caveat note (report/caveats.py), e.g. 'a'

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
    remarks: list[Remark] = field(default_factory=list)

    @property
    def slug(self) -> str:
        """An id for anchors and file names."""
        size = f"-{self.input_size}px" if self.input_size else ""
        return f"{self.model}-{self.precision}-{self.data}-{self.device}{size}"

    @property
    def title(self) -> str:
        """'ResNet-50 v1.5 · fp32 · synthetic data · CPU'."""
        size = f" · input {self.input_size}" if self.input_size else ""
        return f"{model_title(self.model)} · {self.precision} · {self.data} data · {self.device.upper()}{size}"

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
    return (f"{framework_title(s.framework)}, batch {s.batch_size}, {s.scale}: "
            f"{STATUS_TEXT.get(r.status, r.status)}: {why[:200]}")


def _add_scaling(sec: Section, pool: Sequence[StoredPoint]) -> None:
    """Speedup and efficiency of each multi-device cell, against the 1-device point results/scaling.py picks."""
    for (row, col), cell in list(sec.cells.items()):
        if not cell.ok or row.devices == 1:
            continue
        sc = scaled(pool, cell.point.result)
        if sc is not None:
            sec.cells[(row, col)] = Cell(cell.point, sc.scaling, sc.baseline.id, None, cell.hidden)


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
    """Points grouped into sections, rows, columns and cells; the newest point of a configuration wins.
    Speedups use 1-device points from pool (the whole store, say), else from points."""
    grouped: dict[tuple[str, str, str, str, int | None], list[StoredPoint]] = defaultdict(list)
    for p in sorted(points, key=lambda p: p.id):
        grouped[_section_key(p)].append(p)
    sections = []
    for key in sorted(grouped, key=lambda k: (_order(k[0]), k[0], k[1], k[2] != "synthetic", k[3], k[4] or 0)):
        sec = Section(*key)
        seen: dict[tuple[RowKey, Column], int] = defaultdict(int)
        for p in grouped[key]:
            s = p.result.spec
            row = RowKey(s.batch_size, s.nodes, s.devices_per_node, s.strategy)
            col = Column(s.framework, s.compile, s.channels_last)
            seen[(row, col)] += 1
            sec.cells[(row, col)] = Cell(p, hidden=seen[(row, col)] - 1)
            sec.groups.setdefault(row, set()).update(batch_groups(p))
        sec.rows = sorted({r for r, _ in sec.cells}, key=lambda r: (r.batch_size, r.devices, r.nodes, r.strategy))
        sec.columns = sorted({c for _, c in sec.cells}, key=lambda c: (c.framework, c.compile, c.channels_last))
        _add_scaling(sec, points if pool is None else pool)
        _add_footnotes(sec)
        _add_remarks(sec)
        sections.append(sec)
    return sections
