"""The Llama family's members as one terminal table (`dlbench list`): each member's shape and exact count."""

from __future__ import annotations

from rich import box
from rich.table import Table

from dlbench.cases import all_cases
from dlbench.cases.arch import LlamaConfig

HEADERS = ("case", "hidden", "layers", "heads", "kv", "ffn", "vocab", "seq", "tied", "parameters")


def llama_family_rows() -> list[tuple[str, ...]]:
    """One row per registered Llama case: its shape (its parameters' defaults) and exact parameter count."""
    rows: list[tuple[str, ...]] = []
    for c in all_cases():
        a = c.arch
        if isinstance(a, LlamaConfig):
            rows.append(
                (
                    c.name,
                    str(a.hidden_size),
                    str(a.num_layers),
                    str(a.num_heads),
                    str(a.num_kv_heads),
                    str(a.ffn_size),
                    str(a.vocab_size),
                    str(a.max_positions),
                    "yes" if a.tied_embeddings else "no",
                    f"{c.param_count:,}",
                )
            )
    return rows


def llama_family_table() -> Table:
    """The family's rows in a table 71 columns wide whose numbers are never cut (each column as wide as its
    longest cell)."""
    rows = llama_family_rows()
    table = Table(
        title="llama family (--param NAME=VALUE reshapes any member)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 1, 0, 0),
        show_edge=False,
    )
    for i, name in enumerate(HEADERS):
        width = max(len(r[i]) for r in [HEADERS, *rows])
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=True, min_width=width)
    for row in rows:
        table.add_row(*row)
    return table


__all__ = ["HEADERS", "llama_family_rows", "llama_family_table"]
