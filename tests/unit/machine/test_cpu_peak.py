"""A CPU's peak from its instruction set (machine/cpu_peak.py), stored with each point so that its MFU never
changes when read (analysis/mfu.py) (issue 24, item 4)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.analysis import mfu
from dlbench.machine import cpu_peak, peaks
from dlbench.machine.cpu_peak import core_peak, fma_rule, max_clock, parse_cpuinfo
from dlbench.machine.env import cpu_model
from dlbench.protocol.stats import summarize
from dlbench.records import Environment, PointResult, RankRaw, RepeatRaw
from dlbench.spec import PointSpec, Protocol
from dlbench.store.store import Store

CliResult = tuple[int, str, str]
BASE = "fpu sse sse2 ht"
AVX2 = BASE + " avx fma avx2"
AVX512 = AVX2 + " avx512f avx512dq avx512bw avx512vl"
SPR = AVX512 + " avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8"
NO_CPUFREQ = Path("/nonexistent/cpuinfo_max_freq")


def cpuinfo(
    vendor: str, family: int, model: int, name: str, flags: str, cores: int = 2, threads: int = 1, mhz: float = 2600.0
) -> str:
    """/proc/cpuinfo text of one socket: `cores` cores of `threads` SMT threads each."""
    blocks = []
    for i in range(cores * threads):
        blocks.append(
            f"processor\t: {i}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
            f"model name\t: {name}\ncpu MHz\t\t: {mhz:.3f}\nphysical id\t: 0\ncore id\t\t: {i % cores}\n"
            f"flags\t\t: {flags}\n"
        )
    return "\n".join(blocks)


@pytest.mark.parametrize(
    ("text", "fp32_per_cycle", "rule"),
    [
        # this project's VM: a model number of Rocket Lake (167) with AMX flags no Rocket Lake has -> the flags decide
        (cpuinfo("GenuineIntel", 6, 167, "Intel(R) Xeon(R) Processor", SPR), 64, "with AMX"),
        (cpuinfo("GenuineIntel", 6, 167, "11th Gen Intel(R) Core(TM) i9-11900K @ 3.50GHz", AVX512), 32, "client"),
        (cpuinfo("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Gold 5118 CPU @ 2.30GHz", AVX512), 32, "one 512-bit"),
        (
            cpuinfo("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Gold 5122 CPU @ 3.60GHz", AVX512),
            64,
            "Skylake-SP and later",
        ),
        (
            cpuinfo("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", AVX512),
            64,
            "Skylake-SP and later",
        ),
        (cpuinfo("AuthenticAMD", 25, 17, "AMD EPYC 9654 96-Core Processor", AVX512), 32, "Zen 4"),
        (cpuinfo("AuthenticAMD", 25, 1, "AMD EPYC 7763 64-Core Processor", AVX2), 32, "AVX2 + FMA"),
        (cpuinfo("AuthenticAMD", 23, 1, "AMD EPYC 7601 32-Core Processor", AVX2), 16, "Zen / Zen+"),
        (cpuinfo("AuthenticAMD", 26, 2, "AMD EPYC 9755 128-Core Processor", AVX512), 64, "Zen 5"),
        (cpuinfo("GenuineIntel", 6, 63, "Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz", AVX2), 32, "AVX2 + FMA"),
        (cpuinfo("GenuineIntel", 6, 45, "Intel(R) Xeon(R) CPU E5-2670 0 @ 2.60GHz", BASE + " avx"), 16, "without FMA"),
    ],
)
def test_fma_units_per_microarchitecture(text: str, fp32_per_cycle: float, rule: str) -> None:
    cpu = parse_cpuinfo(text)
    found = fma_rule(cpu)
    assert found is not None and rule in found.name and found.source.startswith("http")
    peak = core_peak(cpu, "fp32", NO_CPUFREQ)
    assert not isinstance(peak, str)
    assert peak.tflops_per_core == pytest.approx(fp32_per_cycle * max_clock(cpu, NO_CPUFREQ)[0] * 1e9 / 1e12)


def test_cores_are_physical_and_the_clock_says_where_it_comes_from(tmp_path: Path) -> None:
    smt = parse_cpuinfo(cpuinfo("GenuineIntel", 6, 143, "Intel(R) Xeon(R) Platinum 8480+", SPR, cores=4, threads=2))
    assert smt.cores == 4  # 8 logical CPUs, 4 cores: SMT siblings share a core's FMA units
    freq = tmp_path / "cpuinfo_max_freq"
    freq.write_text("3800000\n")
    assert max_clock(smt, freq) == (3.8, "cpufreq maximum (single-core boost)")
    named = parse_cpuinfo(cpuinfo("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", AVX512))
    assert max_clock(named, NO_CPUFREQ)[0] == 2.4 and "base clock" in max_clock(named, NO_CPUFREQ)[1]
    vm = parse_cpuinfo(cpuinfo("GenuineIntel", 6, 167, "Intel(R) Xeon(R) Processor", SPR, mhz=2600.0))
    assert max_clock(vm, NO_CPUFREQ)[0] == 2.6 and "boost clock is unknown" in max_clock(vm, NO_CPUFREQ)[1]


def test_math_modes_use_amx_or_the_dot_products_where_the_flags_show_them() -> None:
    spr = parse_cpuinfo(cpuinfo("GenuineIntel", 6, 143, "Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz", SPR))
    zen4 = parse_cpuinfo(cpuinfo("AuthenticAMD", 25, 17, "AMD EPYC 9654 @ 2.40GHz", AVX512 + " avx512_bf16"))
    haswell = parse_cpuinfo(cpuinfo("GenuineIntel", 6, 63, "Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz", AVX2))

    def per_cycle(cpu: object, mode: str) -> float:
        p = core_peak(cpu, mode, NO_CPUFREQ)  # type: ignore[arg-type]
        assert not isinstance(p, str), p
        return p.tflops_per_core * 1e12 / (max_clock(cpu, NO_CPUFREQ)[0] * 1e9)  # type: ignore[arg-type]

    assert per_cycle(spr, "bf16") == pytest.approx(1024)  # AMX
    assert per_cycle(spr, "fp16") == pytest.approx(128)  # avx512_fp16, no amx_fp16
    assert per_cycle(zen4, "bf16") == pytest.approx(64)  # avx512_bf16 on double-pumped units
    assert per_cycle(haswell, "bf16") == pytest.approx(32)  # widened to fp32
    assert isinstance(core_peak(spr, "tf32", NO_CPUFREQ), str)


@pytest.fixture(autouse=True)
def no_cpufreq(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clocks from the model name or cpu MHz, as on this project's VM, whatever cpufreq the test machine has."""
    monkeypatch.setattr(cpu_peak, "CPUFREQ_MAX", NO_CPUFREQ)


def test_a_stored_points_mfu_never_changes_when_read(
    home: Path, store_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue: a stored CPU point's MFU read 62.1%, 44.6%, 16.0% within 30 minutes, as the CPU peak it divided
    by was probed again and rose. Here the probe rises 100-fold and the CPU's flags change between reads."""
    rates = iter([0.01, 0.1, 1.0, 10.0, 100.0, 1000.0])
    monkeypatch.setattr(peaks, "probe_gemm", lambda dtype="float32": next(rates))
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.05")
    code, _, err = cli(
        "run",
        "-f",
        "fake",
        "-m",
        "resnet50",
        "-b",
        "1",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--repeats",
        "1",
        "--input-size",
        "32",
        "--store",
        str(store_path),
    )
    assert code == 0, err
    [p] = Store(store_path, readonly=True).points()
    first = mfu.efficiency(p.result)
    assert first.peak is not None and first.peak.kind == "instruction set" and first.recorded is not None
    assert first.achievable is not None and first.achievable.tflops == 0.01  # beside the peak, not the peak
    for _ in range(3):
        peaks.forget_probes()
        monkeypatch.setattr(peaks, "read_cpu", lambda: parse_cpuinfo(cpuinfo("GenuineIntel", 6, 63, "other", AVX2)))
        again = mfu.efficiency(Store(store_path, readonly=True).points()[0].result)
        assert (again.mfu, again.peak, again.achievable) == (first.mfu, first.peak, first.achievable)


def _cpu_point(threads: int | None, extra: dict[str, object] | None = None) -> PointResult:
    spec = PointSpec(
        framework="fake",
        model="resnet50",
        batch_size=1,
        threads=threads,
        input_size=32,
        protocol=Protocol(warmup=1, steps=2, repeats=1, statistic="median"),
    )
    ranks = (RankRaw(0, (RepeatRaw((1.0, 1.0), 2.0),)),)
    env = Environment(
        identity={"device": "cpu", "device_model": cpu_model(), "cpu_cores": "2"}, descriptive={"hostname": ""}
    )
    return PointResult(spec, "ok", ranks, summarize(spec, ranks), env, extra=extra or {})


def test_the_peak_counts_the_cores_a_point_was_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peaks, "read_cpu", lambda: parse_cpuinfo(cpuinfo("GenuineIntel", 6, 143, "x @ 2.00GHz", SPR)))
    one = mfu.stored_peak(_cpu_point(1).spec, _cpu_point(1).env.identity, {})
    both = mfu.stored_peak(_cpu_point(None).spec, _cpu_point(None).env.identity, {})
    assert one["tflops"] == pytest.approx(64 * 2.0e9 / 1e12) and both["tflops"] == pytest.approx(2 * one["tflops"])  # type: ignore[operator]


def test_a_point_stored_before_peaks_were_kept_says_its_peak_was_looked_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peaks, "read_cpu", lambda: parse_cpuinfo(cpuinfo("GenuineIntel", 6, 143, "x @ 2.00GHz", SPR)))
    old = mfu.efficiency(_cpu_point(None))
    assert old.recorded is None and old.note == mfu.LOOKED_UP and old.mfu is not None
    assert any(mfu.LOOKED_UP in line for line in mfu.peak_notes([old]))
    broken = mfu.efficiency(_cpu_point(None, {"peak": {"tflops": "lots"}}))
    assert broken.mfu is None and "malformed" in broken.note


def test_compare_shows_above_peak_in_words_not_an_mfu_over_100() -> None:
    from dlbench.analysis.compare import compare_points
    from dlbench.report.change_tables import fmt_mfu_change as _mfu

    spec = PointSpec(
        framework="fake",
        model="resnet50",
        batch_size=8,
        device="cuda",
        protocol=Protocol(warmup=1, steps=3, repeats=1, statistic="median"),
    )

    def gpu(step_s: float) -> PointResult:
        ranks = (RankRaw(0, (RepeatRaw((step_s,) * 3, 3 * step_s),)),)
        return PointResult(
            spec, "ok", ranks, summarize(spec, ranks), Environment(identity={"device_model": "NVIDIA L4"})
        )

    c = compare_points(gpu(0.02), gpu(1e-4))  # 80,000 samples/s of ResNet-50 is far above an L4's peak
    assert c.mfu_b is None and _mfu(c).endswith("→ above peak") and "%" in _mfu(c).split("→")[0]
