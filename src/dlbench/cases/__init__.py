"""Framework-free case definitions: *what* is trained. Registered explicitly by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from dlbench.cases.arch import Arch, DitConfig, Loss
from dlbench.spec import SpecError

Task = Literal["image_classification", "bert_pretraining", "causal_lm", "ctr", "face_recognition", "text_to_image"]


@dataclass(frozen=True)
class ImageInput:
    """An image batch: NCHW shape without the batch, and the number of classes."""

    size: int
    channels: int = 3
    classes: int = 1000


@dataclass(frozen=True)
class TextInput:
    """A text batch at `seq_len` tokens: BERT's (token ids, segments, mask, masked-LM and NSP labels), or a causal
    decoder's (token ids and next-token labels; the masked-LM fields are unused)."""

    seq_len: int = 128
    vocab: int = 30522
    mask_prob: float = 0.15
    max_predictions: int = 20  # masked positions the MLM head predicts per sequence (gathered first)


@dataclass(frozen=True)
class CtrInput:
    """A click-through batch, Criteo-shaped: `dense` float features, `categorical` ids for the deep part and
    `wide` ids for the wide part, each drawn from the model's vocabulary, and a 0/1 label."""

    dense: int = 13
    categorical: int = 26
    wide: int = 2


@dataclass(frozen=True)
class LatentInput:
    """A text-to-image diffusion batch as MLPerf's FLUX.1 benchmark feeds its transformer: the frozen VAE's image
    latents (`channels` x `side` x `side`), the frozen T5 encoder's `text_tokens` embeddings `text_dim` wide and
    the frozen CLIP encoder's pooled embedding `pooled_dim` wide."""

    channels: int = 16
    side: int = 32
    text_tokens: int = 256
    text_dim: int = 4096
    pooled_dim: int = 768


@dataclass(frozen=True)
class Optimizer:
    """The seeds' optimizer and its hyper-parameters.

    With ``lr_ref_batch`` set, the learning rate is the seeds' value at that global batch and shrinks
    linearly below it (Goyal et al.'s rule), so that the small batches of a CPU run stay finite; at and
    above it, the seeds' value is used unchanged.
    """

    name: Literal["sgd", "adam", "adamw", "adagrad"]
    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    lr_ref_batch: int | None = None
    eps: float | None = None  # Adagrad's and Adam's epsilon where the recipe names one; None: the framework's default

    def lr_for(self, global_batch: int) -> float:
        """The learning rate every backend uses at this global batch."""
        if self.lr_ref_batch is None or global_batch >= self.lr_ref_batch:
            return self.lr
        return self.lr * global_batch / self.lr_ref_batch


@dataclass(frozen=True)
class CaseParam:
    """An integer parameter a case declares (vocabulary size, number of classes ...), with its default and,
    where only some values mean something, those values. `search` (lo, hi, unit), where set, lets
    `--param NAME=max` search it: lo is assumed to fit, hi to fail, and values are multiples of unit."""

    name: str
    default: int
    help: str = ""
    choices: tuple[int, ...] = ()
    search: tuple[int, int, int] | None = None
    minimum: int = 1
    splits_model: bool = False  # a nonzero value splits the model across the devices (model parallelism)


@dataclass(frozen=True)
class Case:
    """One model the seeds train: its input, architecture table, loss, optimizer and reference trainable-parameter
    count, and the integer parameters it declares (set per point with --param NAME=VALUE). `derive`, where set,
    makes the configured case's architecture and parameter count follow its parameters (GPT's size)."""

    name: str
    title: str
    task: Task
    input: ImageInput | TextInput | CtrInput | LatentInput
    optimizer: Optimizer
    param_count: int
    batch_fixed: int
    batch_cpu: int
    arch: Arch
    loss: Loss = field(default_factory=Loss)
    notes: str = ""
    aliases: tuple[str, ...] = field(default_factory=tuple)
    params: tuple[CaseParam, ...] = ()
    values: tuple[tuple[str, int], ...] = ()
    derive: Callable[[Case], Case] | None = field(default=None, compare=False, repr=False)

    def param(self, name: str) -> int:
        """The value of a declared parameter: the point's, else its default."""
        declared = {p.name: p.default for p in self.params}
        if name not in declared:
            raise KeyError(name)
        return dict(self.values).get(name, declared[name])

    def configured(self, values: dict[str, int]) -> Case:
        """This case with the point's parameter values; a name it does not declare is a SpecError."""
        if not values:
            return self
        known = {p.name for p in self.params}
        unknown = sorted(set(values) - known)
        if unknown:
            have = f"it declares {', '.join(sorted(known))}" if known else "it declares none"
            raise SpecError(f"case {self.name} has no parameter {', '.join(unknown)}: {have}")
        for p in self.params:
            if p.name in values and not p.choices and values[p.name] < p.minimum:
                raise SpecError(f"case {self.name}: {p.name} must be at least {p.minimum}; got {values[p.name]}")
            if p.choices and p.name in values and values[p.name] not in p.choices:
                raise SpecError(
                    f"case {self.name}: {p.name} must be one of {', '.join(map(str, p.choices))}; got {values[p.name]}"
                )
        out = dataclasses.replace(self, values=tuple(sorted(values.items())))
        return out.derive(out) if out.derive is not None else out

    @property
    def splits_model(self) -> bool:
        """Whether the point's parameters split the model across its devices (face's model parallel and Partial
        FC): at a maximum searched that way, one device holds less than the point and is no baseline."""
        return any(p.splits_model and self.param(p.name) != 0 for p in self.params)

    def check_input_size(self, size: int | None) -> None:
        """A SpecError when `size` (--input-size) is below the smallest input the architecture takes
        (cases/inputs.py)."""
        from dlbench.cases.inputs import min_input_size

        least = min_input_size(self)
        if size is not None and size < least:
            raise SpecError(
                f"--input-size {size} is too small for {self.name}: its architecture takes at least "
                f"{least} ({_input_unit(self.input)})"
            )
        own = self.input.size if isinstance(self.input, ImageInput) else getattr(self.input, "seq_len", None)
        own = self.input.side if isinstance(self.input, LatentInput) else own
        if size is not None and own is not None and size > own:  # it shrinks the input: larger is a typo
            raise SpecError(
                f"--input-size {size} is larger than {self.name}'s own input ({own}): it only shrinks "
                "the image side or sequence length"
            )
        if isinstance(self.arch, DitConfig) and size is not None and size % self.arch.patch:
            raise SpecError(
                f"--input-size {size}: {self.name}'s latent side must be a multiple of the patch ({self.arch.patch})"
            )

    def train_flops_per_sample(self, input_size: int | None = None) -> float:
        """Training FLOPs of one sample at the case's input or `input_size` (cases/flops.py)."""
        from dlbench.cases.flops import train_flops_per_sample

        return train_flops_per_sample(self, input_size)


def _input_unit(inp: ImageInput | TextInput | CtrInput | LatentInput) -> str:
    """What --input-size counts for this input."""
    if isinstance(inp, ImageInput):
        return "image side"
    return "latent side" if isinstance(inp, LatentInput) else "tokens"


class UnknownCase(KeyError):
    """No case of that name."""

    def __str__(self) -> str:
        return f"unknown model {self.args[0]!r}; known: {', '.join(CASES)}"


CASES: dict[str, Case] = {}


def register(case: Case) -> Case:
    """Add a case to the registry under its name and aliases."""
    if case.name in CASES:
        raise ValueError(f"case {case.name!r} registered twice")
    CASES[case.name] = case
    return case


def get_case(name: str) -> Case:
    """The case registered under name (or one of its aliases)."""
    if name in CASES:
        return CASES[name]
    for case in CASES.values():
        if name in case.aliases:
            return case
    raise UnknownCase(name)


def all_cases() -> list[Case]:
    """Every registered case, in registration order."""
    return list(CASES.values())


# Explicit registration: each module calls register() once.
from dlbench.cases import (  # noqa: F401
    alexnet,
    bert_base,
    dit,
    dlrm,
    face,
    gpt,
    inception_v3,
    llama,
    moe,
    moe_mlperf,
    resnet50,
    resnet152,
    vgg16,
    wide_deep,
)

__all__ = [
    "CASES",
    "Case",
    "CaseParam",
    "CtrInput",
    "ImageInput",
    "LatentInput",
    "Optimizer",
    "TextInput",
    "UnknownCase",
    "all_cases",
    "get_case",
    "register",
]
