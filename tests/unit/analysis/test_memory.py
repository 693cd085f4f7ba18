"""The memory estimate (#41): analytic model state for the members too large to run here, each layout's sharding,
and every measured CPU peak (benchmarks/memory_peaks.json, made by benchmarks/memory.py) within MARGIN; one tiny
torch point measured live, its estimate stored with it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dlbench.analysis.memory import ESTIMATE_KEY, MARGIN, estimate
from dlbench.cases import all_cases, get_case
from dlbench.parallel import Layout
from dlbench.points import Axes, Shared
from dlbench.runapi.run import RunRequest, execute_run, prepare_run
from dlbench.spec import PointSpec, Protocol, preset

PEAKS = Path(__file__).parents[3] / "benchmarks" / "memory_peaks.json"
# The members whose model state alone (16 bytes a parameter under AdamW) is beyond a 24 GiB machine, with the
# counts their configuration files give (tests/unit/cases checks each against a reference model).
TOO_LARGE = {
    "llama": 8_030_261_248,
    "llama3_8b": 8_030_261_248,
    "llama3_1b": 1_235_814_400,
    "llama2_70b": 68_976_648_192,
    "mixtral_8x7b": 46_702_792_704,
    "deepseek_v3": 671_026_404_352,
    "gpt_oss_20b": 20_914_757_184,
    "flux1": 11_891_178_560,
}
# DLRMv2 (MLPerf): its parameters, and those of its 26 tables (five capped at 40M rows, the others' rows summed,
# 128 wide), whose gradients are sparse; Adagrad keeps one state for every parameter
DLRM_V2 = ("dlrm_v2", 26_151_671_809, 128 * (5 * 40_000_000 + 4_184_588))


def _spec(model: str, **kw: object) -> PointSpec:
    return PointSpec(framework="torch", model=model, batch_size=1, protocol=preset("quick"), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("model, count", sorted(TOO_LARGE.items()))
def test_a_member_too_large_to_run_here_holds_its_analytic_state(model: str, count: int) -> None:
    est = estimate(_spec(model))
    assert est is not None
    assert (est.weights, est.gradients, est.optimizer) == (4 * count, 4 * count, 8 * count)  # fp32, AdamW's two
    assert est.model_state == 16 * count and est.total > est.model_state


def test_dlrm_v2_holds_no_dense_gradient_for_its_tables() -> None:
    model, count, tables = DLRM_V2
    est = estimate(_spec(model))
    assert est is not None
    assert (est.weights, est.gradients, est.optimizer) == (4 * count, 4 * (count - tables), 4 * count)


def test_layouts_share_the_model_state_out() -> None:
    count = TOO_LARGE["llama3_8b"]
    fsdp = estimate(_spec("llama3_8b", devices_per_node=8, layout=Layout(fsdp=True)))
    assert fsdp is not None and (fsdp.gradients, fsdp.optimizer) == (4 * count // 8, 8 * count // 8)
    assert "fsdp over 8" in fsdp.sharding
    tensor = estimate(_spec("llama3_8b", devices_per_node=2, layout=Layout(tensor_parallel=2)))
    whole = estimate(_spec("llama3_8b"))
    assert tensor is not None and whole is not None
    assert tensor.optimizer == whole.optimizer // 2 and tensor.activations < whole.activations
    experts = estimate(_spec("mixtral_8x7b", devices_per_node=4, layout=Layout(expert_parallel=4)))
    mixtral = estimate(_spec("mixtral_8x7b"))
    assert experts is not None and mixtral is not None
    a = get_case("mixtral_8x7b").arch
    routed = a.base.num_layers * a.num_experts * 3 * a.base.hidden_size * a.expert_ffn  # type: ignore[union-attr]
    assert mixtral.gradients - experts.gradients == 4 * (routed - routed // 4)
    bf16 = estimate(_spec("llama3_8b", precision="bf16"))
    assert bf16 is not None and bf16.activations * 2 == whole.activations  # 2-byte activations, one weight copy
    assert bf16.weights == whole.weights + 2 * count


def test_no_estimate_for_the_fake_backend() -> None:
    assert estimate(dataclasses.replace(_spec("mixtral_8x7b"), framework="fake")) is None


def _measured() -> list[dict[str, object]]:
    rows = json.loads(PEAKS.read_text(encoding="utf-8"))["rows"]
    assert isinstance(rows, list)
    return rows


def test_every_case_that_fits_here_was_measured() -> None:
    measured = {str(r["model"]) for r in _measured() if r["framework"] == "torch"}
    assert measured == {c.name for c in all_cases()} - set(TOO_LARGE) - {DLRM_V2[0]}


@pytest.mark.parametrize(
    "row", _measured(), ids=lambda r: f"{r['framework']}-{r['model']}-bs{r['batch']}-{r['input_size']}"
)
def test_the_estimate_is_within_the_margin_of_the_measured_peak(row: dict[str, object]) -> None:
    params = row["params"]
    assert isinstance(params, dict)
    spec = PointSpec(
        framework=str(row["framework"]),
        model=str(row["model"]),
        batch_size=int(str(row["batch"])),
        protocol=preset("quick"),
        input_size=int(str(row["input_size"])) if row["input_size"] else None,
        case_params=tuple(sorted((str(k), int(v)) for k, v in params.items())),
    )
    est = estimate(spec)
    assert est is not None
    ratio = est.total / int(str(row["peak_bytes"]))
    assert 1 / MARGIN <= ratio <= MARGIN, f"estimate / measured peak = {ratio:.2f}"


def test_a_tiny_torch_point_is_within_the_margin_and_keeps_its_estimate(store_path: Path) -> None:
    """The one live check (a few seconds): llama_tiny's peak resident set against its estimate."""
    pytest.importorskip("torch")
    req = RunRequest(
        axes=Axes(models=("llama_tiny",), batches=(8,)),
        shared=Shared(protocol=Protocol(1, 1, 1, "median", "quick"), device="cpu"),
        store_path=str(store_path),
    )
    (result,) = execute_run(prepare_run(req)).results
    assert result.status == "ok" and result.metrics is not None and result.metrics.peak_memory_bytes
    est = estimate(result.spec)
    assert est is not None and result.extra[ESTIMATE_KEY] == est.to_dict()
    assert 1 / MARGIN <= est.total / result.metrics.peak_memory_bytes <= MARGIN


def test_every_stored_point_keeps_its_estimate(store_path: Path) -> None:
    """attach_request is where run, sweep, a max search's probes and rerun pass before a point is stored."""
    from dlbench.launch.lock import attach_request
    from dlbench.records import Environment, PointResult
    from dlbench.store.store import Store

    store = Store(store_path)
    run_id = store.create_run("dlbench sweep s", kind="sweep")
    spec = _spec("resnet50", input_size=64)
    failed = PointResult(spec, "oom", (), None, Environment({}, {}), error="out of memory")  # type: ignore[arg-type]
    kept = attach_request(store, run_id, failed, None)
    est = estimate(spec)
    assert est is not None and kept.extra[ESTIMATE_KEY] == est.to_dict()
    faked = attach_request(
        store, run_id, dataclasses.replace(failed, spec=dataclasses.replace(spec, framework="fake")), None
    )
    assert ESTIMATE_KEY not in faked.extra
