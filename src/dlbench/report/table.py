"""Rich tables of points and runs for the terminal."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from rich.table import Table

from dlbench.cases.gpt import lm_rates
from dlbench.report.caveats import caveat_notes
from dlbench.report.telemetry import contended, fmt_energy, samples_per_kwh
from dlbench.results.mfu import efficiency, fmt_mfu, fmt_tflops, peak_notes
from dlbench.results.scaling import Scaled
from dlbench.results.schema import PointResult
from dlbench.results.store import RunRecord


def fmt_bytes(n: int | None) -> str:
    """Bytes as MiB or GiB, '-' when unknown."""
    if n is None:
        return "-"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def fmt_throughput(r: PointResult) -> str:
    """'123.4 ± 2.1' (half-width of the confidence interval), '-' for a failed point."""
    m = r.metrics
    if m is None:
        return "-"
    half = (m.ci_high - m.ci_low) / 2
    return f"{m.throughput:,.1f} ± {half:,.1f}"


def fmt_lm_rates(r: PointResult) -> str:
    """A causal-LM point's tokens/s and achieved TFLOP/s by the Megatron-LM formula, each on a line of its own."""
    rates = lm_rates(r.spec.model, r.spec.params, r.spec.input_size, r.metrics.throughput) if r.metrics else None
    return "" if rates is None else f"\n{rates[0]:,.0f} tokens/s\n{rates[1]:,.3g} TFLOP/s Megatron"


def fmt_count(n: int) -> str:
    """3200000 -> '3.2M', 1500 -> '1.5K': a K/M/G suffix where it is exact to three decimals."""
    for scale, suffix in ((10**9, "G"), (10**6, "M"), (10**3, "K")):
        if n >= scale and n % (scale // 1000) == 0:
            return f"{n / scale:g}{suffix}"
    return str(n)


def fmt_case_params(params: Sequence[tuple[str, int]]) -> str:
    """A point's case parameters after its model name: ' vocab=3.2M sparse=0' ('' when it sets none)."""
    return "".join(f" {k}={fmt_count(v)}" for k, v in params)


def status_text(r: PointResult) -> str:
    """The status, with 'noisy' when the repeats' CV passed the threshold and 'input-bound' (see stats)."""
    if r.status == "ok":
        m = r.metrics
        flags = [name for name, on in (("noisy", m and m.noisy), ("input-bound", m and m.input_bound),
                                       ("contended", contended(r))) if on]
        return f"ok ({', '.join(flags)})" if flags else "ok"
    return r.status


def footnotes(results: list[PointResult]) -> list[str]:
    """One line per failed point, as the seeds footnoted their OOMs: '[n] model bs: status: reason'."""
    notes = []
    for r in results:
        if r.status != "ok":
            first = (r.error or "").splitlines()[0] if r.error else ""
            notes.append(f"{r.spec.framework} {r.spec.model} bs{r.spec.batch_size} {r.spec.precision}: "
                         f"{r.status}{': ' + first[:160] if first else ''}")
    return notes


def points_table(results: list[PointResult], title: str = "",
                 scaled: Sequence[Scaled | None] | None = None) -> Table:
    """One row per point: framework, model, batch, precision, throughput ± CI, achieved TFLOP/s and MFU, step
    time, memory, status; given `scaled` (one entry per result), also speedup and efficiency against the 1-device
    point. The caption names each device peak the MFU divides by, and the caveats the points carry."""
    effs = [efficiency(r) for r in results]
    notes = footnotes(results) + peak_notes(effs) + caveat_notes(results)
    t = Table(title=title or None, caption="\n".join(notes) or None, caption_justify="left")
    scaling_cols = (("speedup", "right"), ("efficiency", "right")) if scaled is not None else ()
    energy = any(samples_per_kwh(r) is not None for r in results)  # a column only where some point has it
    for col, justify in (("framework", "left"), ("model", "left"), ("batch", "right"), ("precision", "left"),
                         ("scale", "left"), ("samples/s ± 95% CI", "right"), ("TFLOP/s", "right"),
                         ("MFU", "right"), *scaling_cols, ("CV", "right"),
                         ("median step", "right"), ("peak memory", "right"),
                         *((("samples/kWh", "right"),) if energy else ()), ("status", "left")):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    for i, r in enumerate(results):
        s, m = r.spec, r.metrics
        prec = s.precision + (" +compile" if s.compile else "") + (" +cl" if s.channels_last else "")
        sc = scaled[i] if scaled is not None else None
        scaling = (fmt_speedup(r, sc), f"{sc.scaling.efficiency:.0%}" if sc else "-") if scaled is not None else ()
        t.add_row(s.framework, s.model + fmt_case_params(s.case_params),
                  str(s.batch_size), prec, s.scale, fmt_throughput(r) + fmt_lm_rates(r),
                  fmt_tflops(effs[i]), fmt_mfu(effs[i]), *scaling,
                  f"{m.cv:.1%}" if m else "-", f"{m.median_step_s * 1000:,.1f} ms" if m else "-",
                  fmt_bytes(m.peak_memory_bytes) if m else "-", *((fmt_energy(r),) if energy else ()),
                  status_text(r))
    return t


def fmt_speedup(r: PointResult, sc: Scaled | None) -> str:
    """'1.62x (vs #12)' against the named 1-device point; '1x' for an ok 1-device point; '-' when unknown."""
    if sc is not None:
        return f"{sc.scaling.speedup:.2f}x (vs #{sc.baseline.id})"
    return "1x" if r.status == "ok" and r.spec.world_size == 1 else "-"


def scaling_notes(results: list[PointResult], scaled: Sequence[Scaled | None]) -> list[str]:
    """One line per multi-device point naming the 1-device point its speedup divides by (or saying none)."""
    out = []
    for r, sc in zip(results, scaled):
        label = f"{r.spec.framework} {r.spec.model} bs{r.spec.batch_size} {r.spec.scale}"
        base = sc.baseline.result.metrics if sc is not None else None
        if sc is not None and base is not None:
            out.append(f"{label}: speedup {sc.scaling.speedup:.2f}, efficiency {sc.scaling.efficiency:.0%} "
                       f"over {r.spec.world_size} devices, against 1-device point #{sc.baseline.id} "
                       f"(run {sc.baseline.run_id}, {base.throughput:,.1f} samples/s)")
        elif r.status == "ok" and r.spec.world_size > 1:
            out.append(f"{label}: no ok 1-device point of the same configuration and environment, so no speedup")
    return out


def runs_table(runs: list[RunRecord]) -> Table:
    """Recent runs: id, when, kind, points, status, command."""
    t = Table(title="runs")
    for col in ("run", "created", "kind", "points", "status", "command"):
        t.add_column(col)
    for r in runs:
        when = datetime.datetime.fromtimestamp(r.created).strftime("%Y-%m-%d %H:%M")
        t.add_row(r.id, when, r.kind, str(r.points), r.status, r.command)
    return t
