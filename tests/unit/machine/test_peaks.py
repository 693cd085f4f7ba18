"""Device peaks (machine/peaks.py) and each point's achieved TFLOP/s and MFU (analysis/mfu.py)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dlbench.analysis.mfu import Efficiency, efficiency, fmt_mfu, fmt_tflops, peak_notes
from dlbench.cases import get_case
from dlbench.machine import peaks
from dlbench.machine.env import cpu_model
from dlbench.protocol.stats import summarize
from dlbench.records import Environment, PointResult, RankRaw, RepeatRaw
from dlbench.spec import PointSpec, Protocol
from dlbench.store.store import Store

CliResult = tuple[int, str, str]


pytestmark = pytest.mark.usefixtures("home")  # every test: a private home (the CPU probe's cache), no probe kept


@pytest.mark.parametrize(
    ("nvml_name", "table_name"),
    [
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("Tesla V100-PCIE-16GB", "V100 PCIe"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM5"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
    ],
)
def test_gpus_are_recognised_from_their_nvml_names(nvml_name: str, table_name: str) -> None:
    g = peaks.find_gpu(nvml_name)
    assert g is not None and g.name == table_name
    assert g.source.startswith("https://")


@pytest.mark.parametrize("name", ["NVIDIA A10G", "NVIDIA L40", "Quadro P1000"])  # MIG slices: test_gpu_peak_table
def test_a_slice_or_an_unlisted_gpu_has_no_peak(name: str) -> None:
    found = peaks.gpu_peak(name, "fp32")
    assert found.peak is None and found.reason.startswith("peak unknown")


def test_the_peak_follows_the_math_mode() -> None:
    h100 = {m: peaks.gpu_peak("NVIDIA H100 80GB HBM3", m).peak for m in peaks.MATH_MODES}
    assert all(p is not None and p.kind == "datasheet" for p in h100.values())
    tf = {m: p.tflops for m, p in h100.items() if p is not None}
    assert tf["fp32"] < tf["tf32"] < tf["bf16"] == tf["fp16"]
    v100 = peaks.gpu_peak("Tesla V100-SXM2-16GB", "bf16")
    assert v100.peak is None and "no bf16" in v100.reason


def test_the_table_is_versioned_and_complete() -> None:
    raw = yaml.safe_load((Path(peaks.__file__).parent / "gpu_peaks.yaml").read_text(encoding="utf-8"))
    assert raw["version"] == peaks.TABLE_VERSION
    for g in peaks.gpu_table():
        assert g.tflops["fp32"] is not None, g.name
        assert all(v is None or v >= g.tflops["fp32"] for v in g.tflops.values()), g.name  # tensor cores >= fp32
    with pytest.raises(ValueError, match="version"):
        peaks._parse_table({**raw, "version": 99})


def test_the_achievable_gemm_rate_is_measured_and_cached_per_host(home: Path) -> None:
    first = peaks.cpu_achievable(cpu_model(), "fp32")
    assert first is not None and first.tflops > 0
    cached = json.loads(next((home / "cache" / "peaks").glob("cpu-*.json")).read_text(encoding="utf-8"))
    assert cached["cpu_model"] == cpu_model() and cached["modes"]["fp32"]["tflops"] == first.tflops
    assert "best of 1 probe since" in first.source
    assert peaks.cpu_achievable(cpu_model(), "fp32") == first  # the same process does not probe twice


def _probes(monkeypatch: pytest.MonkeyPatch, rates: list[float]) -> list[float]:
    """Make the GEMM probe return these rates in turn; the list left shows how many probes ran."""
    left = list(rates)
    monkeypatch.setattr(peaks, "probe_gemm", lambda dtype="float32": left.pop(0))
    return left


def _new_process() -> float:
    peaks.forget_probes()
    found = peaks.cpu_achievable(cpu_model(), "fp32")
    assert found is not None
    return found.tflops


def test_the_cached_achievable_rate_is_the_best_probe_and_only_rises(monkeypatch: pytest.MonkeyPatch) -> None:
    # A first probe under load reads low; later processes probe again (up to MIN_PROBES) and keep the best.
    left = _probes(monkeypatch, [0.02, 0.2, 0.15, 9.9])
    assert [_new_process() for _ in range(peaks.MIN_PROBES)] == [0.02, 0.2, 0.2]
    assert len(left) == 1
    # Enough recent probes: read back, not measured again.
    assert _new_process() == 0.2 and len(left) == 1
    assert "best of 3 probes" in peaks.cpu_achievable(cpu_model(), "fp32").source  # type: ignore[union-attr]


def test_an_old_probe_is_taken_again(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    left = _probes(monkeypatch, [0.2, 0.2, 0.2, 0.3])
    for _ in range(peaks.MIN_PROBES):
        _new_process()
    path = next((home / "cache" / "peaks").glob("cpu-*.json"))
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["modes"]["fp32"]["last"] -= peaks.REPROBE_AFTER_S + 1
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert _new_process() == 0.3 and left == []


def test_a_version_1_cache_is_measured_again(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = home / "cache" / "peaks" / f"cpu-{socket.gethostname()}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 1, "cpu_model": cpu_model(), "tflops": {"fp32": 0.023}}), encoding="utf-8")
    left = _probes(monkeypatch, [0.2])
    assert _new_process() == 0.2 and left == []


def test_no_cpu_peak_for_another_host_or_cpu_and_none_in_tf32() -> None:
    other = peaks.peak_for("cpu", cpu_model(), "fp32", hostname="not-" + socket.gethostname())
    assert other.peak is None and "not this one" in other.reason
    elsewhere = peaks.peak_for("cpu", "Some Other CPU", "fp32")
    assert elsewhere.peak is None and "not on Some Other CPU" in elsewhere.reason
    tf32 = peaks.peak_for("cpu", cpu_model(), "tf32")
    assert tf32.peak is None and tf32.reason.startswith("peak unknown")


def test_a_fake_run_gives_flops_consistent_with_its_raw_step_times(
    store_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.05")  # slow fake steps at a small input: under the CPU's peak
    code, out, err = cli(
        "run",
        "-f",
        "fake",
        "-m",
        "resnet50,bert_base",
        "-b",
        "2",
        "--steps",
        "4",
        "--warmup",
        "1",
        "--repeats",
        "1",
        "--input-size",
        "32",
        "--store",
        str(store_path),
        "--wide",
    )
    assert code == 0, err
    assert "TFLOP/s" in out and "MFU" in out  # --wide: the compact default has neither (issue 24)
    points = Store(store_path).points()
    assert len(points) == 2
    for p in points:
        r = p.result
        # Throughput from the raw windows (global samples / wall time), then x FLOPs per sample.
        walls = sum(rep.wall_s for rep in r.ranks[0].repeats)
        steps = sum(rep.steps for rep in r.ranks[0].repeats)
        samples_per_s = r.spec.global_batch * steps / walls
        per_sample = get_case(r.spec.model).train_flops_per_sample(r.spec.input_size)
        e = efficiency(r)
        assert e.flops_per_sample == per_sample
        assert e.achieved_tflops == pytest.approx(samples_per_s * per_sample / 1e12, rel=1e-9)
        assert e.peak is not None and e.peak.kind == "instruction set" and e.recorded is not None
        assert e.achieved_tflops is not None
        if e.achieved_tflops <= e.peak.tflops:
            assert e.mfu == pytest.approx(e.achieved_tflops / e.peak.tflops) and fmt_mfu(e).endswith("(ISA)")
        else:  # a fake step does no arithmetic: above a slow CPU's peak it is said so, never an MFU over 100%
            assert e.mfu is None and e.above_peak and fmt_mfu(e) == "above peak"
    code, out, _ = cli("results", "--store", str(store_path), "--format", "json")
    doc = json.loads(out)
    assert {d["efficiency"]["achieved_tflops"] for d in doc} == {efficiency(p.result).achieved_tflops for p in points}


def test_a_point_on_an_unknown_gpu_says_peak_unknown() -> None:
    spec = PointSpec(
        framework="fake",
        model="resnet50",
        batch_size=8,
        device="cuda",
        protocol=Protocol(warmup=1, steps=3, repeats=1, statistic="median"),
    )
    ranks = (RankRaw(0, (RepeatRaw((0.1, 0.1, 0.1), 0.3),)),)
    r = PointResult(spec, "ok", ranks, summarize(spec, ranks), Environment(identity={"device_model": "Quadro P1000"}))
    e = efficiency(r)
    assert e.achieved_tflops == pytest.approx(80 * get_case("resnet50").train_flops_per_sample() / 1e12)
    assert e.mfu is None and fmt_mfu(e) == "peak unknown" and "not in gpu_peaks.yaml" in e.note


def test_mfu_divides_by_every_device_of_the_point() -> None:
    spec = PointSpec(
        framework="fake",
        model="resnet50",
        batch_size=8,
        device="cuda",
        devices_per_node=8,
        strategy="ddp",
        protocol=Protocol(warmup=1, steps=3, repeats=1, statistic="median"),
    )
    ranks = tuple(RankRaw(i, (RepeatRaw((0.1, 0.1, 0.1), 0.3),)) for i in range(8))
    env = Environment(identity={"device_model": "NVIDIA A100-SXM4-80GB", "math_mode": "tf32"})
    e = efficiency(PointResult(spec, "ok", ranks, summarize(spec, ranks), env))
    assert e.peak is not None and e.peak.tflops == 156.0 and e.devices == 8
    assert e.mfu == pytest.approx(e.achieved_tflops / (8 * 156.0))


def test_compare_shows_each_side_s_mfu() -> None:
    from dlbench.analysis.compare import compare_points

    spec = PointSpec(
        framework="fake",
        model="resnet50",
        batch_size=8,
        device="cuda",
        protocol=Protocol(warmup=1, steps=3, repeats=1, statistic="median"),
    )

    def point(step_s: float, gpu: str) -> PointResult:
        ranks = (RankRaw(0, (RepeatRaw((step_s,) * 3, 3 * step_s),)),)
        return PointResult(spec, "ok", ranks, summarize(spec, ranks), Environment(identity={"device_model": gpu}))

    c = compare_points(point(0.02, "NVIDIA L4"), point(0.01, "NVIDIA L4"))
    assert c.mfu_a is not None and c.mfu_b == pytest.approx(2 * c.mfu_a)
    assert "datasheet, L4" in c.peak_a
    unknown = compare_points(point(0.02, "NVIDIA L4"), point(0.01, "Quadro P1000"))
    assert unknown.mfu_b is None and unknown.peak_b.startswith("peak unknown")


def test_a_point_above_its_peak_says_why_in_words_and_gives_no_mfu() -> None:
    spec = PointSpec(
        framework="fake",
        model="resnet50",
        batch_size=8,
        device="cuda",
        protocol=Protocol(warmup=1, steps=3, repeats=1, statistic="median"),
    )
    ranks = (RankRaw(0, (RepeatRaw((1e-4,) * 3, 3e-4),)),)  # 80,000 samples/s of ResNet-50: ~2 PFLOP/s on an L4
    r = PointResult(spec, "ok", ranks, summarize(spec, ranks), Environment(identity={"device_model": "NVIDIA L4"}))
    e = efficiency(r)
    assert e.mfu is None and e.above_peak and e.peak is not None
    assert fmt_mfu(e) == "above peak" and "does less arithmetic than the model's FLOP count" in e.note
    assert any("Winograd" in line for line in peak_notes([e]))
    assert "%" not in fmt_mfu(e)


@pytest.mark.parametrize(
    ("tflops", "shown"),
    [
        (None, "-"),
        (0.0123, "0.0123"),
        (12.34, "12.3"),
        (999.4, "999"),
        (999.7, "1,000"),
        (1234.5, "1,234"),
        (2.5e6, "2,500,000"),
    ],
)
def test_tflops_keep_three_digits_and_whole_numbers_from_a_thousand(tflops: float | None, shown: str) -> None:
    """A large MoE or cluster figure reads '1,234' TFLOP/s, never '1.23e+03' (.3g's form from 1,000 on)."""
    assert fmt_tflops(Efficiency("fp32", achieved_tflops=tflops)) == shown
