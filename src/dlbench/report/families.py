"""The Llama family's members as one terminal table (`dlbench list`): each member's shape and exact count, and the
trainable count of MLPerf's LoRA adapters on it (r 16 on the fused qkv and o, #47), under the width rule; and the
decoder members by the frameworks that build them (#46)."""

from __future__ import annotations

from collections.abc import Mapping

from dlbench.cases import all_cases
from dlbench.cases.arch import LlamaConfig, MoeConfig
from dlbench.cases.lora import MLPERF, adapter_params
from dlbench.report.fit import Col, Fitted, fit

COLUMNS = (
    Col("case", "key"),
    Col("hidden", "number", "right"),
    Col("layers", "number", "right"),
    Col("heads", "number", "right", optional=True),
    Col("kv", "number", "right", optional=True),
    Col("ffn", "number", "right", optional=True),
    Col("vocab", "number", "right", optional=True),
    Col("seq", "number", "right", optional=True),
    Col("tied", "text", "right", optional=True),
    Col("parameters", "number", "right"),
    Col("LoRA r16", "number", "right"),
)
HEADERS = tuple(c.header for c in COLUMNS)


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
                    f"{adapter_params(a, MLPERF):,}",
                )
            )
    return rows


def llama_family_table(wide: bool = False) -> Fitted:
    """The family's rows under the width rule: numbers never cut, the shape's optional columns left out (and named)
    where the terminal is narrow."""
    title = "llama family (--param NAME=VALUE reshapes any member; LoRA r16: MLPerf's adapters' trainable count)"
    return fit(COLUMNS, llama_family_rows(), title=title, wide=wide)


BUILDERS = (Col("member", "key"), Col("built with its exact count by"), Col("not checked"))


def builders_table(answers: Mapping[str, Mapping[str, object]], wide: bool = False) -> Fitted:
    """`dlbench list`'s decoder members (the Llama and MoE families) by framework (#46): per member, the installed
    frameworks whose `dlbench.check params` answer is its exact count, and those not asked yet; `answers` is each
    installed framework's answers ({} where not checked)."""
    rows = []
    for c in all_cases():
        if isinstance(c.arch, LlamaConfig | MoeConfig):
            built = [fw for fw, a in answers.items() if a.get(c.name) == c.param_count]
            unchecked = [fw for fw, a in answers.items() if not a]
            rows.append((c.name, ", ".join(built) or "-", ", ".join(unchecked) or "-"))
    title = "decoder members by framework (installed frameworks; `no:` reasons in the case support table)"
    return fit(BUILDERS, rows, title=title, wide=wide)


__all__ = ["COLUMNS", "HEADERS", "builders_table", "llama_family_rows", "llama_family_table"]
