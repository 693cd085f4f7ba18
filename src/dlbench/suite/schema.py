"""The suite file: validated with pydantic; every error names the file, the line and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from dlbench.analysis.targets import target_problem
from dlbench.backends import UnknownFramework, get_info
from dlbench.cases import UnknownCase, get_case
from dlbench.parallel import Layout
from dlbench.spec import (
    PRECISIONS,
    PRESETS,
    STRATEGIES,
    SpecError,
    check_release,
    parse_count,
    parse_scale,
    parse_size,
    release_label,
    split_release,
)
from dlbench.suite import bounded

AXES: tuple[str, ...] = ("framework", "model", "batch", "precision", "compile", "data", "scale", "strategy")
BATCH_WORDS: tuple[str, ...] = ("min", "fixed", "max")
FRAMEWORK_WORDS: tuple[str, ...] = ("installed", "all")


class SuiteError(SpecError):
    """A suite that cannot be read or is invalid: one line, `file:line: key: problem`."""


def _framework(name: str) -> str:
    """A framework, maybe with its release (jax==0.10.1), as `run -f` takes it; or installed, or all."""
    if name in FRAMEWORK_WORDS:
        return name
    try:
        framework, release = split_release(name)
        get_info(framework)
    except (UnknownFramework, SpecError) as exc:
        raise ValueError(str(exc)) from None
    return release_label(framework, release)


def _release(value: object) -> str:
    """A release of a `versions:` list: text as pip spells it (a YAML number such as 2.0 is read as written)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"a release is text such as 0.10.1; got {value!r}")
    try:
        return check_release(str(value))
    except SpecError as exc:
        raise ValueError(str(exc)) from None


def _model(name: str) -> str:
    try:
        return get_case(name).name
    except UnknownCase as exc:
        raise ValueError(str(exc)) from None


def _batch(value: object) -> object:
    if isinstance(value, bool) or not ((isinstance(value, int) and value >= 1) or value in BATCH_WORDS):
        raise ValueError(f"a batch is a whole number >= 1, or one of {', '.join(BATCH_WORDS)}; got {value!r}")
    return value


def _scale(text: str) -> str:
    try:
        n, k = parse_scale(text)
    except SpecError as exc:
        raise ValueError(str(exc)) from None
    return f"{n}n{k}c"


def _strategy(name: str) -> str:
    if name not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {name!r}")
    return name


def _size(text: str) -> str:
    try:
        parse_size(text)
    except SpecError as exc:
        raise ValueError(str(exc)) from None
    return text


def _memory_limit(value: object) -> object:
    """One size for every model, or a size per model (keys are case names)."""
    if value is None or isinstance(value, str):
        return None if value is None else _size(value)
    if not isinstance(value, dict):
        raise ValueError(f"a memory limit is a size such as 8GiB, or a mapping model -> size; got {value!r}")
    return {_model(str(k)): _size(str(v)) for k, v in value.items()}


def _input_size(value: object) -> object:
    """One input size for every model, or a size per model (keys are case names): an architecture's smallest
    input differs (Inception v3 needs 75 pixels, ResNet 32)."""
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"an input size is a whole number >= 1; got {v!r} for {k}")
        out[_model(str(k))] = v
    return out


def _param_values(value: object) -> object:
    """A case parameter's values: `max` (searched), or one value or a list (whole numbers, or text like 3.2M)."""
    if value == "max":
        return value
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ValueError("a parameter lists at least one value, or max")
    out: list[int] = []
    for v in items:
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise ValueError(f"a parameter value is a whole number such as 3200000 or 3.2M, or max; got {v!r}")
        try:
            out.append(parse_count(str(v), "value"))
        except SpecError as exc:
            raise ValueError(str(exc).removeprefix("--param value: ")) from None
    if len(set(out)) != len(out):
        raise ValueError(f"a parameter lists a value twice: {items}")
    return out


Framework = Annotated[str, AfterValidator(_framework)]
Release = Annotated[str, BeforeValidator(_release)]
Model = Annotated[str, AfterValidator(_model)]
BatchValue = Annotated[int | str, BeforeValidator(_batch)]
Scale = Annotated[str, AfterValidator(_scale)]
Strategy = Annotated[str, AfterValidator(_strategy)]
Precision = Literal[PRECISIONS]  # type: ignore[valid-type]
Data = Literal["synthetic", "real"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _listify(value: object) -> object:
    return value if isinstance(value, list) else [value]


class Selector(_Strict):
    """Axis values that an exclusion matches (a point is excluded when it matches every key given)."""

    framework: list[Framework] | None = None
    model: list[Model] | None = None
    batch: list[BatchValue] | None = None
    precision: list[Precision] | None = None
    compile: list[bool] | None = None
    data: list[Data] | None = None
    scale: list[Scale] | None = None
    strategy: list[Strategy] | None = None
    layout: list[str] | None = None  # names of the suite's layouts (a suite with layouts only)

    _lists = field_validator(*AXES, "layout", mode="before")(
        classmethod(lambda cls, v: None if v is None else _listify(v))
    )

    @model_validator(mode="after")
    def _not_empty(self) -> Selector:
        if all(getattr(self, a) is None for a in (*AXES, "layout")):
            raise ValueError(f"an exclusion names at least one axis of {', '.join(AXES)}, or a layout")
        return self

    def matches(self, point: dict[str, object]) -> bool:
        """Whether a point (axis -> value, and its layout's name in a suite with layouts) has one of the listed
        values on every axis named here; a framework named without a release matches every release of it."""
        if self.layout is not None and point.get("layout") not in self.layout:
            return False
        return all(_axis_match(a, point[a], values) for a in AXES if (values := getattr(self, a)) is not None)


def _axis_match(axis: str, value: object, values: list[object]) -> bool:
    """Whether a point's value on an axis is one of the listed ones (jax lists every jax==X)."""
    return value in values or (axis == "framework" and str(value).partition("==")[0] in values)


_FIXED: tuple[int | str, ...] = ("fixed",)
_FP32: tuple[Precision, ...] = ("fp32",)
_SYNTHETIC: tuple[Data, ...] = ("synthetic",)


class Axes(_Strict):
    """The suite's axes; the points are their product, less the exclusions."""

    framework: list[Framework] = Field(default_factory=lambda: ["installed"], min_length=1)
    model: list[Model] = Field(min_length=1)
    batch: list[BatchValue] = Field(default_factory=lambda: list(_FIXED), min_length=1)
    precision: list[Precision] = Field(default_factory=lambda: list(_FP32), min_length=1)
    compile: list[bool] = Field(default_factory=lambda: [False], min_length=1)
    data: list[Data] = Field(default_factory=lambda: list(_SYNTHETIC), min_length=1)
    scale: list[Scale] = Field(default_factory=lambda: ["1n1c"], min_length=1)
    strategy: list[Strategy] = Field(default_factory=lambda: ["none"], min_length=1)
    # Releases per framework (#49): `versions: {jax: [0.10.1, 0.10.2]}` runs each jax point once per release, as
    # `framework: [jax==0.10.1, jax==0.10.2]` does.
    versions: dict[str, list[Release]] = Field(default_factory=dict)

    _lists = field_validator(*AXES, mode="before")(classmethod(lambda cls, v: _listify(v)))

    @model_validator(mode="after")
    def _unique(self) -> Axes:
        for a in AXES:
            values = getattr(self, a)
            if len(set(map(str, values))) != len(values):
                raise ValueError(f"axis {a} lists a value twice: {values}")
        for name, releases in self.versions.items():
            _framework(name)
            if "==" in name or name in FRAMEWORK_WORDS:
                raise ValueError(f"versions: a key is a framework's name (jax), not {name!r}")
            if not releases or len(set(releases)) != len(releases):
                raise ValueError(f"versions: {name} lists no release, or one twice: {releases}")
            if name not in self.framework and not {"installed", "all"} & set(self.framework):
                raise ValueError(f"versions: {name} is not on the framework axis ({', '.join(self.framework)})")
        return self


class ProtocolConfig(_Strict):
    """A preset, with optional overrides."""

    preset: str = "quick"
    warmup: int | None = Field(default=None, ge=0)
    steps: PositiveInt | None = None
    repeats: PositiveInt | None = None
    statistic: Literal["mean", "median"] | None = None

    @field_validator("preset")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in PRESETS:
            raise ValueError(f"unknown preset {v!r}; known: {', '.join(PRESETS)}")
        return v


class MaxBatchConfig(_Strict):
    """The max-batch search: a batch known to fit (lo), one known to fail (hi), and the probe protocol."""

    lo: PositiveInt = 1
    hi: PositiveInt = 1024
    warmup: int = Field(default=1, ge=0)
    steps: PositiveInt = 1

    @model_validator(mode="after")
    def _order(self) -> MaxBatchConfig:
        if self.hi <= self.lo:
            raise ValueError(f"hi ({self.hi}) must be greater than lo ({self.lo})")
        return self


class RealDataConfig(_Strict):
    """What `dlbench sweep` generates when the suite has real-data points and no --data-dir is given."""

    images: PositiveInt = 256
    classes: PositiveInt = 10
    text_samples: PositiveInt = 256
    seed: int = 0


class LayoutOptions(_Strict):
    """The suite's spelling of a point's parallel layout (dlbench.parallel.Layout): each key is a Layout field, as
    `dlbench run --tensor-parallel` is `tensor_parallel` (tests/unit/suite/test_suite_spelling.py checks that they
    are the same). A suite's `layout:` applies to every point; a named layout's own keys override it."""

    tensor_parallel: PositiveInt = 1
    pipeline_parallel: PositiveInt = 1
    micro_batches: PositiveInt = 1
    recompute: bool = False
    schedule: Literal["1f1b", "gpipe"] = "1f1b"
    fsdp: bool = False  # FSDP2 over the data-parallel ranks (llama cases, #35)
    context_parallel: PositiveInt = 1  # a sequence over this many ranks (#35; GPUs only)
    expert_parallel: PositiveInt = 1  # a MoE's experts over this many ranks (moe cases, #36)
    routing: Literal["learned", "balanced"] = "learned"  # balanced: forced round robin (#36)
    bucket_mb: PositiveInt | None = None  # DDP's gradient bucket size in MB (#22)

    def given(self) -> dict[str, object]:
        """The layout options this mapping gives (not those left at their default by omission)."""
        return {k: getattr(self, k) for k in self.model_fields_set if k in LayoutOptions.model_fields}

    def over(self, base: LayoutOptions) -> Layout:
        """The layout: these options where given, the others from `base` (the suite's `layout:`)."""
        values = {**{k: getattr(base, k) for k in LayoutOptions.model_fields}, **self.given()}
        return Layout(**values)


class LayoutEntry(LayoutOptions):
    """One named parallel layout of a suite (DLPerf's GPT cases): devices, batch per data-parallel replica, the
    layout options, and the case parameters it runs at. Each replaces the scale and batch axes for the points it
    makes."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    scale: Scale
    batch: PositiveInt
    params: dict[str, Annotated[int, BeforeValidator(lambda v: _param_values(v)[0])]] = Field(default_factory=dict)
    model: list[Model] | None = None  # the models of the axes it runs (default: every one; #48's mlperf suites)

    @model_validator(mode="after")
    def _fits(self) -> LayoutEntry:
        n, k = parse_scale(self.scale)
        split = Layout(
            tensor_parallel=self.tensor_parallel,
            pipeline_parallel=self.pipeline_parallel,
            micro_batches=self.micro_batches,
        )
        problem = split.problem(n * k, self.batch)
        if problem:
            raise ValueError(problem)
        return self


def _converge(value: object) -> object:
    """`converge: true` is the block with the cases' own budget and target; false or null: no convergence."""
    if value is True:
        return {}
    if value is False:
        return None
    return value


class ConvergeConfig(_Strict):
    """Every point of the suite trains learnable data to its case's target first and is judged (`run --converge`,
    docs/convergence.md): a step budget and a target loss (null: the case's own)."""

    steps: int | None = Field(default=None, strict=True)  # below 1: refused with the other bad values (_converge_ok)
    target: Annotated[float, Field(allow_inf_nan=False, strict=True)] | None = None  # a number: not true, not "0.5"
    runs: PositiveInt = 1  # runs per configuration, seeds seed .. seed + runs - 1, judged together (#44)
    reference: Literal["shipped", "local"] = "shipped"  # the shipped reference points, or runs measured here


MAX_NAME = 200
MAX_TITLE = 1000
MAX_TEXT = 20000
PRINTABLE = r"^[^\x00-\x1f\x7f-\x9f]*$"


class Suite(_Strict):
    """A benchmark matrix: axes, exclusions, and how every point is measured."""

    # Text a terminal prints: strict str (a YAML !!binary value is bytes, refused), no control characters (a
    # terminal would run its escape codes), and short enough to print in one line's time (rich folds a long word
    # in time that grows with the square of its length).
    name: str = Field(min_length=1, max_length=MAX_NAME, strict=True, pattern=PRINTABLE)
    title: str = Field(default="", max_length=MAX_TITLE, strict=True, pattern=PRINTABLE)
    description: str = Field(default="", max_length=MAX_TEXT, strict=True)
    source: str = Field(default="", max_length=MAX_TITLE, strict=True, pattern=PRINTABLE)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    protocol: ProtocolConfig = ProtocolConfig()
    timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1800.0
    memory_limit: Annotated[str | dict[str, str] | None, BeforeValidator(_memory_limit)] = None
    input_size: Annotated[PositiveInt | dict[str, int] | None, BeforeValidator(_input_size)] = None
    threads: PositiveInt | None = None
    loader_workers: int = Field(default=2, ge=0)
    channels_last: bool | list[str] = False  # true: every framework; a list: these frameworks; image cases only
    # auto: local on one device, the framework's engine (torchrun ...) on several; the sweep checks a name it gets
    launcher: str = Field(default="auto", max_length=MAX_NAME, strict=True, pattern=PRINTABLE)
    # Every measured point's emulated device budget on the CPU (run --memory-limit); memory_limit is the probes'.
    point_memory_limit: Annotated[str | None, BeforeValidator(lambda v: None if v is None else _size(str(v)))] = None
    sync_every_step: bool = False  # synchronise with the device after every measured step (run --sync-every-step)
    seed: int = Field(default=0, ge=0, strict=True)  # every point's seed (run --seed): initialisation, data order
    layout: LayoutOptions = LayoutOptions()  # every point's layout options (a named layout's own keys override)
    # true: points dlbench cannot run (dlbench.refusals) are named and skipped, as `sweep --skip-impossible` does,
    # for a matrix that crosses frameworks with layouts or strategies some of them lack; false: they refuse it.
    skip_impossible: bool = False

    @field_validator("channels_last")
    @classmethod
    def _channels_last(cls, v: bool | list[str]) -> bool | list[str]:
        if isinstance(v, list):
            for name in v:
                _framework(name)
        return v

    axes: Axes
    exclude: list[Selector] = Field(default_factory=list)
    max_batch: MaxBatchConfig = MaxBatchConfig()
    real_data: RealDataConfig = RealDataConfig()
    # Case parameters: each a list of values (every point of a model that declares it takes each), or max
    # (searched per configuration, as `--param NAME=max`); models that do not declare a parameter ignore it.
    params: dict[str, Annotated[list[int] | str, BeforeValidator(_param_values)]] = Field(default_factory=dict)
    # Named parallel layouts (#23): each point of the axes once per layout, at its scale, batch and parameters.
    layouts: list[LayoutEntry] = Field(default_factory=list)
    # Convergence (#34): every point trains to its case's target first, judged against a torch fp32 reference.
    converge: Annotated[ConvergeConfig | None, BeforeValidator(_converge)] = None

    @model_validator(mode="after")
    def _converge_ok(self) -> Suite:
        """A bad budget or target, or a model without a target, refuses the suite (skip_impossible or not): it is
        no cell a framework lacks but a mistake in the file."""
        if self.converge is None:
            return self
        if "real" in self.axes.data:
            raise ValueError("converge: convergence points train on learnable data; leave the data axis at synthetic")
        for model in self.axes.model:
            problem = target_problem(model, self.converge.steps, self.converge.target, options=False)
            if problem:
                raise ValueError(f"converge: {problem}")
        return self

    @model_validator(mode="after")
    def _layouts_apply(self) -> Suite:
        if self.layouts and (self.axes.scale != ["1n1c"] or self.axes.batch != list(_FIXED)):
            raise ValueError("layouts: each layout sets its scale and batch; leave the scale and batch axes out")
        names = [e.name for e in self.layouts]
        if len(set(names)) != len(names):
            raise ValueError(f"layouts: a name is given twice: {names}")
        for rule in self.exclude:
            unknown = [n for n in rule.layout or () if n not in names]
            if unknown:
                raise ValueError(
                    f"exclude: layout {unknown[0]!r} is none of the suite's layouts ({', '.join(names) or 'none'})"
                )
        for entry in self.layouts:
            outside = [m for m in entry.model or () if m not in self.axes.model]
            if outside:
                raise ValueError(f"layouts: {entry.name}: model {outside[0]!r} is not on the model axis")
            for case in (get_case(m) for m in entry.model or self.axes.model):
                try:
                    case.configured(entry.params)
                except SpecError as exc:
                    raise ValueError(f"layouts: {entry.name}: {exc}") from None
        return self

    @model_validator(mode="after")
    def _params_declared(self) -> Suite:
        searched = [n for n, v in self.params.items() if v == "max"]
        if len(searched) > 1:
            raise ValueError(f"params: only one parameter can be max; got {', '.join(searched)}")
        if searched and "max" in self.axes.batch:
            raise ValueError("params: a parameter search and a max batch cannot be in one suite")
        for name, values in self.params.items():
            cases = [get_case(m) for m in self.axes.model]
            declaring = [c for c in cases if any(p.name == name for p in c.params)]
            if not declaring:
                raise ValueError(f"params: no model of the suite declares {name}")
            for case in declaring:
                if isinstance(values, str):  # max
                    if next(p for p in case.params if p.name == name).search is None:
                        raise ValueError(f"params: {case.name}'s {name} cannot be searched (max)")
                    continue
                for v in values:
                    try:
                        case.configured({name: v})
                    except SpecError as exc:
                        raise ValueError(str(exc)) from None
        return self


Path_ = tuple[str | int, ...]


def _marks(node: yaml.Node, path: Path_, out: dict[Path_, int]) -> None:
    """Record the 1-based line of every key and item, by its path from the document root."""
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = (*path, key.value if isinstance(key, yaml.ScalarNode) else str(key.value))
            out[sub] = key.start_mark.line + 1
            _marks(value, sub, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _marks(item, (*path, i), out)


def _dotted(path: Path_) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def parse_suite(text: str, source: str) -> Suite:
    """Validate suite YAML text; SuiteError `source:line: key: problem` on the first problem."""
    try:
        node, data = bounded.load(text)
    except bounded.BoundedYamlError as exc:
        raise SuiteError(exc.where(source)) from None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 0
        raise SuiteError(f"{source}:{line}: not valid YAML: {exc.problem}") from None
    if not isinstance(data, dict) or node is None:
        raise SuiteError(f"{source}:1: a suite is a mapping with at least name and axes")
    marks: dict[Path_, int] = {}
    _marks(node, (), marks)
    try:
        return Suite.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if isinstance(p, (str, int)))
        known = loc
        while known and known not in marks:
            known = known[:-1]
        # keep the path up to the deepest part that is in the file (pydantic adds union branch names)
        shown = known if loc[len(known) :] and not err["type"] == "missing" else loc
        msg = str(err["msg"]).removeprefix("Value error, ")
        key, sep, rest = msg.partition(": ")
        if not loc and sep and (key,) in marks:  # a whole-suite check naming a top-level key: at that key's line
            known = shown = (key,)
            msg = rest
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "missing":
            msg = "required key is missing"
        raise SuiteError(f"{source}:{marks.get(known, 1)}: {_dotted(shown)}: {msg}") from None


def load_suite_file(path: Path) -> Suite:
    """Read and validate a suite file."""
    try:
        with Path(path).open("rb") as f:
            raw = f.read(bounded.MAX_BYTES + 1)
        text = bounded.decode(raw)
    except OSError as exc:
        raise SuiteError(f"cannot read suite {path}: {exc.strerror}") from None
    except bounded.BoundedYamlError as exc:
        raise SuiteError(exc.where(str(path))) from None
    return parse_suite(text, str(path))
