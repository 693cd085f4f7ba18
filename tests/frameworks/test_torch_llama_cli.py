"""The issue's done-when (#35) through the CLI: `dlbench run -f torch -m llama_tiny --scale 1n2c --fsdp` trains
here (2 gloo ranks, FSDP2) after its 1-device baseline, and each point's JSON carries the decoder figures with
their FLOP convention; about 2 CPU-minutes."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.store.store import Store

pytest.importorskip("torch", reason="torch is not installed in this environment: pip install -e '.[torch]'")
pytestmark = [pytest.mark.framework("torch"), pytest.mark.slow]

CliResult = tuple[int, str, str]
SMALL = ("--input-size", "32", "--warmup", "1", "--steps", "2", "--repeats", "2", "--threads", "1")


def test_fsdp_on_two_ranks_trains_and_records_its_figures(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    store = tmp_path / "r.db"
    code, out, err = cli(
        "run", "-f", "torch", "-m", "llama_tiny", "--scale", "1n2c", "--fsdp", *SMALL, "--store", str(store)
    )
    assert code == 0, err
    assert "FSDP" in out and "tokens/s" in out and "6N+attn/2" in out
    points = {p.result.spec.world_size: p.result for p in Store(store).points()}
    assert (
        set(points) == {1, 2} and points[2].spec.layout.fsdp and not points[1].spec.layout.fsdp
    )  # the baseline has no FSDP
    for r in points.values():
        assert r.status == "ok" and r.metrics is not None and math.isfinite(r.metrics.final_loss or math.nan)
    code, out, _ = cli("results", "--format", "json", "--store", str(store))
    rows = {row["spec"]["devices_per_node"]: row for row in json.loads(out)}
    llm = rows[2]["llm"]
    assert llm["tokens_per_s"] == pytest.approx(2 * llm["tokens_per_s_per_device"])
    assert "causal attention counted as half" in llm["flop_convention"]
    assert llm["memory_per_device_bytes"] > 0
