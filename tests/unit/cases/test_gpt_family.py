"""The GPT family and the parallel layout (#23): exact parameter counts for every DLPerf shape, the Megatron-LM
FLOPs with and without recomputation, DLPerf's published table checked against both, and the layout fields of a
point (keys, global batch, bubble, one-line refusals)."""

from __future__ import annotations

import pytest

from dlbench import reference
from dlbench.cases import get_case
from dlbench.cases.gpt import layout_flops_per_sample, megatron_flops_per_sample
from dlbench.parallel import Layout
from dlbench.spec import PointSpec, Protocol, SpecError
from tests.support.specs import flat_replace, flat_spec

# DLPerf's shapes (hidden x layers, heads) at sequence 2048 and vocabulary 51,200: the exact count of a tied GPT-2
# decoder, worked by hand as 12 l h^2 + 13 l h + (V + s) h + 2 h, and the report's "billion" column (count / 2^30).
DLPERF_SHAPES = {
    (768, 12, 12): (125_950_464, 0.117),
    (1536, 16, 16): (535_096_320, 0.498),
    (2304, 24, 24): (1_652_230_656, 1.539),
    (3072, 16, 32): (1_976_162_304, 1.840),
    (3072, 32, 32): (3_788_740_608, 3.529),
}


def _shape(hidden: int, layers: int, heads: int) -> dict[str, int]:
    return {"hidden": hidden, "layers": layers, "heads": heads, "seq": 2048, "vocab": 51200}


@pytest.mark.parametrize(("shape", "counts"), DLPERF_SHAPES.items())
def test_every_dlperf_shape_has_its_exact_count(shape: tuple[int, int, int], counts: tuple[int, float]) -> None:
    h, layers, _ = shape
    case = get_case("gpt").configured(_shape(*shape))
    assert case.param_count == counts[0] == 12 * layers * h * h + 13 * layers * h + (51200 + 2048) * h + 2 * h
    assert round(case.param_count / 2**30, 3) == counts[1]  # DLPerf's column
    torch = pytest.importorskip("torch", reason="torch is not installed in this environment")
    from dlbench.backends.torch.models import build_model, count_trainable

    with torch.device("meta"):  # shapes only: no memory for the 3.8 B model
        assert count_trainable(build_model(case)) == counts[0]


def test_defaults_are_gpt2_small_and_heads_follow_the_width() -> None:
    family, small = get_case("gpt").configured({}), get_case("gpt2_small")
    assert family.param_count == small.param_count == 124_439_808 and family.arch == small.arch
    assert get_case("gpt").configured({"hidden": 256}).arch.num_heads == 4  # type: ignore[union-attr]
    assert get_case("gpt").configured({"hidden": 256, "heads": 2}).arch.num_heads == 2  # type: ignore[union-attr]
    with pytest.raises(SpecError, match="multiple of heads"):
        get_case("gpt").configured({"hidden": 100, "heads": 3})
    seq = get_case("gpt").configured({"seq": 64})
    assert seq.input.seq_len == seq.arch.max_positions == 64  # type: ignore[union-attr]


def test_model_and_hardware_flops() -> None:
    case = get_case("gpt").configured(_shape(1536, 16, 16))
    model, hardware = layout_flops_per_sample(case, None, recompute=True)
    assert model == megatron_flops_per_sample(case) and hardware == megatron_flops_per_sample(case, recompute=True)
    s, n, h, v = 2048, 16, 1536, 51200
    assert hardware == pytest.approx(96 * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h)))
    assert 1.25 < hardware / model < 4 / 3  # a second forward of the layers, not of the logits
    assert layout_flops_per_sample(case, None, recompute=False) == (model, model)


def test_dlperf_table_is_the_recompute_formula_times_its_throughput() -> None:
    """The two transcribed columns agree: sequences/s x hardware FLOPs / GPUs = the published TFLOP/s per GPU
    (within the report's rounding), for all 36 rows, and every row's layout fills its devices."""
    rows = [r for r in reference.load_all() if r.source.file == "dlperf_gpt.yaml"]
    assert len(rows) == 36 and {r.framework for r in rows} == {"oneflow", "torch"}
    for r in rows:
        case = get_case("gpt").configured(r.params)
        _, hardware = layout_flops_per_sample(case, None, recompute=True)
        assert r.throughput * hardware / r.devices / 1e12 == pytest.approx(r.tflops_per_device, rel=0.005)
        lay = r.layout
        assert lay["data"] * lay["tensor"] * lay["pipeline"] == r.devices
        assert r.batch_size % lay["micro_batches"] == 0
    assert reference.find("gpt", "amp", 2) == []  # matched by layout and shape only (report/gpt_layouts.py)


def _spec(**kw: object) -> PointSpec:
    base = {"framework": "torch", "model": "gpt", "batch_size": 4, "protocol": Protocol(0, 1, 1, "median")}
    return flat_spec(**{**base, **kw})  # type: ignore[arg-type]


def test_layout_fields_keep_old_keys_and_count_the_global_batch() -> None:
    plain = _spec(devices_per_node=4)
    assert "tensor_parallel" not in plain.key() and "recompute" not in plain.key()
    assert plain.global_batch == 16 and plain.layout == Layout(4)
    split = _spec(devices_per_node=4, tensor_parallel=2, pipeline_parallel=2, micro_batches=4)
    assert split.global_batch == 4 and split.layout.family == "PP" and split.layout.data == 1
    assert split.layout.bubble == pytest.approx(1 / 5) and split.key() != plain.key()
    assert PointSpec.from_json(split.to_json()) == split
    assert _spec(devices_per_node=8, tensor_parallel=4).layout.family == "2D"
    assert _spec(devices_per_node=8, tensor_parallel=8).layout.label == "TP8"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"devices_per_node": 4, "tensor_parallel": 3}, "do not divide by 3 x 1"),
        ({"micro_batches": 2}, "with --pipeline-parallel 2"),
        ({"devices_per_node": 2, "pipeline_parallel": 2, "micro_batches": 3}, "multiple of --micro-batches"),
        ({"pipeline_schedule": "zb"}, "pipeline schedule must be one of"),
        ({"tensor_parallel": 0}, "tensor parallel must be a whole number"),
    ],
)
def test_a_layout_the_devices_cannot_take_is_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        _spec(**fields)


def test_baseline_of_a_split_point_is_the_whole_model_on_one_device() -> None:
    from dlbench.analysis.scaling import baseline_spec

    split = _spec(devices_per_node=4, tensor_parallel=2, pipeline_parallel=2, micro_batches=4, recompute=True)
    base = baseline_spec(split)
    assert base == flat_replace(
        split, devices_per_node=1, tensor_parallel=1, pipeline_parallel=1, micro_batches=1, launcher="local"
    )
    assert base.layout.recompute and base.global_batch == split.global_batch
