"""DLRMv2 (#47): the exact parameter count of MLPerf's DLRM-DCNv2 worked from the reference's published command
(mlcommons/training recommendation_v2/torchrec_dlrm/README.MD) the long way, layer by layer; the tiny member's;
the FLOP count; the parameters; the id distributions; the AUC the convergence target is judged by."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dlbench.cases import get_case
from dlbench.cases.dlrm import embedding_bytes_per_sample, lookups_per_sample, point_figures
from dlbench.data.recsys import PlantedClicks, draw_ids, roc_auc
from dlbench.spec import SpecError

# The reference's MLPerf command, as printed: --num_embeddings_per_feature, --embedding_dim,
# --dense_arch_layer_sizes, --over_arch_layer_sizes, --dcn_num_layers, --dcn_low_rank_dim, --multi_hot_sizes.
NUM_EMBEDDINGS = (
    "40000000,39060,17295,7424,20265,3,7122,1543,63,40000000,3067956,405282,10,2209,11938,155,4,976,14,"
    "40000000,40000000,40000000,590152,12973,108,36"
)
MULTI_HOT = "3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1"
DIM, DENSE_IN, BOTTOM, TOP, DCN_LAYERS, DCN_RANK = 128, 13, "512,256,128", "1024,1024,512,256,1", 3, 512


def _linear_stack(fan_in: int, sizes: str) -> int:
    """Weights and biases of a stack of nn.Linear layers, counted one layer at a time."""
    total = 0
    for width in (int(w) for w in sizes.split(",")):
        total += fan_in * width  # weight
        total += width  # bias
        fan_in = width
    return total


def _by_hand() -> int:
    tables = [int(t) for t in NUM_EMBEDDINGS.split(",")]
    embeddings = sum(rows * DIM for rows in tables)
    interaction = DIM + len(tables) * DIM  # the bottom MLP's output and each feature's pooled vector
    cross = 0
    for _ in range(DCN_LAYERS):
        cross += interaction * DCN_RANK  # W kernel (in_features x low_rank)
        cross += DCN_RANK * interaction  # V kernel (low_rank x in_features)
        cross += interaction  # bias
    return embeddings + _linear_stack(DENSE_IN, BOTTOM) + cross + _linear_stack(interaction, TOP)


def test_dlrm_v2_has_the_reference_configuration_and_count() -> None:
    case = get_case("dlrm_v2")
    a = case.arch
    assert a.rows == tuple(int(t) for t in NUM_EMBEDDINGS.split(","))  # type: ignore[union-attr]
    assert a.hotness == tuple(int(h) for h in MULTI_HOT.split(","))  # type: ignore[union-attr]
    assert case.param_count == _by_hand() == 26_151_671_809
    assert lookups_per_sample(a) == 214  # type: ignore[arg-type]
    assert embedding_bytes_per_sample(a) == 2 * 214 * 128 * 4  # type: ignore[arg-type]
    assert case.optimizer.name == "adagrad" and case.optimizer.lr == 0.005 and case.optimizer.eps == 1e-8


def test_the_tiny_member_and_the_hashing_cap() -> None:
    tiny = get_case("dlrm_tiny")
    rows = [min(int(t), 1000) for t in NUM_EMBEDDINGS.split(",")]
    inter = 27 * 16  # the bottom output and 26 pooled vectors
    dense = (13 * 64 + 64) + (64 * 32 + 32) + (32 * 16 + 16)
    top = (inter * 64 + 64) + (64 * 32 + 32) + (32 + 1)
    assert tiny.param_count == 16 * sum(rows) + dense + 3 * (2 * inter * 16 + inter) + top
    capped = get_case("dlrm_v2").configured({"cap": 1_000_000})
    assert capped.param_count == _by_hand() - 128 * 5 * (40_000_000 - 1_000_000) - 128 * (3_067_956 - 1_000_000)
    assert point_figures(capped)["largest_table_rows"] == 1_000_000


def test_flops_count_the_dense_layers_and_cross_products() -> None:
    inter = 27 * 128
    macs = 13 * 512 + 512 * 256 + 256 * 128 + 3 * 2 * inter * 512 + inter * 1024 + 1024 * 1024 + 1024 * 512
    macs += 512 * 256 + 256
    assert get_case("dlrm_v2").train_flops_per_sample() == 3 * 2 * macs


@pytest.mark.parametrize(
    ("values", "message"),
    [({"dist": 2}, "dist must be one of 0, 1"), ({"sharding": 3}, "sharding must be one of"), ({"cap": 0}, "cap")],
)
def test_bad_parameters_are_refused(values: dict[str, int], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        get_case("dlrm_tiny").configured(values)


def test_power_law_ids_concentrate_on_few_rows_and_uniform_ids_do_not() -> None:
    heavy = get_case("dlrm_tiny").arch
    flat = get_case("dlrm_tiny").configured({"dist": 1}).arch
    rng = np.random.default_rng(0)
    for a in (heavy, flat):
        ids = draw_ids(a, 2000, rng)  # type: ignore[arg-type]
        assert ids.shape == (2000, 214) and ids.min() >= 0
        offsets = np.cumsum((0, *a.hotness))  # type: ignore[union-attr]
        for f, rows in enumerate(a.rows):  # type: ignore[union-attr]
            assert ids[:, offsets[f] : offsets[f + 1]].max() < rows
    feature0_heavy = draw_ids(heavy, 5000, rng)[:, :3]  # type: ignore[arg-type]
    feature0_flat = draw_ids(flat, 5000, rng)[:, :3]  # type: ignore[arg-type]
    top_share = np.bincount(feature0_heavy.ravel()).max() / feature0_heavy.size
    assert top_share == pytest.approx(1 - 2**-0.25, abs=0.02)  # Lomax(0.25): P(floor(X) = 0) = 1 - 2^-1/4
    assert np.bincount(feature0_flat.ravel()).max() / feature0_flat.size < 0.01


def test_auc_is_the_share_of_positive_negative_pairs_ranked_right() -> None:
    rng = np.random.default_rng(3)
    scores = np.round(rng.random(60), 1)  # ties, counted half
    labels = rng.integers(0, 2, 60)
    pairs = [(s, t) for (s, y), (t, z) in itertools.product(zip(scores, labels), repeat=2) if y == 1 and z == 0]
    brute = sum(1.0 if s > t else 0.5 if s == t else 0.0 for s, t in pairs) / len(pairs)
    assert roc_auc(scores, labels) == pytest.approx(brute, abs=1e-12)


def test_the_planted_source_is_learnable_and_knows_its_best() -> None:
    source = PlantedClicks(get_case("dlrm_tiny").arch)  # type: ignore[arg-type]
    held = source.held_out(4096)
    p = source.probabilities(held["dense"], held["ids"])
    assert 0.8 < roc_auc(p, held["labels"]) < 0.95  # far from a coin, short of certainty
    assert roc_auc(np.zeros(4096), held["labels"]) == 0.5
    a, b = source.batch(0, 8), PlantedClicks(source.arch, order=1).batch(0, 8)
    assert not np.array_equal(a["ids"], b["ids"])  # a run's seed picks its stream
