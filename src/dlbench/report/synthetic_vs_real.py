"""The synthetic-vs-real chart: every configuration measured with synthetic tensors and with the real input
pipeline, side by side, with real's share of synthetic and its 95% CI (as `dlbench compare` computes it)."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from dlbench.analysis.compare import ratio_ci, step_matrix
from dlbench.records import PointResult
from dlbench.report.chart_base import Chart, ChartSet, figure, styled
from dlbench.report.groups import Column, Section, model_title


def _data_pairs(sections: list[Section]) -> list[tuple[str, float, float, str]]:
    """(label, synthetic samples/s, real samples/s, the ratio's CI text) of every configuration measured both ways."""
    pairs: list[tuple[str, float, float, str]] = []
    by_key = {(s.model, s.precision, s.device, s.input_size, s.data): s for s in sections}
    for (model, prec, dev, size, data), syn in by_key.items():
        real = by_key.get((model, prec, dev, size, "real"))
        if data != "synthetic" or real is None:
            continue
        for (row, col), cell in syn.cells.items():
            other = real.cell(row, col)
            ms = cell.point.result.metrics if cell.ok else None
            mr = other.point.result.metrics if other and other.ok else None
            if ms and mr:
                pairs.append(
                    (
                        f"{model_title(model)} {prec}\n{col.title} · {row.label}",
                        ms.throughput,
                        mr.throughput,
                        _ratio_text(cell.point.result, other.point.result),  # type: ignore[union-attr]
                    )
                )
    return pairs


def _data_figure(pairs: list[tuple[str, float, float, str]]) -> Figure:
    """Synthetic and real bars side by side, real's share of synthetic and its CI above each real bar."""
    fig, ax = figure(6.4, 3.6)
    x = np.arange(len(pairs))
    ax.bar(x - 0.2, [p[1] for p in pairs], 0.38, color="#3b6fb6", label="synthetic")
    ax.bar(x + 0.2, [p[2] for p in pairs], 0.38, color="#e07b39", label="real")
    for i, (_, s, r, ci) in enumerate(pairs):
        ax.annotate(
            f"{r / s:.0%} of synthetic\n{ci}",
            (i + 0.2, r),
            textcoords="offset points",
            xytext=(0, 3),
            ha="center",
            fontsize=7.5,
        )
    ax.set_xticks(
        x,
        [p[0] for p in pairs],
        fontsize=7.5,
        rotation=20 if len(pairs) > 3 else 0,
        ha="right" if len(pairs) > 3 else "center",
    )
    ax.set_ylabel("samples/s")
    ax.set_ylim(0, max(max(p[1], p[2]) for p in pairs) * 1.3)  # room for the ratio above the bars
    ax.grid(axis="x", visible=False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the axes: it covers no bar or label
    ax.set_title("Synthetic vs real data")
    return fig


@styled
def data_chart(sections: list[Section], cc: dict[Column, str]) -> ChartSet:
    """Synthetic vs real data, side by side, for every configuration measured both ways."""
    pairs = _data_pairs(sections)
    if not pairs:
        return ChartSet(
            notes=[
                (
                    "Synthetic vs real data: no configuration was measured with both "
                    "(run the same points with --data real to see the input pipeline's cost)."
                )
            ]
        )
    return ChartSet(
        [
            Chart(
                "data-synthetic-vs-real",
                "Synthetic vs real data",
                "The same configuration fed synthetic tensors and the real input pipeline; the ratio "
                "real / synthetic with its 95% CI (hierarchical bootstrap over repeats and steps, as "
                "`dlbench compare` computes it; none below 3 repeats).",
                _data_figure(pairs),
            )
        ]
    )


def _ratio_text(synthetic: PointResult, real: PointResult) -> str:
    """'95% CI 58-66%' of real / synthetic throughput (the bootstrap of `dlbench compare` over both points' step
    times), or 'n=1: no CI' with fewer than 3 repeats on a side."""
    ms, mr = synthetic.metrics, real.metrics
    if ms is None or mr is None or not (ms.has_spread and mr.has_spread):
        return f"n={min(ms.repeats if ms else 0, mr.repeats if mr else 0)}: no CI"
    a, b = step_matrix(synthetic), step_matrix(real)
    if not a.size or not b.size:
        return "no CI"
    lo, hi = ratio_ci(a, b)  # mean step synthetic / mean step real = throughput real / synthetic
    return f"95% CI {lo:.0%}-{hi:.0%}"
