"""The shipped reference data: schema, provenance, and figures checked against the seed documents."""

from __future__ import annotations

import re
from importlib import resources

import pytest
import yaml

from dlbench import reference
from dlbench.cases import CASES
from dlbench.reference import ReferenceDataError, ReferenceRow, find, load_all, load_file, load_sources
from tests.support.paths import REPO

SEEDS = REPO.parent / "shared" / "seeds"
EXCERPT = REPO / "tests" / "fixtures" / "seed_lines.txt"  # the seed lines the figures cite, copied (its header)
EXPECTED_FILES = {
    "caict_2020.yaml",
    "dlperf_v1.yaml",
    "paddle_resnet50v15.yaml",
    "tf_cnn_benchmarks.yaml",
    "dlperf_gpt.yaml",
}
NOT_SEED_LINES = {
    "dlperf_gpt.yaml"
}  # lines of DLPerf's GPT report, which the seed names (tests/unit/test_gpt_reference.py)


def _text(name: str) -> str:
    return resources.files("dlbench.reference").joinpath("data", name).read_text(encoding="utf-8")


def _excerpt() -> dict[tuple[str, int], str]:
    """The copied seed lines, by (seed file, line number)."""
    out = {}
    for row in EXCERPT.read_text(encoding="utf-8").splitlines():
        if row.startswith("#") or not row:
            continue
        where, _, text = row.partition("\t")
        name, _, line = where.rpartition(":")
        out[(name, int(line))] = text
    return out


def _seed_line(seed_file: str, line: int) -> str:
    """A seed document's line, from the excerpt in the test tree (the seeds folder may be absent)."""
    found = _excerpt().get((seed_file, line))
    assert found is not None, f"{seed_file}:{line} is not in {EXCERPT}: copy it there from the seed document"
    return found


def test_the_excerpt_is_the_seed_documents_verbatim() -> None:
    if not SEEDS.is_dir():
        pytest.skip(f"the seed folder {SEEDS} is absent here: the excerpt cannot be compared with it")
    for (name, line), text in _excerpt().items():
        assert (SEEDS / name).read_text(encoding="utf-8").splitlines()[line - 1] == text, (name, line)


def _numbers(text: str) -> set[float]:
    return {float(tok) for tok in re.findall(r"\d+(?:\.\d+)?", text)}


def _one(rows: list[ReferenceRow], **want: object) -> ReferenceRow:
    hits = [r for r in rows if all(getattr(r, k) == v for k, v in want.items())]
    assert len(hits) == 1, (want, hits)
    return hits[0]


def test_expected_files_ship() -> None:
    assert set(reference.data_files()) == EXPECTED_FILES


@pytest.mark.parametrize("name", sorted(EXPECTED_FILES))
def test_file_validates(name: str) -> None:
    doc = yaml.safe_load(_text(name))
    assert doc["schema_version"] == 1
    assert doc["source"]["seed_file"]
    rows = load_file(name, _text(name))
    assert len(rows) == len(doc["rows"])


def test_row_counts() -> None:
    counts = {s.file: 0 for s in load_sources()}
    for row in load_all():
        counts[row.source.file] += 1
    assert counts == {
        "caict_2020.yaml": 0,
        "dlperf_v1.yaml": 52,
        "paddle_resnet50v15.yaml": 36,
        "tf_cnn_benchmarks.yaml": 207,
        "dlperf_gpt.yaml": 36,
    }


def test_every_row_has_provenance() -> None:
    rows = load_all()
    assert rows
    for row in rows:
        assert row.source.title and row.source.seed_file and row.table
        assert row.source_line >= 1
        assert row.model in CASES
        assert row.unit == "samples/s"


def test_caict_has_no_rows() -> None:
    doc = yaml.safe_load(_text("caict_2020.yaml"))
    assert doc["rows"] == []
    assert "charts only" in doc["notes"] and "no numbers" in doc["notes"]
    assert not [r for r in load_all() if r.source.file == "caict_2020.yaml"]


def test_every_figure_is_on_its_source_line() -> None:
    for row in (r for r in load_all() if r.source.file not in NOT_SEED_LINES):
        line = _seed_line(row.source.seed_file, row.source_line)
        assert float(row.throughput) in _numbers(line), (row.source.file, row.index, line)


# Spot values read by eye in the seed text: (file, fields that pick one row, throughput, speedup, line).
SPOTS = [
    (
        "dlperf_v1.yaml",
        dict(framework="oneflow", model="resnet50", precision="fp32", batch_size=128),
        12411.97,
        31.21,
        134,
    ),
    (
        "dlperf_v1.yaml",
        dict(
            framework="tf",
            framework_version="1.x",
            model="resnet50",
            precision="amp",
            batch_size=224,
            conditions=("ngc", "source=NVIDIA-DeepLearningExamples", "xla"),
        ),
        29171.69,
        24.34,
        136,
    ),
    (
        "dlperf_v1.yaml",
        dict(
            framework="tf",
            model="bert_base",
            precision="amp",
            batch_size=64,
            conditions=("ngc", "source=NVIDIA-DeepLearningExamples"),
        ),
        5189.07,
        None,
        178,
    ),
    (
        "dlperf_v1.yaml",
        dict(framework="mxnet", model="bert_base", precision="amp", batch_size=128),
        14822.31,
        None,
        196,
    ),
    (
        "paddle_resnet50v15.yaml",
        dict(framework="tf", hardware="NVIDIA Tesla V100-SXM2-32GB", precision="amp", devices=32),
        33317.67,
        None,
        104,
    ),
    (
        "paddle_resnet50v15.yaml",
        dict(framework="mxnet", hardware="NVIDIA A100-SXM4-40GB", precision="fp32", devices=8),
        7848.2,
        None,
        106,
    ),
    (
        "paddle_resnet50v15.yaml",
        dict(framework="paddle", hardware="NVIDIA Tesla V100-SXM2-32GB", precision="amp", devices=1),
        1438.518,
        None,
        104,
    ),
    (
        "tf_cnn_benchmarks.yaml",
        dict(hardware="NVIDIA Tesla P100", model="resnet50", data="synthetic", devices=8, batch_size=64),
        1734,
        None,
        64,
    ),
    (
        "tf_cnn_benchmarks.yaml",
        dict(
            table="Google Compute Engine (Tesla K80): 结果 (results): 训练真实数据 (real data)",
            model="alexnet",
            devices=1,
        ),
        639,
        None,
        121,
    ),
    ("tf_cnn_benchmarks.yaml", dict(model="resnet152", devices=64, data="synthetic", batch_size=32), 981, None, 229),
    (
        "tf_cnn_benchmarks.yaml",
        dict(
            table="Amazon EC2 (Tesla K80): 其他结果 (other results, batch size 32): 训练真实数据 (real data)",
            model="inception_v3",
            devices=8,
        ),
        212,
        None,
        199,
    ),
]


@pytest.mark.parametrize("file,pick,throughput,speedup,line", SPOTS)
def test_spot_values(file: str, pick: dict[str, object], throughput: float, speedup: float | None, line: int) -> None:
    row = _one([r for r in load_all() if r.source.file == file], **pick)
    assert row.throughput == throughput
    assert row.speedup == speedup
    assert row.source_line == line
    assert throughput in _numbers(_seed_line(row.source.seed_file, line))


def test_spot_conditions() -> None:
    rows = load_all()
    r50 = _one(rows, throughput=1734)
    assert r50.model_variant == "v1" and r50.precision == "fp32" and r50.nodes == 1
    assert "variable_update=parameter_server" in r50.conditions
    dist = _one(rows, throughput=2744)
    assert dist.nodes is None and "variable_update=distributed_replicated" in dist.conditions
    paddle32 = _one(rows, throughput=39972.131)
    assert (paddle32.nodes, paddle32.devices_per_node, paddle32.data) == (4, 8, "real")


def test_missing_cells_have_no_rows() -> None:
    rows = load_all()
    # N/A: AlexNet, real data, 8 GPUs on DGX-1 (P100) and on EC2 (the GCE table has 4056)
    alexnet_real_8 = [r for r in rows if r.model == "alexnet" and r.data == "real" and r.devices == 8]
    assert [r.throughput for r in alexnet_real_8] == [4056]
    # '-': PyTorch-examples has no AMP figure in DLPerf
    assert not [r for r in rows if "source=PyTorch-examples" in r.conditions and r.precision == "amp"]
    # '——': NGC MXNet has no 32-GPU figure in the Paddle report
    assert not [
        r for r in rows if r.source.file == "paddle_resnet50v15.yaml" and r.framework == "mxnet" and r.devices == 32
    ]


def test_find() -> None:
    hits = find("resnet50", "amp", 256)
    assert {r.source.file for r in hits} == {"dlperf_v1.yaml", "paddle_resnet50v15.yaml"}
    tf = find("resnet50", "amp", 256, framework="tf")
    assert tf and all(r.framework == "tf" for r in tf)
    assert find("bert", "fp32", 32, framework="oneflow")  # alias resolves to bert_base
    assert find("vgg16", "amp", 64) == []


def _doc(**row_changes: object) -> str:
    row: dict[str, object] = {
        "framework": "torch",
        "framework_version": None,
        "model": "resnet50",
        "hardware": "x",
        "devices": 1,
        "nodes": 1,
        "devices_per_node": 1,
        "precision": "fp32",
        "batch_size": 64,
        "data": "real",
        "conditions": [],
        "throughput": 100.0,
        "unit": "samples/s",
        "speedup": None,
        "table": "t",
        "source_line": 1,
    }
    row.update(row_changes)
    return str(
        yaml.safe_dump(
            {
                "schema_version": 1,
                "notes": "",
                "rows": [row, dict(row)],
                "source": {"title": "t", "organisation": "o", "year": None, "seed_file": "s", "url": None},
            }
        )
    )


def test_good_document_loads() -> None:
    assert len(load_file("ok.yaml", _doc())) == 2


@pytest.mark.parametrize(
    "change,needle",
    [
        ({"precision": "fp16"}, "precision"),
        ({"data": "mixed"}, "data"),
        ({"model": "resnet18"}, "model"),
        ({"throughput": 0}, "throughput"),
        ({"throughput": "12"}, "throughput"),
        ({"batch_size": 6.5}, "batch_size"),
        ({"devices": True}, "devices"),
        ({"nodes": 2}, "nodes x devices_per_node"),
        ({"colour": 1}, "unknown"),
        ({"framework": "caffe"}, "framework"),
    ],
)
def test_bad_row_is_named(change: dict[str, object], needle: str) -> None:
    with pytest.raises(ReferenceDataError, match=rf"bad\.yaml: row 0: .*{needle}"):
        load_file("bad.yaml", _doc(**change))


def test_missing_field_is_named() -> None:
    doc = yaml.safe_load(_doc())
    del doc["rows"][1]["source_line"]
    with pytest.raises(ReferenceDataError, match=r"bad\.yaml: row 1: missing source_line"):
        load_file("bad.yaml", yaml.safe_dump(doc))
