"""Rich tables of points and runs for the terminal."""

from __future__ import annotations

import dataclasses
import datetime
import functools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from dlbench.analysis.convergence import verdict_of
from dlbench.analysis.mfu import Efficiency, efficiency, fmt_mfu, fmt_tflops, peak_notes
from dlbench.analysis.scaling import Scaled, outgrows_one_device
from dlbench.analysis.variants import fmt_count, memory_text, shown_by, threads_text, variant_labels
from dlbench.cases.gpt import flop_label, hardware_ratio, lm_rates
from dlbench.printable import printable
from dlbench.records import Metrics, PointResult
from dlbench.report.caveats import caveat_notes
from dlbench.report.digits import fmt_rate
from dlbench.report.fit import Col, Fitted, fit
from dlbench.report.telemetry import contended, fmt_energy, samples_per_kwh
from dlbench.spec import PointSpec, SpecError
from dlbench.store.store import RunRecord


def fmt_bytes(n: int | None) -> str:
    """Bytes as MiB or GiB, '-' when unknown."""
    return "-" if n is None else memory_text(n)


def fmt_throughput(r: PointResult) -> str:
    """'123.4 ± 2.1' (half-width of the confidence interval, in the value's decimals: report/digits.py); '123.4 n=1'
    with fewer than 3 repeats (no interval can be had from them); '-' for a failed point."""
    m = r.metrics
    if m is None:
        return "-"
    if m.ci_low is None or m.ci_high is None:
        return f"{fmt_rate(m.throughput)} n={m.repeats}"
    return fmt_rate(m.throughput, (m.ci_high - m.ci_low) / 2)


def fmt_cv(m: Metrics | None) -> str:
    """'3.2%', 'n=1' where too few repeats give none, '-' for a failed point."""
    if m is None:
        return "-"
    return f"n={m.repeats}" if m.cv is None else f"{m.cv:.1%}"


def fmt_lm_rates(r: PointResult) -> str:
    """A causal-LM point's tokens/s and achieved TFLOP/s by its family's formula (Megatron-LM's for GPT), each on a
    line of its own."""
    rates = lm_rates(r.spec.model, r.spec.params, r.spec.input_size, r.metrics.throughput) if r.metrics else None
    if rates is None:
        return ""
    hardware = ""
    if r.spec.layout.recompute and rates[1] > 0:  # the devices also ran a second forward: DLPerf's and Megatron's count
        hardware = f"\n{rates[1] * hardware_ratio(r.spec.model, r.spec.params, r.spec.input_size):,.3g} hardware"
    return (
        f"\n{fmt_rate(rates[0])} tokens/s\n{rates[1]:,.3g} TFLOP/s {flop_label(r.spec.model, r.spec.params)}{hardware}"
    )


def fmt_scale(s: PointSpec) -> str:
    """'1n4c', or '1n4c TP2 PP2 M4' where the point splits its model (and 'recompute' where it recomputes)."""
    lay = s.layout
    return s.scale + (f" {lay.label}" if lay.splits_model or lay.recompute else "") + (" FSDP" if s.layout.fsdp else "")


def fmt_case_params(params: Sequence[tuple[str, int]]) -> str:
    """A point's case parameters after its model name: ' vocab=3.2M sparse=0' ('' when it sets none)."""
    return "".join(f" {k}={fmt_count(v)}" for k, v in params)


def status_text(r: PointResult) -> str:
    """The status, with 'noisy' when the repeats' CV passed the threshold and 'input-bound' (see stats)."""
    if r.status == "ok":
        m = r.metrics
        flags = [
            name
            for name, on in (
                ("noisy", m and m.noisy),
                ("input-bound", m and m.input_bound),
                ("contended", contended(r)),
            )
            if on
        ]
        return f"ok ({', '.join(flags)})" if flags else "ok"
    return r.status


def footnotes(results: list[PointResult]) -> list[str]:
    """One line per failed point, as the seeds footnoted their OOMs: '[n] model bs: status: reason'."""
    notes = []
    for r in results:
        if r.status != "ok":
            first = (r.error or "").splitlines()[0] if r.error else ""
            notes.append(
                f"{r.spec.framework_label} {r.spec.model} bs{r.spec.batch_size} {r.spec.precision}: "
                f"{r.status}{': ' + first[:160] if first else ''}"
            )
    return notes


@dataclass(frozen=True)
class PointCell:
    """What a cell of the points table is made from: the point, its scaling and (on demand) its efficiency."""

    result: PointResult
    scaled: Scaled | None
    efficiency: Callable[[], Efficiency]
    variant: str = ""  # what sets the row apart that no other column shows: 'input_size=64 threads=1'


@dataclass(frozen=True)
class TableColumn:
    """A column of the points table: its header, alignment and cell; `whole` columns (the ones that tell rows
    apart, and the numbers) are never cut (report/fit.py); `number` says which of them hold a measurement."""

    header: str
    justify: Literal["left", "right"]
    cell: Callable[[PointCell], str]
    whole: bool = False
    number: bool = False

    def col(self, optional: bool = False, shared: bool = False) -> Col:
        """This column under the width rule."""
        role = "number" if self.number else "key" if self.whole else "text"
        return Col(
            self.header,
            role,  # type: ignore[arg-type]
            self.justify,
            optional=optional,
            shared=shared,
            bare=True,
        )


def _precision(s: PointSpec) -> str:
    return s.precision + (" +compile" if s.compile else "") + (" +cl" if s.channels_last else "")


# Every column `run` and `results` can show, by the name --columns takes, in table order.
COLUMNS: dict[str, TableColumn] = {
    "framework": TableColumn("framework", "left", lambda c: c.result.spec.framework_label, whole=True),
    "model": TableColumn(
        "model",
        "left",
        lambda c: (
            c.result.spec.model + fmt_case_params(c.result.spec.case_params) + (f" {c.variant}" * bool(c.variant))
        ),
        whole=True,
    ),
    "batch": TableColumn("batch", "right", lambda c: str(c.result.spec.batch_size), whole=True),
    "precision": TableColumn("precision", "left", lambda c: _precision(c.result.spec), whole=True),
    "data": TableColumn("data", "left", lambda c: c.result.spec.data, whole=True),
    "scale": TableColumn("scale", "left", lambda c: fmt_scale(c.result.spec), whole=True),
    "strategy": TableColumn("strategy", "left", lambda c: c.result.spec.strategy, whole=True),
    "group": TableColumn("group", "left", lambda c: str(c.result.extra.get("batch_group", "-")), whole=True),
    "threads": TableColumn("threads", "right", lambda c: threads_text(c.result), whole=True),
    "throughput": TableColumn(
        "samples/s", "right", lambda c: fmt_throughput(c.result) + fmt_lm_rates(c.result), whole=True, number=True
    ),
    "tflops": TableColumn("TFLOP/s", "right", lambda c: fmt_tflops(c.efficiency()), number=True),
    "mfu": TableColumn("MFU", "right", lambda c: fmt_mfu(c.efficiency()), number=True),
    "speedup": TableColumn("speedup", "right", lambda c: fmt_speedup(c.result, c.scaled), number=True),
    "efficiency": TableColumn("efficiency", "right", lambda c: fmt_efficiency(c.scaled), number=True),
    "cv": TableColumn("CV", "right", lambda c: fmt_cv(c.result.metrics), number=True),
    "step": TableColumn(
        "median step",
        "right",
        lambda c: f"{c.result.metrics.median_step_s * 1000:,.1f} ms" if c.result.metrics else "-",
        number=True,
    ),
    "memory": TableColumn(
        "peak memory",
        "right",
        lambda c: fmt_bytes(c.result.metrics.peak_memory_bytes) if c.result.metrics else "-",
        number=True,
    ),
    "wait": TableColumn(
        "input wait",
        "right",
        lambda c: (
            f"{c.result.metrics.input_wait_share:.0%}" if c.result.metrics and c.result.spec.data == "real" else "-"
        ),
        number=True,
    ),
    "energy": TableColumn("samples/kWh", "right", lambda c: fmt_energy(c.result), number=True),
    "verdict": TableColumn("verdict", "left", lambda c: verdict_of(c.result), whole=True),
    "status": TableColumn("status", "left", lambda c: status_text(c.result)),
}
# The default: what tells points apart, the throughput and the status; at 80 columns nothing of it is cut.
COMPACT: tuple[str, ...] = ("framework", "model", "batch", "precision", "scale", "throughput", "status")
# Default columns left out, last first, where the terminal cannot hold the table (and a sweep's extra ones).
OPTIONAL: tuple[str, ...] = ("speedup", "energy")
# Compact columns that every row of a titled table shares are said once, in the title ('run X · fp32 · 1n1c').
SAID_ONCE: tuple[str, ...] = ("precision", "data", "scale", "strategy")


def pick_columns(text: str | None, wide: bool) -> tuple[str, ...] | None:
    """--columns a,b,c (names from COLUMNS) or --wide (every column) -> the columns to show; None: the compact
    default. An unknown name is a SpecError that lists the known ones."""
    if wide and text is not None:  # one would silently win over the other
        raise SpecError("--wide shows every column: give it or --columns, not both")
    if wide:
        return tuple(COLUMNS)
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in COLUMNS]
    if unknown or not names:
        shown = ", ".join(n[:40] for n in unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
        raise SpecError(f"--columns: unknown column {shown or '(none given)'}; known: {', '.join(COLUMNS)}")
    twice = sorted(n for n, k in Counter(names).items() if k > 1)
    if twice:  # 5,000 names of a few dozen columns is a script gone wrong, not a table
        raise SpecError(f"--columns names {', '.join(twice[:3])} more than once: name each column once")
    return names


def points_table(
    results: list[PointResult],
    title: str = "",
    scaled: Sequence[Scaled | None] | None = None,
    columns: Sequence[str] | None = None,
    extra: Sequence[str] = (),
    width: int | None = None,
    wide: bool = False,
    more: str = "--columns or --wide shows them",
) -> Fitted:
    """One row per point, in the columns asked for (names of COLUMNS); by default COMPACT, with the data source
    where some point read real data, the strategy where some point has one, the speedup against the 1-device
    point where `scaled` (one entry per result) holds a multi-device point, samples/kWh where some point has an
    energy reading, and the `extra` columns the caller adds (a sweep's batch group ...). It is laid out by the width
    rule (report/fit.py) when printed: the default's optional columns are OPTIONAL and `extra`, and SAID_ONCE
    columns shared by every row are said in the title. With TFLOP/s or MFU shown, the notes name each device
    peak the MFU divides by; they also say the caveats the points carry (report/caveats.py). Where the rows differ in a configuration field no shown
    column says (input size, threads, protocol, layout ...: analysis/variants.py), the model cell says it after the
    model's parameters ('resnet50 input_size=64'). `width` is unused
    (the console's width is read when printing); `wide` is --wide; `more` says how to see left-out columns."""
    del width
    effs = {i: functools.cache(lambda r=r: efficiency(r)) for i, r in enumerate(results)}
    cells = [PointCell(r, scaled[i] if scaled is not None else None, effs[i]) for i, r in enumerate(results)]
    optional: set[str] = set()
    said: set[str] = set()
    if columns is None:
        many = scaled is not None and any(r.spec.world_size > 1 for r in results)
        energy = any(samples_per_kwh(r) is not None for r in results)  # a column only where some point has it
        data = any(r.spec.data != "synthetic" for r in results)
        strategy = any(r.spec.strategy != "none" for r in results)
        converged = any(verdict_of(r) != "-" for r in results)  # --converge points (#34)
        columns = (
            *COMPACT[:4],
            *(("data",) if data else ()),
            COMPACT[4],
            *(("strategy",) if strategy else ()),
            *COMPACT[5:-1],
            *(("speedup",) if many else ()),
            *(("energy",) if energy else ()),
            *extra,
            *(("verdict",) if converged else ()),
            COMPACT[-1],
        )
        optional = {*OPTIONAL, *extra, "verdict"}
        said = set(SAID_ONCE) if title else set()
    labels = variant_labels(results, shown_by(columns, results))
    cells = [dataclasses.replace(c, variant=v) for c, v in zip(cells, labels)]
    grid = [[COLUMNS[name].cell(c) for name in columns] for c in cells]
    peaks = peak_notes([effs[i]() for i in effs]) if {"tflops", "mfu"} & set(columns) else []
    notes = footnotes(results) + peaks + caveat_notes(results)
    cols = [COLUMNS[n].col(optional=n in optional, shared=n in said) for n in columns]
    return fit(cols, grid, title=title, notes=notes, wide=wide, more=more)


def fmt_speedup(r: PointResult, sc: Scaled | None) -> str:
    """'1.62x (vs #12)' against the named 1-device point, '(vs #12, 2 marks)' where its evidence is weak (the
    notes under the table say which); '1x' for an ok 1-device point; '-' when unknown."""
    if sc is not None:
        n = len(sc.marks)
        return f"{sc.scaling.speedup:.2f}x (vs #{sc.baseline.id}" + (f", {n} mark{'s' * (n > 1)})" if n else ")")
    return "1x" if r.status == "ok" and r.spec.world_size == 1 else "-"


def fmt_efficiency(sc: Scaled | None) -> str:
    """'81%', '553% (>100%)' where it exceeds 100%, '-' when unknown."""
    if sc is None:
        return "-"
    return f"{sc.scaling.efficiency:.0%}" + (" (>100%)" if sc.scaling.efficiency > 1 else "")


def scaling_notes(results: list[PointResult], scaled: Sequence[Scaled | None]) -> list[str]:
    """One line per multi-device point naming the 1-device point its speedup divides by (its run, protocol and
    CV) and the marks on that evidence (or saying there is no baseline)."""
    out = []
    for r, sc in zip(results, scaled):
        label = f"{r.spec.framework_label} {r.spec.model} bs{r.spec.batch_size} {r.spec.scale}"
        if sc is not None:
            marks = f". Marks: {'; '.join(sc.marks)}" if sc.marks else ""
            out.append(
                f"{label}: speedup {sc.scaling.speedup:.2f}x, efficiency {sc.scaling.efficiency:.0%} "
                f"over {r.spec.world_size} devices, against {sc.evidence}{marks}"
            )
        elif r.status == "ok" and r.spec.world_size > 1 and outgrows_one_device(r):
            out.append(
                f"{label}: a model-parallel maximum outgrows one device by design, so no 1-device baseline "
                "and no speedup"
            )
        elif r.status == "ok" and r.spec.world_size > 1:
            out.append(f"{label}: no ok 1-device point of the same configuration and environment, so no speedup")
    return out


def runs_table(runs: list[RunRecord], wide: bool = False) -> Fitted:
    """Recent runs: id, when, kind, points, status, command (the command wraps; 'created' is optional: the run id
    starts with the date and time)."""
    rows = [
        (
            r.id,
            datetime.datetime.fromtimestamp(r.created).strftime("%Y-%m-%d %H:%M"),
            r.kind,
            str(r.points),
            r.status,
            printable(r.command),
        )
        for r in runs
    ]
    cols = [
        Col("run", "key"),
        Col("created", "key", optional=True),
        Col("kind", "key", shared=True),
        Col("points", "number", "right"),
        Col("status"),
        Col("command"),
    ]
    return fit(cols, rows, title="runs", wide=wide)
