"""`dlbench reference list|show`: the shipped published figures, filtered, as a table or JSON."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from dlbench.reference import find, load_all

CliResult = tuple[int, str, str]


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich tables fold long cells on an 80-column terminal; the checks here are about content."""
    monkeypatch.setenv("COLUMNS", "220")


def test_list(cli: Callable[..., CliResult]) -> None:
    code, out, err = cli("reference", "list")
    assert code == 0, err
    for name in ("caict_2020", "dlperf_v1", "paddle_resnet50v15", "tf_cnn_benchmarks"):
        assert name in out
    assert "charts only" in out


def test_list_json_counts(cli: Callable[..., CliResult]) -> None:
    code, out, _ = cli("reference", "list", "--format", "json")
    assert code == 0
    counts = {d["file"]: d["rows"] for d in json.loads(out)}
    assert counts["caict_2020.yaml"] == 0
    assert sum(counts.values()) == len(load_all())


def test_show_filtered_json_matches_find(cli: Callable[..., CliResult]) -> None:
    code, out, _ = cli(
        "reference", "show", "--model", "resnet50", "--precision", "amp", "--batch-size", "256", "--format", "json"
    )
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == len(find("resnet50", "amp", 256)) > 0
    assert all(r["model"] == "resnet50" and r["precision"] == "amp" and r["batch_size"] == 256 for r in rows)
    assert all(r["source"] and r["hardware"] and r["source_line"] >= 1 for r in rows)


def test_show_one_source_as_table(cli: Callable[..., CliResult]) -> None:
    code, out, _ = cli("reference", "show", "dlperf_v1", "-m", "resnet50", "-f", "oneflow", "-p", "fp32")
    assert code == 0
    assert "DLPerf" in out and "12,411.97" in out and "31.21" in out  # DLPerf README line 134
    assert "1 figure." in out


def test_show_source_without_numbers(cli: Callable[..., CliResult]) -> None:
    code, out, _ = cli("reference", "show", "caict_2020")
    assert code == 0 and "charts only, no numbers" in out


@pytest.mark.parametrize(
    "args,needle",
    [
        (("show", "nope"), "unknown reference source 'nope'"),
        (("show", "--model", "resnet18"), "unknown model 'resnet18'"),
        (("show", "--framework", "caffe"), "unknown framework 'caffe'"),
        (("show", "--precision", "fp16"), "fp16"),
    ],
)
def test_bad_input(cli: Callable[..., CliResult], args: tuple[str, ...], needle: str) -> None:
    code, _, err = cli("reference", *args)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
