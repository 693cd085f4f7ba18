"""Wide & Deep, DLPerf's special case (OneFlow-WDL against HugeCTR): latency per iteration and memory as the
embedding vocabulary grows. Framework-free.

DLPerf's setup (seed 003): batch 16384, deep_embedding_vec_size 32, hidden_units_num 7, deep_vocab_size from
3.2 M to 819.2 M. The rest follows OneFlow-Benchmark's WDL scripts, which DLPerf ran: hidden_size 1024,
deep_dropout_rate 0.5, wide_vocab_size = deep_vocab_size, 13 dense + 2 wide + 26 deep categorical fields of
Criteo, lazy (sparse) Adam at lr 0.001, sigmoid binary cross-entropy on the sum of the wide and deep logits.

Trainable parameters at vocabulary V (embedding e, dense features d, categorical fields c, hidden widths h_i):
``V (1 + e) + sum of the dense layers (c e + d -> h_1 -> ... -> h_7 -> 1, each with a bias)``; with DLPerf's
shape that is ``33 V + 7,164,929``.

`vocab` sets V (any whole number; the sweeps use DLPerf's 3.2 M doublings). `sparse` 1 (default) asks a backend
for its sparse-gradient embedding path where it has one (torch: EmbeddingBag sparse=True and SparseAdam), 0 for
dense gradients over the whole table; each backend records which it used in its facts.
"""

from __future__ import annotations

import dataclasses
from itertools import pairwise

from dlbench.cases import Case, CaseParam, CtrInput, Optimizer, register
from dlbench.cases.arch import Loss, WideDeepArch
from dlbench.cases.flops import register_forward_flops

# DLPerf's deep_vocab_size values (seed 003's table): 3.2 M doubling to 819.2 M.
DLPERF_VOCABS: tuple[int, ...] = tuple(3_200_000 * 2**i for i in range(9))


def wide_deep_arch(case: Case) -> WideDeepArch:
    """The case's Wide & Deep architecture (at its configured vocabulary)."""
    if not isinstance(case.arch, WideDeepArch):
        raise TypeError(f"case {case.name} is not a Wide & Deep model")
    return case.arch


def ctr_input(case: Case) -> CtrInput:
    """The case's click-through input fields."""
    if not isinstance(case.input, CtrInput):
        raise TypeError(f"case {case.name} has no click-through input")
    return case.input


def deep_input_width(a: WideDeepArch, inp: CtrInput) -> int:
    """Width of the deep part's first layer input: the categorical embeddings and the dense features."""
    return inp.categorical * a.embedding + inp.dense


def param_count(a: WideDeepArch, inp: CtrInput) -> int:
    """Trainable parameters, from the formula in this module's docstring."""
    widths = (deep_input_width(a, inp), *a.hidden, 1)
    mlp = sum(n_in * n_out + n_out for n_in, n_out in pairwise(widths))
    return a.vocab * (1 + a.embedding) + mlp


def forward_flops(case: Case, input_size: int | None = None) -> float:
    """Forward FLOPs of one sample: 2 per multiply-add of the deep part's dense layers (the table lookups and the
    wide part's sum of two rows are gathers and adds, not counted); independent of the vocabulary."""
    a = wide_deep_arch(case)
    widths = (deep_input_width(a, ctr_input(case)), *a.hidden, 1)
    return 2.0 * sum(n_in * n_out for n_in, n_out in pairwise(widths))


def sparse_embeddings(case: Case) -> bool:
    """Whether the point asks for sparse embedding gradients (`sparse` 1)."""
    return case.param("sparse") == 1


def _at_vocab(case: Case) -> Case:
    """The case at its `vocab`: that table size and parameter count."""
    arch = dataclasses.replace(wide_deep_arch(case), vocab=case.param("vocab"))
    return dataclasses.replace(case, arch=arch, param_count=param_count(arch, ctr_input(case)))


register_forward_flops(WideDeepArch, forward_flops)
_ARCH = WideDeepArch()

CASE = register(
    Case(
        name="wide_deep",
        title="Wide & Deep",
        task="ctr",
        input=CtrInput(),
        optimizer=Optimizer("adam", lr=1e-3),
        param_count=param_count(_ARCH, CtrInput()),
        batch_fixed=16384,
        batch_cpu=512,
        arch=_ARCH,
        loss=Loss("bce"),
        aliases=("wdl",),
        derive=_at_vocab,
        params=(
            CaseParam(
                "vocab",
                _ARCH.vocab,
                "embedding vocabulary (wide and deep tables), e.g. 3.2M",
                search=(100_000, 1_638_400_000, 100_000),
            ),
            CaseParam(
                "sparse",
                1,
                "1: sparse embedding gradients and a sparse-aware optimizer where the "
                "framework has them; 0: dense gradients over the whole table",
                choices=(0, 1),
            ),
        ),
        notes="OneFlow-WDL as DLPerf ran it: 7 x 1024 ReLU layers, dropout 0.5, embedding 32, lazy Adam lr 0.001.",
    )
)

__all__ = [
    "CASE",
    "DLPERF_VOCABS",
    "WideDeepArch",
    "ctr_input",
    "deep_input_width",
    "forward_flops",
    "param_count",
    "sparse_embeddings",
    "wide_deep_arch",
]
