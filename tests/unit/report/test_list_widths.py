"""Issue 42 item 6: the width rule at 60 columns too. `dlbench list` at 60 dropped the Llama family's parameters
and tied columns unnamed; a header wider than its numbers was cut (`batch (fixed / cpu` at 80, `A samples` for
`A samples/s` in compare); torch's support read `?` for every case."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from dlbench.cli import info
from dlbench.report.families import COLUMNS as LLAMA_COLUMNS
from dlbench.report.families import builders_table, llama_family_rows, llama_family_table
from dlbench.report.fit import Col, fit

CliResult = tuple[int, str, str]
WIDTHS = (60, 80, 120)


def _printed(width: int, table: object) -> str:
    console = Console(file=io.StringIO(), width=width)
    console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined]


@pytest.mark.parametrize("width", WIDTHS)
def test_the_llama_family_keeps_its_numbers_and_names_what_it_left_out(width: int) -> None:
    text = _printed(width, llama_family_table())
    words = text.split()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    for row in llama_family_rows():
        assert row[0] in words and row[-1] in words  # the case and its exact parameter count, whole
    lines = text.splitlines()
    shown = next(lines[i - 1] for i, line in enumerate(lines) if line.startswith("─"))  # the headers
    dropped = next((line for line in text.splitlines() if line.startswith("Not shown at this width")), "")
    for col in LLAMA_COLUMNS:
        assert col.header in shown or col.header in dropped, (col.header, text)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_header_wider_than_its_numbers_wraps_whole(width: int) -> None:
    cols = [Col("case", "key"), Col("text", squeeze=12), Col("batch (fixed / cpu)", "number", "right")]
    rows = [["wide_deep", "x " * (width // 2), "16384 / 512"], ["alexnet", "y", "64 / 16"]]
    text = _printed(width, fit(cols, rows))
    words = text.split()
    assert all(w in words for w in ("batch", "(fixed", "/", "cpu)")), text
    assert "(fixe" not in [w for w in words if w != "(fixed"]


def test_compare_at_80_names_both_throughput_columns_whole() -> None:
    cols = [Col("configuration", "key"), Col("A samples/s", "number", "right"), Col("B samples/s", "number", "right")]
    rows = [["torch resnet50 bs8 fp32 1n1c " * 2, "12.3", "13.4"]]
    text = _printed(80, fit(cols, rows))
    assert "samples/s" in text.replace("\n", " ") and "A samples " not in text


def test_list_asks_a_framework_of_this_interpreter_once_and_keeps_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Callable[..., CliResult]
) -> None:
    """torch installed beside dlbench has no `dlbench setup` to ask it which cases it builds: `list` asks it once
    (the check mocked at its boundary: the child process) and keeps the answer under the dlbench home."""
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "400")
    from dlbench.cases import all_cases

    asked: list[str] = []

    def live(python: str, framework: str) -> dict[str, object]:
        asked.append(framework)
        return {c.name: c.param_count for c in all_cases()}

    monkeypatch.setattr(info, "_live_cases", live)
    code, out, err = cli("list")
    assert code == 0, err
    assert asked == ["torch"] and "checking which cases torch builds in this interpreter" in err
    row = next(line for line in out.splitlines() if line.startswith("torch ") and " yes " in line)
    assert "?" not in row
    code, out, err = cli("list")
    assert code == 0 and asked == ["torch"] and "checking" not in err  # the kept answer


@pytest.mark.parametrize("width", WIDTHS)
def test_decoder_members_by_framework_name_each_builder_whole(width: int) -> None:
    """#46: each Llama and MoE member with the installed frameworks whose answer is its exact count (a wrong count
    or a `no:` reason is not a builder), and those not asked yet."""
    answers: dict[str, dict[str, object]] = {
        "torch": {"llama_tiny": 1_000_576, "moe_tiny": 484_672, "deepseek_tiny": 340_048},
        "oneflow": {"llama_tiny": 1_000_576, "moe_tiny": 484_672, "deepseek_tiny": "unsupported: torch's only"},
        "megengine": {"llama_tiny": "unsupported: MegEngine 1.13 lacks it", "moe_tiny": 1},
        "mxnet": {},
    }
    text = _printed(width, builders_table(answers))
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    rows = {line.split()[0]: line for line in text.splitlines() if line.split() and line.split()[0].endswith("_tiny")}
    assert "torch, oneflow" in rows["llama_tiny"] and "megengine" not in rows["llama_tiny"]
    assert "torch, oneflow" in rows["moe_tiny"] and "mxnet" in rows["moe_tiny"]  # mxnet: not checked
    assert "torch" in rows["deepseek_tiny"] and "oneflow" not in rows["deepseek_tiny"]
