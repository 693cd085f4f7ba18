"""What sets a table's rows apart: every configuration field of a point as a label ('input_size=64', 'threads=1',
'steps=20', 'vocab=3.2M'), and, for the rows of one table, the labels of the fields that differ between them and
that no column of the table shows. The terminal tables (run, results, sweep) and the report's sections use it, and
compare's and history's configuration names (analysis/compare.py, history.py), so that two rows never read alike
while their points differ."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from dlbench.analysis.convergence import REFERENCE_KEY
from dlbench.cases import UnknownCase, get_case
from dlbench.machine.telemetry import telemetry_of
from dlbench.records import PointResult

Field = tuple[tuple[int, float, str], str]  # (sort key, label)

# Fields that are not configuration: how long a point may take, the spec's schema version.
_NOT_CONFIG = frozenset({"timeout_s", "version", "protocol", "case_params", "layout"})
PROTOCOL_FIELDS = ("preset", "warmup", "steps", "repeats", "statistic", "windows", "min_time_s")
# The spec fields each column of the points table shows (report/table.py COLUMNS); the case's parameters are the
# model column's too.
COLUMN_FIELDS: dict[str, frozenset[str]] = {
    "framework": frozenset({"framework", "release"}),  # framework==release
    "model": frozenset({"model"}),
    "batch": frozenset({"batch_size"}),
    "precision": frozenset({"precision", "compile", "channels_last"}),
    "data": frozenset({"data"}),
    "scale": frozenset(
        {"nodes", "devices_per_node", "tensor_parallel", "pipeline_parallel", "micro_batches", "recompute", "fsdp"}
    ),  # the layout's options fmt_scale names; the others (schedule, routing ...) are not shown by a column
    "strategy": frozenset({"strategy"}),
    "threads": frozenset({"threads"}),
}


def memory_text(n: int) -> str:
    """Bytes as MiB or GiB."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def fmt_count(n: int) -> str:
    """3200000 -> '3.2M', 1500 -> '1.5K': a K/M/G suffix where it is exact to three decimals."""
    for scale, suffix in ((10**9, "G"), (10**6, "M"), (10**3, "K")):
        if n >= scale and n % (scale // 1000) == 0:
            return f"{n / scale:g}{suffix}"
    return str(n)


def field_label(name: str, value: object) -> Field:
    """A configuration field's value as a sort key and a label: 'vocab=3.2M', 'memory_limit=1.5 GiB'."""
    if isinstance(value, bool) or value is None or not isinstance(value, (int, float)):
        unset = "none" if name.endswith("_bytes") else "default"  # no memory limit; the case's or framework's own
        text = {None: unset, True: "yes", False: "no"}.get(value, str(value))  # type: ignore[call-overload]
        return (1, 0.0, text), f"{name}={text}"
    shown = (
        memory_text(int(value))
        if name.endswith("_bytes")
        else fmt_count(int(value))
        if float(value).is_integer()
        else f"{value:g}"
    )
    return (0, float(value), ""), f"{name.removesuffix('_bytes')}={shown}"


def case_param_names(r: PointResult) -> frozenset[str]:
    """The names of the parameters its case takes (shown after the model name)."""
    try:
        return frozenset(c.name for c in get_case(r.spec.model).params) | frozenset(r.spec.params)
    except UnknownCase:
        return frozenset(r.spec.params)


def config_fields(r: PointResult) -> dict[str, Field]:
    """Every configuration field of a point by name: the spec's (the parallel layout, the launcher as 'here' or
    'slurm' ...), its protocol's (warmup, steps, repeats, statistic, preset ...), its case parameters (at the case's
    defaults where unset), and the threads it ran with (the count used, from its identity; 'auto(1)' where
    --threads auto chose it, so that it never reads like an explicit --threads 1)."""
    s = r.spec
    d = s.to_dict()
    layout = d.get("layout")
    flat = {**d, **(dict(layout) if isinstance(layout, dict) else {})}  # each layout option a field of its own
    out = {k: field_label(k, v) for k, v in flat.items() if k not in _NOT_CONFIG}
    out.update({k: field_label(k, getattr(s.protocol, k)) for k in PROTOCOL_FIELDS})
    try:
        params = {c.name: c.default for c in get_case(s.model).params}
    except UnknownCase:
        params = {}
    out.update({k: field_label(k, v) for k, v in {**params, **s.params}.items()})
    # local, torchrun, mpirun and hosts all run here (as analysis/scaling.py matches baselines); Slurm elsewhere
    out["launcher"] = field_label("launcher", "slurm" if s.launcher == "slurm" else "here")
    threads = r.env.identity.get("threads") or (str(s.threads) if s.threads else "default")
    out["threads"] = field_label("threads", int(threads) if threads.isdigit() else threads)
    chosen = telemetry_of(r)
    if s.threads is None and chosen is not None and chosen.threads is not None and chosen.threads.requested == "auto":
        out["threads"] = ((0, float(chosen.threads.used), "auto"), f"threads=auto({chosen.threads.used})")
    return out


def threads_text(r: PointResult) -> str:
    """The threads a point ran with: '2', 'auto(1)' where --threads auto chose 1."""
    return config_fields(r)["threads"][1].removeprefix("threads=")


def varying(fields: Sequence[dict[str, Field]]) -> list[str]:
    """The names whose labels differ between the given points (a name one point lacks counts as 'unknown')."""
    names = sorted({k for f in fields for k in f})
    return [k for k in names if len({f[k][1] if k in f else "?" for f in fields}) > 1]


def shown_by(columns: Collection[str], results: Sequence[PointResult]) -> frozenset[str]:
    """The configuration fields the named points-table columns show (the model column: its case's parameters)."""
    shown = set().union(*(COLUMN_FIELDS.get(c, frozenset()) for c in columns))
    if "model" in columns:
        shown |= set().union(*(case_param_names(r) for r in results))
    return frozenset(shown)


def variant_labels(results: Sequence[PointResult], shown: Collection[str]) -> list[str]:
    """Per result, what sets it apart from the others that no shown field says: 'input_size=64 threads=1' ('' for
    every result when nothing else differs)."""
    fields = [config_fields(r) for r in results]
    names = [k for k in varying(fields) if k not in shown]
    return [" ".join(f[k][1] if k in f else f"{k}=unknown" for k in names) for f in fields]


def row_names(results: Sequence[PointResult], shown: Collection[str] = ()) -> list[str]:
    """Per result, its case cell in a report section whose other columns show the framework, the precision, the
    layout and the named fields: the model with its parameters, what else sets it apart from the other rows
    ('seed=1'), and '(reference)' on a convergence point's reference run, which otherwise reads as its point."""
    labels = variant_labels(results, shown_by(("framework", "model", "precision", "scale"), results) | set(shown))
    out = []
    for r, label in zip(results, labels, strict=True):
        params = ",".join(f"{k}={v}" for k, v in sorted(r.spec.params.items()))
        words = [r.spec.model, params, label, "(reference)" if r.extra.get(REFERENCE_KEY) else ""]
        out.append(" ".join(w for w in words if w))
    return out


__all__ = [
    "COLUMN_FIELDS",
    "PROTOCOL_FIELDS",
    "Field",
    "case_param_names",
    "config_fields",
    "field_label",
    "fmt_count",
    "memory_text",
    "row_names",
    "shown_by",
    "threads_text",
    "variant_labels",
    "varying",
]
