"""A CPU's peak FLOP/s from its instruction set: physical cores x maximum clock x FLOPs per cycle of its FMA units.

FLOPs per cycle and core in fp32 = FMA units x (vector bits / 32) x 2 (a fused multiply-add is two FLOPs). The
vector width comes from the /proc/cpuinfo flags (avx512f, avx2 + fma, avx, sse2); how many FMA units a core has
is a property of its microarchitecture that no flag names, so FMA_RULES below says it per microarchitecture,
each row with its source. A rule is recognised from the vendor, family and model numbers (and the model name
where SKUs differ), and only while the flags agree with it: a hypervisor may report a model number the flags
contradict (this project's VM says family 6 model 167, a Rocket Lake, with AMX, which no Rocket Lake has), and
then the flags decide. bf16 and fp16 use AMX where the flags show it (1024 FLOPs per cycle and core), else twice
the fp32 rate where AVX-512 has the data type's dot-product (avx512_bf16, avx512_fp16), else the fp32 rate (the
values are widened to fp32 before the FMA).

The clock is the maximum of cpufreq (/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq, the single-core
boost: all-core AVX-512 clocks are lower, so the peak is a ceiling and MFU a floor); where cpufreq is absent (a
VM) the model name's "@ 2.60GHz" (the base clock), else /proc/cpuinfo's "cpu MHz", and the derivation says
which. Cores are physical (distinct physical id, core id pairs): SMT siblings share one core's FMA units.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
CPUFREQ_MAX = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
AMX_FLOPS_PER_CYCLE = 1024  # bf16 (and fp16 with amx_fp16) per core: 16x16x32 multiply-adds every 16 cycles
AMX_SOURCE = "https://en.wikipedia.org/wiki/Advanced_Matrix_Extensions"


@dataclass(frozen=True)
class FmaRule:
    """How many FMA units of what width one core of a microarchitecture has, how it is recognised, and whence."""

    name: str
    vendor: str
    families: tuple[int, ...]
    units: int
    bits: int
    source: str
    models: tuple[int, ...] = ()  # empty: every model of the families
    model_name: str = ""  # a regex the model name must match (SKUs that differ)
    needs: tuple[str, ...] = ()  # flags that must be present
    never: tuple[str, ...] = ()  # flags this microarchitecture never has (a contradicting model number is ignored)

    def matches(self, cpu: CpuInfo) -> bool:
        """Whether the CPU is this microarchitecture, and its flags agree."""
        return (
            cpu.vendor == self.vendor
            and cpu.family in self.families
            and (not self.models or cpu.model in self.models)
            and (not self.model_name or re.search(self.model_name, cpu.model_name) is not None)
            and all(f in cpu.flags for f in self.needs)
            and not any(f in cpu.flags for f in self.never)
        )


_WIKICHIP_ZEN2 = "https://en.wikichip.org/wiki/amd/microarchitectures/zen_2"
_ZEN5 = "http://www.numberworld.org/blogs/2024_8_7_zen5_avx512_teardown/"
_ICL_SP = "https://www.techpowerup.com/271091/intel-xeon-scalable-ice-lake-sp-28-core-die-detailed-at-hot-chips-18-ipc-increase"
_SKX = "https://community.intel.com/t5/Software-Tuning-Performance/Calculate-the-Max-Flops-on-Skylake/td-p/1160952"
_SPR = "https://chipsandcheese.com/p/golden-cove-hits-servers"
_FLOPS = "https://en.wikichip.org/wiki/flops"

# First match wins; the flag-only rules at the end catch every CPU the rows above do not name.
FMA_RULES: tuple[FmaRule, ...] = (
    FmaRule(
        "AMD Zen / Zen+ (128-bit FP units; AVX2 split in two)",
        "AuthenticAMD",
        (0x17,),
        2,
        128,
        _WIKICHIP_ZEN2,
        models=tuple(range(0x30)),
        never=("avx512f",),
    ),
    FmaRule(
        "AMD Zen 4 (AVX-512 double-pumped on 256-bit units)", "AuthenticAMD", (0x19,), 2, 256, _ZEN5, needs=("avx512f",)
    ),
    FmaRule(
        "AMD Zen 5 (full 512-bit FMA units; the mobile parts' 256-bit units are not told apart)",
        "AuthenticAMD",
        (0x1A,),
        2,
        512,
        _ZEN5,
        needs=("avx512f",),
    ),
    FmaRule(
        "Intel Cannon/Ice/Tiger/Rocket Lake client (one 512-bit FMA unit)",
        "GenuineIntel",
        (6,),
        1,
        512,
        _ICL_SP,
        models=(0x66, 0x7D, 0x7E, 0x8C, 0x8D, 0xA7, 0xA8),
        needs=("avx512f",),
        never=("amx_tile", "avx512_fp16"),
    ),
    FmaRule(
        "Intel Skylake-SP / Cascade Lake with one 512-bit FMA unit (Bronze, Silver, Gold 5xxx but 5122/5222)",
        "GenuineIntel",
        (6,),
        1,
        512,
        _SKX,
        models=(0x55,),
        model_name=r"Bronze|Silver|Gold 5(?!122|222)\d{3}",
        needs=("avx512f",),
    ),
    FmaRule(
        "Intel Xeon with AMX (Sapphire Rapids and later: two 512-bit FMA units)",
        "GenuineIntel",
        (6,),
        2,
        512,
        _SPR,
        needs=("avx512f", "amx_tile"),
    ),
    FmaRule(
        "Intel Xeon with AVX-512 (Skylake-SP and later: two 512-bit FMA units)",
        "GenuineIntel",
        (6,),
        2,
        512,
        _SKX,
        needs=("avx512f",),
    ),
)
# By flags alone, for a vendor or model no rule names.
FLAG_RULES: tuple[FmaRule, ...] = (
    FmaRule("AVX-512 (two 512-bit FMA units assumed: server cores)", "", (), 2, 512, _SKX, needs=("avx512f",)),
    FmaRule(
        "AVX2 + FMA (two 256-bit FMA units: Haswell and later, Zen 2 and 3)",
        "",
        (),
        2,
        256,
        _WIKICHIP_ZEN2,
        needs=("avx2", "fma"),
    ),
    FmaRule("AVX without FMA (one 256-bit add and one multiply unit)", "", (), 1, 256, _FLOPS, needs=("avx",)),
    FmaRule("SSE2 (one 128-bit add and one multiply unit)", "", (), 1, 128, _FLOPS, needs=("sse2",)),
)


@dataclass(frozen=True)
class CpuInfo:
    """What /proc/cpuinfo says of the CPU: vendor, family, model, name, flags and physical cores."""

    vendor: str
    family: int
    model: int
    model_name: str
    flags: frozenset[str]
    cores: int
    mhz: float = 0.0  # /proc/cpuinfo's "cpu MHz" of the first processor


def parse_cpuinfo(text: str) -> CpuInfo:
    """Read /proc/cpuinfo's text (x86 layout); cores are distinct (physical id, core id) pairs."""
    procs = [dict(_pairs(block)) for block in text.strip().split("\n\n") if block.strip()]
    if not procs:
        raise ValueError("no processor in /proc/cpuinfo")
    first = procs[0]
    cores = {(p.get("physical id", "0"), p.get("core id", str(i))) for i, p in enumerate(procs)}
    return CpuInfo(
        vendor=first.get("vendor_id", ""),
        family=int(first.get("cpu family", "0") or 0),
        model=int(first.get("model", "0") or 0),
        model_name=first.get("model name", ""),
        flags=frozenset(first.get("flags", "").split()),
        cores=len(cores),
        mhz=float(first.get("cpu MHz", "0") or 0),
    )


def _pairs(block: str) -> list[tuple[str, str]]:
    out = []
    for line in block.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out.append((key.strip(), value.strip()))
    return out


def fma_rule(cpu: CpuInfo) -> FmaRule | None:
    """The FMA units of this CPU: the first microarchitecture rule that matches, else the flags' rule."""
    for rule in FMA_RULES:
        if rule.matches(cpu):
            return rule
    return next((r for r in FLAG_RULES if all(f in cpu.flags for f in r.needs)), None)


def flops_per_cycle(cpu: CpuInfo, rule: FmaRule, math_mode: str) -> tuple[float, str] | None:
    """FLOPs per cycle and core in a math mode, and how: None for a mode a CPU has no units for (tf32)."""
    lanes = rule.bits // 32
    if "fma" in cpu.flags or "avx512f" in cpu.flags:
        fp32 = float(rule.units * lanes * 2)
        how = f"{rule.units} x {rule.bits}-bit FMA unit{'s' * (rule.units > 1)} x {lanes} lanes x 2 = {fp32:g}"
    else:  # one add and one multiply unit: one FLOP each per lane and cycle
        fp32 = float(2 * lanes)
        how = f"{rule.bits}-bit add + multiply units x {lanes} lanes = {fp32:g}"
    how += " fp32 FLOPs/cycle"
    if math_mode == "fp32":
        return fp32, how
    amx, dot = {"bf16": ("amx_bf16", "avx512_bf16"), "fp16": ("amx_fp16", "avx512_fp16")}.get(math_mode, ("", ""))
    if not amx:
        return None
    if amx in cpu.flags:
        return float(AMX_FLOPS_PER_CYCLE), f"AMX ({amx}) = {AMX_FLOPS_PER_CYCLE} {math_mode} FLOPs/cycle"
    if dot in cpu.flags:
        return 2 * fp32, f"{how}; {dot}: twice the fp32 rate = {2 * fp32:g} {math_mode} FLOPs/cycle"
    return fp32, f"{how}; no {math_mode} units: widened to fp32, {fp32:g} FLOPs/cycle"


def max_clock(cpu: CpuInfo, cpufreq_max: Path | None = None) -> tuple[float, str]:
    """(GHz, where it comes from): cpufreq's maximum, else the model name's clock, else cpuinfo's MHz."""
    try:
        khz = int((cpufreq_max or CPUFREQ_MAX).read_text().strip())
        return khz / 1e6, "cpufreq maximum (single-core boost)"
    except (OSError, ValueError):
        pass
    m = re.search(r"@\s*(\d+(?:\.\d+)?)\s*GHz", cpu.model_name)
    if m:
        return float(m.group(1)), "the model name's clock (the base clock; no cpufreq here, a boost may be higher)"
    if cpu.mhz > 0:
        return cpu.mhz / 1000, "/proc/cpuinfo's cpu MHz (no cpufreq here, e.g. a VM: the boost clock is unknown)"
    return 0.0, "no clock known"


@dataclass(frozen=True)
class CorePeak:
    """One core's peak in a math mode at the maximum clock, and the derivation in words."""

    tflops_per_core: float
    derivation: str
    source: str


def core_peak(cpu: CpuInfo, math_mode: str, cpufreq_max: Path | None = None) -> CorePeak | str:
    """One core's peak TFLOP/s in a math mode, or why there is none."""
    rule = fma_rule(cpu)
    if rule is None:
        return "peak unknown: no vector unit this table knows (no SSE2 flag)"
    per = flops_per_cycle(cpu, rule, math_mode)
    if per is None:
        return f"peak unknown: a CPU has no {math_mode} units"
    ghz, clock = max_clock(cpu, cpufreq_max)
    if ghz <= 0:
        return "peak unknown: no maximum clock (no cpufreq, model name or cpu MHz)"
    sources = rule.source + (f", {AMX_SOURCE}" if "AMX" in per[1] else "")
    return CorePeak(per[0] * ghz * 1e9 / 1e12, f"{rule.name}: {per[1]} x {ghz:g} GHz ({clock})", sources)


def read_cpu(path: Path | None = None) -> CpuInfo | str:
    """This machine's CpuInfo, or why it cannot be read."""
    path = path or CPUINFO
    try:
        return parse_cpuinfo(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError) as exc:
        return f"peak unknown: cannot read {path} ({exc})"


__all__ = [
    "AMX_FLOPS_PER_CYCLE",
    "FLAG_RULES",
    "FMA_RULES",
    "CorePeak",
    "CpuInfo",
    "FmaRule",
    "core_peak",
    "flops_per_cycle",
    "fma_rule",
    "max_clock",
    "parse_cpuinfo",
    "read_cpu",
]
