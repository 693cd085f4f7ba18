"""The MoE family's members as one terminal table (`dlbench list`): shape, experts and exact total and active
parameter counts, under the width rule (report/fit.py)."""

from __future__ import annotations

from dlbench.cases import all_cases
from dlbench.cases.arch import MoeConfig
from dlbench.cases.moe import active_param_count
from dlbench.report.fit import Col, Fitted, fit

COLUMNS = (
    Col("case", "key"),
    Col("hidden", "number", "right"),
    Col("layers", "number", "right"),
    Col("experts", "number", "right"),
    Col("top_k", "number", "right"),
    Col("ffn", "number", "right", optional=True),
    Col("parameters", "number", "right"),
    Col("active", "number", "right"),
)


def moe_family_rows() -> list[tuple[str, ...]]:
    """One row per registered MoE case: width, depth, experts (routed, '+S' shared), top_k, expert width, and
    its exact total and active parameter counts (cases/moe.py)."""
    rows: list[tuple[str, ...]] = []
    for c in all_cases():
        a = c.arch
        if isinstance(a, MoeConfig):
            experts = str(a.num_experts) + (f"+{a.shared_experts}" if a.shared_experts else "")
            rows.append(
                (
                    c.name,
                    str(a.base.hidden_size),
                    str(a.base.num_layers),
                    experts,
                    str(a.top_k),
                    str(a.expert_ffn),
                    f"{c.param_count:,}",
                    f"{active_param_count(a):,}",
                )
            )
    return rows


def moe_family_table(wide: bool = False) -> Fitted:
    """The family's rows under the width rule (76 columns at full width)."""
    return fit(COLUMNS, moe_family_rows(), title="moe family (--param NAME=VALUE reshapes any member)", wide=wide)


__all__ = ["COLUMNS", "moe_family_rows", "moe_family_table"]
