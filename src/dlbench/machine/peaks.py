"""The peak FLOP/s of a point's device in its math mode: a GPU's datasheet figure, or a CPU's from its instruction set.

- **GPUs**: ``gpu_peaks.yaml`` (versioned) gives each NVIDIA GPU's dense peak TFLOP/s per math mode (fp32, tf32,
  fp16, bf16) and its datasheet; the GPU is recognised from the NVML name recorded as ``device_model``.
- **CPUs**: physical cores x maximum clock x FLOPs per cycle of the cores' FMA units (AVX2, AVX-512, AMX), read
  from /proc/cpuinfo and cpufreq (machine/cpu_peak.py, its per-microarchitecture table cites its sources),
  labelled ``instruction set``. A point's peak counts the cores it was given (its threads, at most the physical
  cores), split between its ranks. A short numpy float32 GEMM probe, cached per host under ``cache_dir("peaks")``
  (the best of several probes, so a probe under load cannot lower it), is kept beside it as what is
  *achievable* here: never the peak, and never what an MFU divides by.
"""

from __future__ import annotations

import functools
import json
import os
import re
import socket
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from dlbench.machine.cpu_peak import CpuInfo, core_peak, read_cpu
from dlbench.machine.env import cpu_model
from dlbench.paths import cache_dir

TABLE_VERSION = 1
PROBE_VERSION = 2
MATH_MODES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")
PeakKind = Literal["datasheet", "instruction set"]


@dataclass(frozen=True)
class GpuPeaks:
    """One GPU of the table: NVML name patterns, dense peak TFLOP/s per math mode (None: no such mode), source."""

    name: str
    nvml: tuple[str, ...]
    tflops: dict[str, float | None]
    source: str
    mig_slices: int | None = None  # the compute slices of a MIG-capable card (7 on A100/H100/H200), else None

    def matches(self, nvml_name: str) -> bool:
        """Whether an NVML device name is this GPU (a pattern matches the whole name, case-insensitive)."""
        return any(re.fullmatch(p, nvml_name.strip(), re.IGNORECASE) for p in self.nvml)


@dataclass(frozen=True)
class Peak:
    """A device's peak in one math mode: a datasheet figure or an instruction-set one, and where it comes from."""

    tflops: float
    math_mode: str
    kind: PeakKind
    device: str
    source: str

    @property
    def label(self) -> str:
        """'989.5 TFLOP/s bf16 (datasheet, H100 SXM5)' or '0.333 TFLOP/s fp32 (instruction set, ... x 2 cores)'."""
        return f"{self.tflops:,.4g} TFLOP/s {self.math_mode} ({self.kind}, {self.device})"


@dataclass(frozen=True)
class PeakLookup:
    """The peak found for a point, or None and the reason there is none ('peak unknown: ...')."""

    peak: Peak | None
    reason: str = ""


def _parse_table(raw: object) -> tuple[GpuPeaks, ...]:
    if not isinstance(raw, dict) or raw.get("version") != TABLE_VERSION:
        got = raw.get("version") if isinstance(raw, dict) else type(raw).__name__
        raise ValueError(f"gpu_peaks.yaml: version {TABLE_VERSION} expected, got {got!r}")
    out = []
    for g in raw["gpus"]:
        tflops = {m: (None if g.get(m) is None else float(g[m])) for m in MATH_MODES}
        slices = g.get("mig_slices")
        out.append(
            GpuPeaks(
                name=str(g["name"]),
                nvml=tuple(str(p) for p in g["nvml"]),
                tflops=tflops,
                source=str(g["source"]),
                mig_slices=None if slices is None else int(slices),
            )
        )
    return tuple(out)


@functools.cache
def gpu_table() -> tuple[GpuPeaks, ...]:
    """Every GPU of the packaged data file."""
    import yaml  # read with the table, not with every command (#25)

    text = resources.files("dlbench.machine").joinpath("gpu_peaks.yaml").read_text(encoding="utf-8")
    return _parse_table(yaml.safe_load(text))


def find_gpu(nvml_name: str) -> GpuPeaks | None:
    """The table's entry for an NVML device name, None when the GPU is not in it."""
    return next((g for g in gpu_table() if g.matches(nvml_name)), None)


# A MIG slice's device name: the card's, then " MIG " and the profile, e.g. "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
# (a GPU instance of 1 compute slice and 10 GB) or "... MIG 1c.3g.40gb" (a compute instance of 1 slice inside one
# of 3). The slices it computes on are the leading number.
_MIG_NAME = re.compile(
    r"(?P<card>.+?)\s+MIG\s+(?P<profile>(?:(?P<c>\d+)c\.)?(?P<g>\d+)g\.\d+gb(?:\+\w+)?)", re.IGNORECASE
)


def gpu_peak(nvml_name: str, math_mode: str, mig: str = "") -> PeakLookup:
    """The datasheet peak of a GPU in a math mode, or why there is none. A MIG slice (named by its profile) gets
    its compute slices' share of its card's peak; a GPU whose MIG mode is on (`mig`, NVML's 'on' recorded as
    gpu_mig) under a name without a profile has no peak: the slice it ran on is not known, and the whole card's
    peak would be up to 7 times too high."""
    slice_ = _MIG_NAME.fullmatch(nvml_name.strip())
    g = find_gpu(slice_.group("card") if slice_ else nvml_name)
    if g is None:
        return PeakLookup(None, f"peak unknown: {nvml_name or 'an unnamed GPU'} is not in gpu_peaks.yaml")
    value = g.tflops.get(math_mode)
    if value is None:
        return PeakLookup(None, f"peak unknown: the {g.name} datasheet has no {math_mode} figure")
    if slice_ is None:
        if mig.strip().lower().startswith("on"):
            return PeakLookup(
                None,
                f"peak unknown: MIG is on for this {g.name}, and the point does not say which "
                "slice it ran on (run it with CUDA_VISIBLE_DEVICES=MIG-<uuid>)",
            )
        return PeakLookup(Peak(value, math_mode, "datasheet", g.name, g.source))
    used = int(slice_.group("c") or slice_.group("g"))
    if not g.mig_slices or used > g.mig_slices:
        return PeakLookup(
            None, f"peak unknown: gpu_peaks.yaml has no MIG slices for the {g.name} ({slice_.group('profile')})"
        )
    device = f"{g.name} MIG {slice_.group('profile')}, {used}/{g.mig_slices} of its compute"
    return PeakLookup(Peak(value * used / g.mig_slices, math_mode, "datasheet", device, g.source))


# ------------------------------------------------------------------------------------------- CPU


def cpu_peak(math_mode: str, cores: float, cpu: CpuInfo | str | None = None) -> PeakLookup:
    """The instruction-set peak of `cores` of this host's CPU (or of `cpu`) in a math mode, or why there is none."""
    info = read_cpu() if cpu is None else cpu
    if isinstance(info, str):
        return PeakLookup(None, info)
    per = core_peak(info, math_mode)
    if isinstance(per, str):
        return PeakLookup(None, per)
    used = min(cores, info.cores) if cores > 0 else info.cores
    name = info.model_name or cpu_model()
    return PeakLookup(
        Peak(
            per.tflops_per_core * used,
            math_mode,
            "instruction set",
            f"{name} x {used:g} cores",
            f"{used:g} physical cores x {per.derivation}; sources: {per.source}",
        )
    )


PROBE_DTYPES: dict[str, str] = {"fp32": "float32"}  # math mode -> numpy dtype the achievable probe multiplies in


def probe_gemm(dtype: str = "float32", n: int = 1024, budget_s: float = 0.3) -> float:
    """Best TFLOP/s of n x n x n numpy matrix products over about budget_s (one warm-up product first)."""
    import numpy as np  # only the probe needs it

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(dtype) for _ in range(2))
    out = np.empty((n, n), dtype)
    np.matmul(a, b, out=out)
    best, start = 0.0, time.perf_counter()
    while True:
        t0 = time.perf_counter()
        np.matmul(a, b, out=out)
        t = time.perf_counter() - t0
        best = max(best, 2.0 * n**3 / t / 1e12)
        if t0 + t - start >= budget_s:
            return best


def _probe_path(host: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", host) or "host"
    return cache_dir("peaks") / f"cpu-{safe}.json"


@dataclass(frozen=True)
class Probed:
    """The best rate a math mode's GEMM probe has reached on this host, over how many probes, and when."""

    tflops: float
    probes: int
    last: float
    since: float
    load: float  # the 1-minute load average while the best probe ran

    def source(self, dtype: str) -> str:
        """How the achievable figure was measured, in words."""
        day = time.strftime("%Y-%m-%d", time.localtime(self.since))
        return (
            f"numpy {dtype} 1024^3 matmul on all {os.cpu_count() or 0} logical CPUs, best of {self.probes} "
            f"probe{'s' * (self.probes != 1)} since {day} (load {self.load:.1f} then)"
        )


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def _read_probe(path: Path, cpu: str) -> dict[str, Probed]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict) or raw.get("version") != PROBE_VERSION or raw.get("cpu_model") != cpu:
        return {}  # version 1 kept a single probe, possibly taken under load: measured again
    try:
        return {k: Probed(**v) for k, v in raw.get("modes", {}).items()}
    except TypeError:
        return {}


def _write_probe(path: Path, cpu: str, modes: dict[str, Probed]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    doc = {"version": PROBE_VERSION, "cpu_model": cpu, "modes": {k: vars(v) for k, v in modes.items()}}
    tmp.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def _probe_into(path: Path, cpu: str, math_mode: str) -> Probed:
    """Probe once more and keep the best rate ever seen: a probe under load can only fail to raise it."""
    rate, load, now = probe_gemm(PROBE_DTYPES[math_mode]), _load(), time.time()
    modes = _read_probe(path, cpu)  # read again: another process may have probed meanwhile
    old = modes.get(math_mode)
    if old is None:
        best = Probed(rate, 1, now, now, load)
    elif rate > old.tflops:
        best = Probed(rate, old.probes + 1, now, old.since, load)
    else:
        best = Probed(old.tflops, old.probes + 1, now, old.since, old.load)
    modes[math_mode] = best
    try:
        _write_probe(path, cpu, modes)
    except OSError:
        pass  # an unwritable cache only means probing again next time
    return best


MIN_PROBES = 3  # probes (one per process) before the cached best is trusted without probing again
REPROBE_AFTER_S = 3600.0  # after that, one more probe per process at most this often
_seen: dict[tuple[str, str], Probed] = {}  # what this process probed or read, by (cpu model, math mode)


@dataclass(frozen=True)
class Achievable:
    """What a numpy GEMM reaches on this host in a math mode: shown beside the peak, never as the peak."""

    tflops: float
    source: str


def cpu_achievable(cpu_model: str, math_mode: str) -> Achievable | None:
    """This host's best GEMM probe in a math mode (probing while fewer than MIN_PROBES were taken or the last is
    over an hour old, once per process); None for a mode numpy has no fast GEMM in (fp32 only)."""
    dtype = PROBE_DTYPES.get(math_mode)
    if dtype is None:
        return None
    key, path = (cpu_model, math_mode), _probe_path(socket.gethostname())
    got = _seen.get(key)
    if got is None:
        got = _read_probe(path, cpu_model).get(math_mode)
        if got is None or got.probes < MIN_PROBES or time.time() - got.last > REPROBE_AFTER_S:
            got = _probe_into(path, cpu_model, math_mode)
    _seen[key] = got
    return Achievable(got.tflops, got.source(dtype))


def forget_probes() -> None:
    """Drop what this process remembers of the probes (tests; the cache on disk stays)."""
    _seen.clear()


def peak_for(
    device: str, device_model: str, math_mode: str, hostname: str = "", cores: float = 0.0, mig: str = ""
) -> PeakLookup:
    """The peak of a point's device in its math mode: a GPU from the table (a MIG slice's share of it, `mig` being
    the recorded MIG mode), this host's CPU from its instruction set (`cores`: the physical cores one device of the
    point was given, 0 for all); a CPU point from another host or CPU has no peak here (its flags and clock were
    not recorded)."""
    if device == "cuda":
        return gpu_peak(device_model, math_mode, mig)
    if hostname and hostname != socket.gethostname():
        return PeakLookup(
            None, f"peak unknown: the CPU peak is read from this host's CPU, and {hostname} is not this one"
        )
    here = cpu_model()
    if device_model and device_model != here:
        return PeakLookup(None, f"peak unknown: the CPU peak is read here, on {here}, not on {device_model}")
    return cpu_peak(math_mode, cores)


__all__ = [
    "MATH_MODES",
    "TABLE_VERSION",
    "Achievable",
    "GpuPeaks",
    "Peak",
    "PeakKind",
    "PeakLookup",
    "cpu_achievable",
    "cpu_peak",
    "find_gpu",
    "forget_probes",
    "gpu_peak",
    "gpu_table",
    "peak_for",
    "probe_gemm",
]
