"""Reference convergence points (RCPs, #44), shipped as data: per case and configuration, the steps to target of
at least MIN_RUNS reference runs, with the hardware, the framework and dlbench versions and the data generator's
version they were measured under and the command that measured them (`dlbench reference measure-convergence`).

A point is keyed by case (its parameters and input size), batch, precision class, data generator version and
target loss: `--converge` judges a candidate against the shipped point of its key (analysis/references.py). The
framework version is recorded, not keyed: a verdict against a point measured under another version says so.
One YAML file per point under `rcp/`; nothing here imports a framework.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

SCHEMA_VERSION = 1
MIN_RUNS = 5  # a shipped point holds at least this many runs (MLPerf's RCPs hold more)
PrecisionClass = Literal["fp32", "16-bit", "8-bit"]
PRECISION_CLASSES: dict[str, PrecisionClass] = {
    "fp32": "fp32",
    "tf32": "fp32",
    "amp": "16-bit",
    "bf16": "16-bit",
    "fp16": "16-bit",
    "fp8": "8-bit",
}


class RcpError(ValueError):
    """A reference convergence point file that does not follow the schema."""


def precision_class(precision: str) -> PrecisionClass:
    """The class a precision's reference points are keyed by: fp32 (fp32, tf32), 16-bit, 8-bit."""
    return PRECISION_CLASSES[precision]


class RcpRun(BaseModel):
    """One reference run: its seed, steps to target (None: not reached within the budget), wall time to target,
    and the independent evaluation's held-out loss (and AUC) of its weights at the target."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int
    steps: int | None
    wall_s: float | None = None
    eval_loss: float | None = None
    eval_auc: float | None = None


class RcpKey(BaseModel):
    """What a candidate must share with a reference point to be judged against it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    params: tuple[tuple[str, int], ...] = ()
    input_size: int | None = None
    batch: int
    precision_class: PrecisionClass
    data_version: int
    target_loss: float

    def describe(self) -> str:
        """The configuration in words: 'gpt hidden=128 ... b32 fp32'."""
        params = " ".join(f"{k}={v}" for k, v in self.params)
        size = f" {self.input_size}px" if self.input_size else ""
        return f"{self.model}{' ' + params if params else ''}{size} b{self.batch} {self.precision_class}"


class Measured(BaseModel):
    """Who measured a point, on what, with which versions, and the command that did it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    by: str
    date: str
    hardware: str
    device: Literal["cpu", "cuda"]
    framework: str
    framework_version: str
    dlbench_version: str
    threads: int | None = None
    load: str = ""
    command: str


class Rcp(BaseModel):
    """One shipped reference convergence point: its key, its target, who measured it, and its runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    key: RcpKey
    every: int = Field(ge=1)
    budget: int = Field(ge=1)
    target_auc: float | None = None
    measured: Measured
    runs: tuple[RcpRun, ...]
    notes: str = ""
    file: str = ""

    @field_validator("schema_version")
    @classmethod
    def _version(cls, v: int) -> int:
        if v != SCHEMA_VERSION:
            raise ValueError(f"schema_version must be {SCHEMA_VERSION}, got {v}")
        return v

    @property
    def steps(self) -> tuple[int, ...]:
        """Steps to target of the runs that reached it."""
        return tuple(r.steps for r in self.runs if r.steps is not None)

    @property
    def mean(self) -> float:
        """Mean steps to target over the runs that reached it."""
        return statistics.fmean(self.steps)

    @property
    def spread(self) -> float:
        """Sample standard deviation of the steps to target."""
        return statistics.stdev(self.steps) if len(self.steps) > 1 else 0.0

    def to_yaml(self) -> str:
        """The file's text (the `file` name left out)."""
        raw = self.model_dump(mode="json", exclude={"file"})
        raw["key"]["params"] = dict(self.key.params)
        import yaml  # here, not at import: a point's controller imports this module (start-up)

        return yaml.safe_dump(raw, sort_keys=False, width=110)


def parse(text: str, file: str) -> Rcp:
    """One point from its YAML text; RcpError (naming the file) when it does not follow the schema or holds fewer
    than MIN_RUNS runs that reached the target."""
    import yaml

    try:
        raw = yaml.safe_load(text)
        if not isinstance(raw, dict):
            raise RcpError(f"{file}: top level must be a mapping")
        key = raw.get("key")
        if isinstance(key, dict) and isinstance(key.get("params"), Mapping):
            key["params"] = tuple(sorted(key["params"].items()))
        rcp = Rcp.model_validate({**raw, "file": file})
    except (yaml.YAMLError, ValidationError) as exc:
        raise RcpError(f"{file}: {str(exc).splitlines()[0] if isinstance(exc, yaml.YAMLError) else exc}") from None
    if len(rcp.steps) < MIN_RUNS:
        raise RcpError(f"{file}: {len(rcp.steps)} run(s) reached the target; a shipped point needs {MIN_RUNS}")
    return rcp


@functools.lru_cache(maxsize=1)
def shipped() -> tuple[Rcp, ...]:
    """Every point shipped with dlbench (reference/rcp/*.yaml), sorted by file name."""
    folder = resources.files("dlbench.reference").joinpath("rcp")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".yaml")), key=lambda f: f.name)
    return tuple(parse(f.read_text(encoding="utf-8"), f.name) for f in files)


def load_folder(path: Path) -> tuple[Rcp, ...]:
    """Every point in a folder of RCP files (tests, and points measured but not shipped)."""
    return tuple(parse(f.read_text(encoding="utf-8"), f.name) for f in sorted(path.glob("*.yaml")))


def file_name(key: RcpKey) -> str:
    """The file a point is kept in: model, parameters, input size, batch, precision class, data version."""
    params = "-".join(f"{k}{v}" for k, v in key.params)
    size = f"-{key.input_size}px" if key.input_size else ""
    klass = key.precision_class.replace("-", "")
    return f"{key.model}{'-' + params if params else ''}{size}-b{key.batch}-{klass}-d{key.data_version}.yaml"
