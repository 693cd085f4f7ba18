"""The peak FLOP/s of a point's device in its math mode: a GPU's datasheet figure, or a CPU's measured one.

- **GPUs**: ``gpu_peaks.yaml`` (versioned) gives each NVIDIA GPU's dense peak TFLOP/s per math mode (fp32, tf32,
  fp16, bf16) and its datasheet; the GPU is recognised from the NVML name recorded as ``device_model``.
- **CPUs**: no datasheet covers a CPU as it runs here (cores, clocks, vector units), so a short GEMM probe
  measures one: numpy float32 matrix products for a few hundred milliseconds, the best rate kept. It is cached per
  host under ``cache_dir("peaks")``, labelled ``measured`` and never mixed up with a datasheet figure. A probe
  taken while other jobs load the machine reads low, so the cache keeps the *best* of all probes and only rises:
  a process probes again while fewer than three were taken or the last is over an hour old, and at once when a
  point achieved more than the cached peak. It exists for fp32 only: numpy has no fast bf16 or fp16 GEMM, and
  the controller imports no framework to get one. No theoretical peak (cores x clock x FMA width) is derived:
  /proc/cpuinfo names neither the FMA units nor the clock under load, and a guessed datasheet is worse than
  none.
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

from dlbench.results.env import cpu_model
from dlbench.wire import cache_dir

TABLE_VERSION = 1
PROBE_VERSION = 2
MATH_MODES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16")
PeakKind = Literal["datasheet", "measured"]


@dataclass(frozen=True)
class GpuPeaks:
    """One GPU of the table: NVML name patterns, dense peak TFLOP/s per math mode (None: no such mode), source."""

    name: str
    nvml: tuple[str, ...]
    tflops: dict[str, float | None]
    source: str

    def matches(self, nvml_name: str) -> bool:
        """Whether an NVML device name is this GPU (a pattern matches the whole name, case-insensitive)."""
        return any(re.fullmatch(p, nvml_name.strip(), re.IGNORECASE) for p in self.nvml)


@dataclass(frozen=True)
class Peak:
    """A device's peak in one math mode: a datasheet figure or a measured one, and where it comes from."""

    tflops: float
    math_mode: str
    kind: PeakKind
    device: str
    source: str

    @property
    def label(self) -> str:
        """'989.5 TFLOP/s bf16 (datasheet, H100 SXM5)' or '0.21 TFLOP/s fp32 (measured, ...)'."""
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
        out.append(GpuPeaks(name=str(g["name"]), nvml=tuple(str(p) for p in g["nvml"]), tflops=tflops,
                            source=str(g["source"])))
    return tuple(out)


@functools.cache
def gpu_table() -> tuple[GpuPeaks, ...]:
    """Every GPU of the packaged data file."""
    import yaml  # type: ignore[import-untyped]  # read with the table, not with every command (#25)

    text = resources.files("dlbench.results").joinpath("gpu_peaks.yaml").read_text(encoding="utf-8")
    return _parse_table(yaml.safe_load(text))


def find_gpu(nvml_name: str) -> GpuPeaks | None:
    """The table's entry for an NVML device name, None when the GPU is not in it."""
    return next((g for g in gpu_table() if g.matches(nvml_name)), None)


def gpu_peak(nvml_name: str, math_mode: str) -> PeakLookup:
    """The datasheet peak of a GPU in a math mode, or why there is none."""
    g = find_gpu(nvml_name)
    if g is None:
        return PeakLookup(None, f"peak unknown: {nvml_name or 'an unnamed GPU'} is not in gpu_peaks.yaml")
    value = g.tflops.get(math_mode)
    if value is None:
        return PeakLookup(None, f"peak unknown: the {g.name} datasheet has no {math_mode} figure")
    return PeakLookup(Peak(value, math_mode, "datasheet", g.name, g.source))


# ------------------------------------------------------------------------------------------- CPU probe

PROBE_DTYPES: dict[str, str] = {"fp32": "float32"}  # math mode -> numpy dtype the probe multiplies in


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
    """The best rate a math mode's probe has reached on this host, over how many probes, and when it was last run."""

    tflops: float
    probes: int
    last: float
    since: float
    load: float  # the 1-minute load average while the best probe ran

    def source(self, dtype: str) -> str:
        day = time.strftime("%Y-%m-%d", time.localtime(self.since))
        return (f"numpy {dtype} 1024^3 matmul, best of {self.probes} probe{'s' * (self.probes != 1)} since {day} "
                f"(load {self.load:.1f} then), {os.cpu_count() or 0} logical CPUs; a lower bound that only rises")


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
    """Probe once more and keep the best rate ever seen: a probe under load can only fail to raise the peak."""
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
_raised: set[tuple[str, str]] = set()  # modes this process already probed again because a point beat the peak


def cpu_peak_here(cpu_model: str, math_mode: str, at_least: float = 0.0) -> PeakLookup:
    """This host's measured peak in a math mode: the best of the probes cached for it, and a new probe while
    fewer than MIN_PROBES were taken or the last is over an hour old (once per process). ``at_least``: an
    achieved rate per device; a cached peak below it is stale (measured under load), so probe once more."""
    dtype = PROBE_DTYPES.get(math_mode)
    if dtype is None:
        return PeakLookup(None, f"peak unknown: no {math_mode} GEMM probe on a CPU (numpy has none; fp32 only)")
    key, path = (cpu_model, math_mode), _probe_path(socket.gethostname())
    got = _seen.get(key)
    if got is None:
        got = _read_probe(path, cpu_model).get(math_mode)
        if got is None or got.probes < MIN_PROBES or time.time() - got.last > REPROBE_AFTER_S:
            got = _probe_into(path, cpu_model, math_mode)
    if at_least > got.tflops and key not in _raised:
        _raised.add(key)
        got = _probe_into(path, cpu_model, math_mode)
    _seen[key] = got
    return PeakLookup(Peak(got.tflops, math_mode, "measured", cpu_model, got.source(dtype)))


def forget_probes() -> None:
    """Drop what this process remembers of the probes (tests; the cache on disk stays)."""
    _seen.clear()
    _raised.clear()


def peak_for(device: str, device_model: str, math_mode: str, hostname: str = "",
             achieved_per_device: float = 0.0) -> PeakLookup:
    """The peak of a point's device in its math mode: a GPU from the table, this host's CPU by probe; a CPU
    point from another host or CPU has no measured peak here. A CPU point that achieved more than the cached
    peak (``achieved_per_device``, TFLOP/s) has the probe run once more (see cpu_peak_here)."""
    if device == "cuda":
        return gpu_peak(device_model, math_mode)
    if hostname and hostname != socket.gethostname():
        return PeakLookup(None, f"peak unknown: the CPU peak is measured per host, and {hostname} is not this one")
    here = cpu_model()
    if device_model and device_model != here:
        return PeakLookup(None, f"peak unknown: the CPU peak is measured here, on {here}, not on {device_model}")
    return cpu_peak_here(here, math_mode, achieved_per_device)


__all__ = ["MATH_MODES", "TABLE_VERSION", "GpuPeaks", "Peak", "PeakKind", "PeakLookup", "cpu_peak_here", "find_gpu",
           "forget_probes", "gpu_peak", "gpu_table", "peak_for", "probe_gemm"]
