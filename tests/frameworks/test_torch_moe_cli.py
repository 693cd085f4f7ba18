"""The issue's done-when (#36) through the CLI: `dlbench run -f torch -m moe_tiny --scale 1n2c --expert-parallel 2`
trains here (2 gloo ranks exchanging tokens) after its 1-device baseline, and the point's JSON carries its routing
figures (summed over the ranks), its total and active parameters and its FLOPs by active parameters; about 1
CPU-minute."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed in this environment: pip install -e '.[torch]'")
pytestmark = [pytest.mark.framework("torch"), pytest.mark.slow]

CliResult = tuple[int, str, str]
SMALL = ("--warmup", "1", "--steps", "2", "--repeats", "2", "--threads", "1")


def test_expert_parallel_on_two_ranks_trains_and_stores_routing(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    store = tmp_path / "r.db"
    code, out, err = cli(
        "run",
        "-f",
        "torch",
        "-m",
        "moe_tiny",
        "--scale",
        "1n2c",
        "--expert-parallel",
        "2",
        *SMALL,
        "--store",
        str(store),
    )
    assert code == 0, err
    assert "6Nact+attn/2" in out
    code, out, _ = cli("results", "--format", "json", "--store", str(store))
    rows = {row["spec"]["devices_per_node"]: row for row in json.loads(out)}
    assert set(rows) == {1, 2} and rows[2]["spec"]["layout"]["expert_parallel"] == 2 and rows[1]["status"] == "ok"
    ep = rows[2]
    assert ep["status"] == "ok" and ep["env"]["identity"].get("strategy_run", "expert-parallel") == "expert-parallel"
    routing = ep["extra"]["routing"]
    per_step = 2 * 8 * 64 * 2  # 2 ranks x 8 sequences x 64 tokens x top-2
    sums = [sum(layer) for layer in routing["tokens_per_expert"]]
    assert sums[0] == sums[1] and sums[0] % per_step == 0  # whole steps of both ranks, every layer
    assert sums[0] // per_step >= 1 + 2 * 2  # at least the warm-up and the measured steps of both repeats
    assert routing["imbalance_max"] >= 1.0 and routing["dropped_fraction"] == 0.0
    assert routing["forced_balanced"] is False and 0 < routing["all_to_all_share"] < 1
    llm = ep["llm"]
    assert (llm["params_total"], llm["params_active"]) == (484_672, 189_760)
    assert "N_active" in llm["flop_convention"]
