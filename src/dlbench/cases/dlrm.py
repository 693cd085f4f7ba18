"""DLRMv2 (#47): MLPerf Training's recommendation benchmark, DLRM with DCNv2 cross layers, as mlcommons/training's
``recommendation_v2/torchrec_dlrm`` reference runs it (torchrec's ``DLRM_DCN``). Framework-free.

The reference's configuration (its README's MLPerf command): 26 sparse features whose tables are the Criteo 1TB
cardinalities hashed to at most 40,000,000 rows (`MLPERF_TABLES`, `HASH_CAP`), embedding dimension 128, the
multi-hot sizes of MLPerf's synthetic multi-hot Criteo (`MLPERF_HOTNESS`: 214 ids per sample, sum-pooled per
feature), 13 dense features through a bottom MLP 512-256-128, the 27 vectors concatenated (3,456 wide) through 3
low-rank DCNv2 cross layers of rank 512 and a top MLP 1024-1024-512-256-1; Adagrad at lr 0.005 (eps 1e-8, no
decay), binary cross-entropy, judged by AUC (target 0.80275 on Criteo).

Parameters, with n = (features + 1) x dim: ``dim x sum(tables)`` (the embeddings) ``+ MLP(13 -> bottom)``
``+ cross_layers x (2 n r + n)`` (W, V and the bias of each cross layer) ``+ MLP(n -> top)``, each dense layer
with its bias.

Synthetic ids (`power_law`, the `dist` parameter): a Lomax (Pareto II) draw of shape POWER_LAW_SHAPE, floored and
reduced modulo the table size, for every id of every feature: the heavy-tailed distribution MLPerf's
``multi_hot.py`` draws its ``pareto`` multi-hot ids from (a few rows take most lookups, as real click logs'
ids do); `dist` 1 draws them uniformly, for comparison (every lookup a likely cache miss).

FLOPs of one sample (the model-FLOPs convention, cases/flops.py): 2 per multiply-add of the bottom MLP, of the
cross layers' two low-rank products and of the top MLP; backward 2x forward. The embedding look-ups and their
pooling are gathers and adds, not counted: DLRM is embedding-bound, and its figures are look-ups per second and
bytes moved (`point_figures`), beside samples per second.
"""

from __future__ import annotations

import dataclasses
from itertools import pairwise

from dlbench.capabilities import Capabilities
from dlbench.cases import Case, CaseParam, CtrInput, Optimizer, register
from dlbench.cases.arch import DlrmArch, Loss
from dlbench.cases.flops import register_forward_flops
from dlbench.spec import PointSpec

# The reference's --num_embeddings_per_feature (Criteo 1TB's cardinalities, hashed to at most 40 M rows) and
# --multi_hot_sizes (MLPerf's synthetic multi-hot Criteo), from mlcommons/training recommendation_v2/torchrec_dlrm.
MLPERF_TABLES: tuple[int, ...] = (
    40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10,
    2209, 11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36,
)  # fmt: skip
MLPERF_HOTNESS: tuple[int, ...] = (
    3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1,
)  # fmt: skip
HASH_CAP = 40_000_000
POWER_LAW_SHAPE = 0.25  # multi_hot.py's np.random.pareto(a=0.25)
MLPERF_AUC = 0.80275  # the reference's target AUROC on Criteo's evaluation days
DISTRIBUTIONS = ("power law (Lomax, shape 0.25, modulo the table size)", "uniform")
FLOP_CONVENTION = (
    "2 FLOPs per multiply-add of the bottom MLP, the cross layers' low-rank products and the top MLP, backward 2x "
    "forward; embedding look-ups and pooling not counted"
)

DLRM_V2 = DlrmArch(tables=MLPERF_TABLES, hotness=MLPERF_HOTNESS)
# A shape this CPU trains in seconds: the same 26 features and multi-hot sizes (214 look-ups per sample), tables
# hashed to at most 1,000 rows, vectors 16 wide, every layer narrower.
DLRM_TINY = DlrmArch(
    tables=MLPERF_TABLES,
    hotness=MLPERF_HOTNESS,
    cap=1000,
    embedding=16,
    bottom=(64, 32, 16),
    top=(64, 32, 1),
    cross_layers=3,
    low_rank=16,
)


def dlrm_arch(case: Case) -> DlrmArch:
    """The case's DLRM architecture (at its parameters)."""
    if not isinstance(case.arch, DlrmArch):
        raise TypeError(f"case {case.name} is not a DLRM")
    return case.arch


def interaction_width(a: DlrmArch) -> int:
    """n: the bottom MLP's output and the pooled vectors concatenated, (features + 1) x dim."""
    return (len(a.rows) + 1) * a.embedding


def _mlp(widths: tuple[int, ...]) -> int:
    """Weights and biases of dense layers through these widths."""
    return sum(i * o + o for i, o in pairwise(widths))


def embedding_params(a: DlrmArch) -> int:
    """The tables' parameters: dim x the sum of their rows (after the hashing cap)."""
    return a.embedding * sum(a.rows)


def dense_params(a: DlrmArch) -> int:
    """Every parameter outside the tables: bottom MLP, cross layers and top MLP."""
    n = interaction_width(a)
    return _mlp((a.dense, *a.bottom)) + a.cross_layers * (2 * n * a.low_rank + n) + _mlp((n, *a.top))


def param_count(a: DlrmArch) -> int:
    """Trainable parameters, from the formula in this module's docstring."""
    return embedding_params(a) + dense_params(a)


def forward_flops(case: Case, input_size: int | None = None) -> float:
    """Forward FLOPs of one sample by FLOP_CONVENTION (independent of the tables' sizes)."""
    a = dlrm_arch(case)
    n = interaction_width(a)
    macs = sum(i * o for i, o in pairwise((a.dense, *a.bottom)))
    macs += a.cross_layers * 2 * n * a.low_rank + sum(i * o for i, o in pairwise((n, *a.top)))
    return 2.0 * macs


def lookups_per_sample(a: DlrmArch) -> int:
    """Embedding rows one sample reads: the sum of the multi-hot sizes (214 for MLPerf's)."""
    return sum(a.hotness)


def embedding_bytes_per_sample(a: DlrmArch, element_bytes: int = 4) -> int:
    """Embedding bytes one training sample moves: each looked-up row read in the forward pass and its gradient row
    written in the backward pass (2 x look-ups x dim x element size); the optimizer's row updates are not counted
    (they depend on how many distinct rows a batch touches)."""
    return 2 * lookups_per_sample(a) * a.embedding * element_bytes


def point_figures(case: Case) -> dict[str, object]:
    """What a DLRM point records about its model: the parameter split, look-ups and bytes per sample, the id
    distribution and the embedding sharding, with the FLOP convention named."""
    a = dlrm_arch(case)
    return {
        "params_total": param_count(a),
        "embedding_params": embedding_params(a),
        "dense_params": dense_params(a),
        "tables": len(a.rows),
        "largest_table_rows": max(a.rows),
        "lookups_per_sample": lookups_per_sample(a),
        "embedding_bytes_per_sample_fp32": embedding_bytes_per_sample(a),
        "ids": DISTRIBUTIONS[0 if a.power_law else 1],
        "sharding": "table-wise model parallel" if a.table_wise else "data parallel (tables replicated)",
        "flop_convention": FLOP_CONVENTION,
    }


def _shaped(case: Case) -> Case:
    """The member at its parameters: tables hashed to `cap` rows, the id distribution, the sharding."""
    arch = dataclasses.replace(
        dlrm_arch(case),
        cap=case.param("cap"),
        power_law=case.param("dist") == 0,
        table_wise=case.param("sharding") == 1,
    )
    return dataclasses.replace(case, arch=arch, param_count=param_count(arch))


def _params(cap: int) -> tuple[CaseParam, ...]:
    """The family's parameters, this member's hashing cap as its default."""
    return (
        CaseParam("cap", cap, "hashing cap: each table holds at most this many rows (MLPerf: 40M)"),
        CaseParam("dist", 0, "synthetic ids: 0 power law (as click logs), 1 uniform", choices=(0, 1)),
        CaseParam(
            "sharding",
            0,
            "0: tables replicated, data parallel; 1: tables placed whole on the ranks (table-wise model parallel), "
            "pooled vectors exchanged by all-to-all",
            choices=(0, 1),
            splits_model=True,
        ),
    )


# The reference's optimizer: Adagrad (embeddings and dense layers), lr 0.005, eps 1e-8, no decay; its global batch is
# 65536 (8192 per GPU on 8).
OPTIMIZER = Optimizer("adagrad", lr=0.005, eps=1e-8)


def _member(name: str, title: str, arch: DlrmArch, batch_fixed: int, batch_cpu: int, notes: str) -> Case:
    """Register one DLRM member: its shape, exact count and parameters."""
    return register(
        Case(
            name=name,
            title=title,
            task="ctr",
            input=CtrInput(dense=arch.dense, categorical=len(arch.rows), wide=0),
            optimizer=OPTIMIZER,
            param_count=param_count(arch),
            batch_fixed=batch_fixed,
            batch_cpu=batch_cpu,
            arch=arch,
            loss=Loss("bce"),
            derive=_shaped,
            params=_params(arch.cap),
            notes=notes,
        )
    )


register_forward_flops(DlrmArch, forward_flops)

V2 = _member(
    "dlrm_v2",
    "DLRMv2 (DCNv2)",
    DLRM_V2,
    8192,
    256,
    "MLPerf Training's DLRM-DCNv2: 26 Criteo 1TB tables hashed to 40M rows (204M rows, 104 GB in fp32), dim 128, "
    "214 multi-hot ids per sample, 3 cross layers of rank 512; Adagrad lr 0.005.",
)
TINY = _member(
    "dlrm_tiny",
    "DLRM tiny",
    DLRM_TINY,
    256,
    256,
    "DLRMv2's 26 features and multi-hot sizes with tables of at most 1,000 rows, dim 16: for CPU tests.",
)

__all__ = [
    "DISTRIBUTIONS",
    "DLRM_TINY",
    "DLRM_V2",
    "FLOP_CONVENTION",
    "HASH_CAP",
    "MLPERF_AUC",
    "MLPERF_HOTNESS",
    "MLPERF_TABLES",
    "OPTIMIZER",
    "POWER_LAW_SHAPE",
    "TINY",
    "dense_params",
    "dlrm_arch",
    "dlrm_refusal",
    "embedding_bytes_per_sample",
    "embedding_params",
    "forward_flops",
    "interaction_width",
    "lookups_per_sample",
    "param_count",
    "point_figures",
]


def dlrm_refusal(spec: PointSpec, caps: Capabilities) -> str | None:
    """Why a DLRM point cannot run (one line), or None: table-wise sharding where the framework has none, a gradient
    strategy other than DDP (the tables' gradients are sparse, or live on their owner). Table-wise on one device
    holds every table (as a convergence point's one-device reference does)."""
    from dlbench.cases import get_case

    case = get_case(spec.model)
    if not isinstance(case.arch, DlrmArch):
        return None
    table_wise = ("sharding", 1) in spec.case_params
    if table_wise and not caps.table_wise:
        return (
            f"table-wise embedding sharding (--param sharding=1) is wired for torch only; {spec.framework} trains "
            "DLRM data parallel: use --param sharding=0"
        )
    if spec.world_size > 1 and spec.framework == "torch" and spec.strategy not in ("none", "ddp"):
        return (
            "DLRM's tables train with sparse gradients (and table-wise, on their owner rank only): DDP reduces them; "
            "use --strategy ddp"
        )
    return None
