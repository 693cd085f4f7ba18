"""Seed 004's view of a gradient-strategy study: for each model, throughput against device count with a line per
strategy, speedup and efficiency beside it; then the verdict table: the fastest strategy per model and device
count, its margin over the runner-up, and whether that margin is beyond the noise (95% CIs that do not overlap).

A study is a section's points (one model, precision, data, device) of one framework and batch per device where
at least two strategies were measured at one device count; the 1-device point without a strategy starts every
line. Plain points in, tables and matplotlib figures out; no framework is imported.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from dlbench.report.chart_base import FAIL_COLOR, PALETTE, Chart, ChartSet, styled
from dlbench.report.convergence import rows_note, unconverged_of, with_mark
from dlbench.report.digits import fmt_rate
from dlbench.report.groups import Cell, Section, framework_title, model_title
from dlbench.spec import STRATEGIES

MIN_REPEATS = 3  # fewer repeats than this give no confidence interval worth comparing
NOISE_RULE = (
    "beyond the noise: the fastest strategy's 95% CI lies wholly above the runner-up's; with fewer than "
    f"{MIN_REPEATS} repeats a CI means little, and the table says so"
)


@dataclass(frozen=True)
class StrategyCell:
    """One strategy at one device count: its throughput and CI, or the status of a point that measured none."""

    strategy: str
    devices: int
    scale: str
    status: str
    throughput: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    repeats: int = 0
    speedup: float | None = None
    efficiency: float | None = None
    mechanism: str = ""
    check: str = ""
    unconverged: str = ""  # the verdict of a --converge run that did not converge: marked, and never the fastest

    @property
    def ok(self) -> bool:
        """Whether the point measured a throughput."""
        return self.throughput is not None

    @property
    def summary(self) -> str:
        """'12.3 ± 0.4 samples/s · 1.85× · 92%', or the status of a point without a throughput."""
        if self.throughput is None:
            return self.status
        wide = self.ci_high is not None and self.ci_low is not None and self.ci_high > self.ci_low
        spread = (self.ci_high - self.ci_low) / 2 if wide else None  # type: ignore[operator]
        scaled = (
            ""
            if self.devices == 1 or self.speedup is None or self.efficiency is None
            else f" · {self.speedup:.2f}× · {self.efficiency:.0%}"
        )
        return with_mark(f"{fmt_rate(self.throughput, spread)}{scaled}", self.unconverged)


@dataclass
class Study:
    """One framework's strategies for one model, batch per device and device kind."""

    section: Section
    framework: str
    batch_size: int
    baseline: StrategyCell | None = None
    cells: dict[tuple[str, int], StrategyCell] = field(default_factory=dict)

    @property
    def strategies(self) -> list[str]:
        """The strategies measured, in order of first appearance."""
        return list(dict.fromkeys(s for s, _ in self.cells))

    @property
    def devices(self) -> list[int]:
        """Every device count with a point, the baseline's included."""
        counts = {d for _, d in self.cells} | ({1} if self.baseline else set())
        return sorted(counts)

    @property
    def title(self) -> str:
        """'ResNet-50 v1.5 · TensorFlow/Keras · batch 2 per device · CPU'."""
        size = f" · input {self.section.input_size}" if self.section.input_size else ""
        return (
            f"{model_title(self.section.model)} · {framework_title(self.framework)} · batch {self.batch_size} "
            f"per device · {self.section.precision} · {self.section.device.upper()}{size}"
        )

    @property
    def slug(self) -> str:
        """An id for anchors and chart files."""
        return f"strategies-{self.section.slug}-{self.framework}-bs{self.batch_size}"

    def at(self, strategy: str, devices: int) -> StrategyCell | None:
        """The strategy's cell at a device count; at 1 device, the shared baseline."""
        return self.baseline if devices == 1 else self.cells.get((strategy, devices))


@dataclass(frozen=True)
class Verdict:
    """The fastest strategy of a study at one device count, against the runner-up."""

    study: str
    model: str
    framework: str
    devices: int
    fastest: str
    throughput: float
    runner_up: str
    runner_up_throughput: float | None
    margin: float | None  # (fastest - runner-up) / runner-up
    noise: str  # "yes", "no: the 95% CIs overlap", "not enough repeats (n=2)", "no runner-up"
    setting: str = ""  # what tells this study from another of the same model ("bs 2, input 64, CPU"), if any

    @property
    def label(self) -> str:
        """The model's title, with the batch and input when the report holds several studies of it."""
        return model_title(self.model) + (f" ({self.setting})" if self.setting else "")

    @property
    def throughputs(self) -> str:
        """'12.3 vs 11.0 samples/s'."""
        runner = "-" if self.runner_up_throughput is None else fmt_rate(self.runner_up_throughput)
        return f"{fmt_rate(self.throughput)} vs {runner}"

    @property
    def margin_text(self) -> str:
        """'+12.3%', or '-' without a runner-up."""
        return "-" if self.margin is None else f"+{self.margin:.1%}"


@dataclass
class StrategyReport:
    """Every study of the report, its verdicts and charts."""

    studies: list[Study] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    charts: ChartSet = field(default_factory=ChartSet)
    noise_rule: str = NOISE_RULE

    @property
    def unconverged_note(self) -> str:
        """The mark's note, and that a marked strategy is left out of the verdicts; '' when none is marked."""
        cells = [c for s in self.studies for c in (*s.cells.values(), *([s.baseline] if s.baseline else []))]
        note = rows_note(cells)
        return f"{note} A marked strategy is never the fastest or the runner-up above." if note else ""


def _cell(strategy: str, devices: int, cell: Cell) -> StrategyCell:
    r = cell.point.result
    m = r.metrics
    facts = r.extra
    mechanism = str(facts.get("communication") or facts.get("comm_hook") or facts.get("kvstore") or "")
    if r.status != "ok":  # why it measured nothing, in its own first line
        mechanism = f"{r.status}: {(r.error or '').strip().splitlines()[0] if r.error else 'no reason recorded'}"[:200]
    base = StrategyCell(
        strategy, devices, r.spec.scale, r.status, mechanism=mechanism, check=str(facts.get("replica_check", ""))
    )
    if not cell.ok or m is None:
        return base
    sc = cell.scaling
    return StrategyCell(
        strategy,
        devices,
        r.spec.scale,
        r.status,
        m.throughput,
        m.ci_low,
        m.ci_high,
        len(m.repeat_throughputs),
        1.0 if devices == 1 else sc.speedup if sc else None,
        1.0 if devices == 1 else sc.efficiency if sc else None,
        mechanism,
        base.check,
        unconverged_of(r),
    )


def studies(sections: list[Section]) -> list[Study]:
    """The strategy studies among the report's sections: a framework and batch with two strategies or more
    measured at one device count (the one-device point without a strategy is each line's start)."""
    out = []
    for sec in sections:
        found: dict[tuple[str, int], Study] = {}
        for (row, col), cell in sec.cells.items():
            if col.compile or col.channels_last:
                continue
            study = found.setdefault((col.framework, row.batch_size), Study(sec, col.framework, row.batch_size))
            if row.devices == 1 and row.strategy == "none":
                study.baseline = _cell("none", 1, cell)
            elif row.devices > 1:
                study.cells[(row.strategy, row.devices)] = _cell(row.strategy, row.devices, cell)
        for study in found.values():
            per_count: dict[int, int] = {}
            for _, d in study.cells:
                per_count[d] = per_count.get(d, 0) + 1
            if any(n >= 2 for n in per_count.values()):
                out.append(study)
    return out


def _noise(best: StrategyCell, runner: StrategyCell) -> str:
    n = min(best.repeats, runner.repeats)
    if n < MIN_REPEATS:
        return f"not enough repeats (n={n})"
    assert best.ci_low is not None and runner.ci_high is not None
    return "yes" if best.ci_low > runner.ci_high else "no: the 95% CIs overlap"


def _setting(study: Study, alone: bool) -> str:
    """What sets a study apart from the model's others ('' where it is the model's only one)."""
    sec = study.section
    if alone:
        return ""
    return f"{study.framework}, bs {study.batch_size}, {sec.precision}, {sec.device}" + (
        f", input {sec.input_size}" if sec.input_size else ""
    )


def _verdict(study: Study, devices: int, setting: str) -> Verdict | None:
    """The fastest strategy at one device count, against the runner-up (None: no strategy trained there)."""
    ranked = sorted(  # a strategy whose steps did not train as the reference does is no contender
        (c for (_, d), c in study.cells.items() if d == devices and c.ok and not c.unconverged),
        key=lambda c: c.throughput or 0.0,
        reverse=True,
    )
    if not ranked:
        return None
    best = ranked[0]
    assert best.throughput is not None
    head = (study.title, study.section.model, study.framework, devices, best.strategy, best.throughput)
    if len(ranked) == 1:
        return Verdict(*head, "-", None, None, "no runner-up", setting)
    runner = ranked[1]
    assert runner.throughput is not None
    margin = best.throughput / runner.throughput - 1.0
    return Verdict(*head, runner.strategy, runner.throughput, margin, _noise(best, runner), setting)


def verdicts(found: list[Study]) -> list[Verdict]:
    """The fastest strategy per study and device count (several devices), its margin over the runner-up and
    whether the margin is beyond the noise."""
    per_model = Counter(study.section.model for study in found)
    out: list[Verdict] = []
    for study in found:
        setting = _setting(study, per_model[study.section.model] == 1)
        found_here = (_verdict(study, devices, setting) for devices in study.devices if devices != 1)
        out.extend(v for v in found_here if v is not None)
    return out


def strategy_colours(found: list[Study]) -> dict[str, str]:
    """One colour per strategy across the report, in spec.STRATEGIES order (the same strategy, the same colour)."""
    present = {s for study in found for s in study.strategies}
    return {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(s for s in STRATEGIES if s in present)}


def _panel(ax: Axes, study: Study, field_name: str, colours: dict[str, str]) -> list[str]:
    """One line per strategy against the device count (each from the shared 1-device point); returns the
    failures it marked."""
    failed = []
    for strategy in study.strategies:
        colour = colours.get(strategy, PALETTE[0])
        xs, ys, lo, hi = [], [], [], []
        for d in study.devices:
            c = study.at(strategy, d)
            if c is None:
                continue
            value = getattr(c, field_name)
            if value is None:
                if not c.ok:
                    failed.append(f"{strategy} at {c.scale}: {c.status}")
                    ax.plot(d, 0, marker="x", ms=7, mew=2, color=FAIL_COLOR, clip_on=False)
                continue
            xs.append(d)
            ys.append(value * (100 if field_name == "efficiency" else 1))
            if field_name == "throughput":
                lo.append(max(value - (c.ci_low or value), 0.0))
                hi.append(max((c.ci_high or value) - value, 0.0))
        if xs:
            ax.errorbar(
                xs,
                ys,
                yerr=[lo, hi] if field_name == "throughput" else None,
                color=colour,
                marker="o",
                ms=4.5,
                lw=1.8,
                capsize=3,
                label=strategy,
            )
    ax.set_xscale("log", base=2)
    ax.set_xticks(study.devices, [str(d) for d in study.devices])
    ax.minorticks_off()
    ax.set_xlim(study.devices[0] / 1.3, study.devices[-1] * 1.3)
    ax.set_xlabel("devices")
    ax.set_ylim(bottom=0)
    return failed


@styled
def study_chart(study: Study, colours: dict[str, str]) -> Chart:
    """Throughput (with 95% CI whiskers) and scaling efficiency against the device count, a line per strategy."""
    fig = Figure(figsize=(9.6, 3.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    failed = _panel(left, study, "throughput", colours)
    left.set_ylabel("samples/s (higher is better)")
    left.set_title("Throughput")
    _panel(right, study, "efficiency", colours)
    right.axhline(100, ls="--", color="#8a929b", lw=1)
    right.set_ylabel("efficiency, % of linear")
    right.set_title("Scaling efficiency (speedup / devices)")
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(6, max(1, len(labels))))
    caption = (
        "Seed 004's view: each strategy's throughput as devices are added, from the same 1-device point "
        "(no strategy); efficiency = speedup / devices. Whiskers: 95% CI over repeats."
    )
    if failed:
        caption += " Red x: no throughput (" + "; ".join(failed) + ")."
    return Chart(study.slug, study.title, caption, fig)


def strategy_report(sections: list[Section]) -> StrategyReport:
    """The studies among the sections, their verdicts and one chart per study."""
    found = studies(sections)
    colours = strategy_colours(found)
    return StrategyReport(found, verdicts(found), ChartSet([study_chart(s, colours) for s in found]))


__all__ = [
    "MIN_REPEATS",
    "NOISE_RULE",
    "StrategyCell",
    "StrategyReport",
    "Study",
    "Verdict",
    "strategy_colours",
    "strategy_report",
    "studies",
    "verdicts",
]
