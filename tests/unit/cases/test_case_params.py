"""Case parameters on the command line: --param NAME=V1,V2 (K/M/G suffixes) as points, shown in the table and the
CSV, part of a point's identity; --param NAME=max searched by the max-batch bisection generalised to any searched
quantity (in multiples of the parameter's unit, probes cached by identity). The fake backend runs the points."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.analysis.maxbatch import Probe, bisect, with_value
from dlbench.cli.values import as_params as parse_params
from dlbench.report.table import fmt_case_params, fmt_count
from dlbench.runapi.maxbatch import search_key
from dlbench.spec import PointSpec, SpecError, parse_count, preset

CliResult = tuple[int, str, str]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1000", 1000),
        ("3.2M", 3_200_000),
        ("400k", 400_000),
        ("1.5K", 1500),
        ("819.2M", 819_200_000),
        ("2G", 2_000_000_000),
    ],
)
def test_counts_with_suffixes(text: str, value: int) -> None:
    assert parse_count(text, "vocab") == value


@pytest.mark.parametrize("text", ["-5", "1.5", "0.0001K", "3.2X", "lots", "", "1e6"])
def test_bad_counts(text: str) -> None:
    with pytest.raises(SpecError, match="a value is a whole number"):
        parse_count(text, "vocab")


def test_params_are_the_product_of_their_values_and_max_is_apart() -> None:
    combos, searched = parse_params(["vocab=1K,2K", "sparse=0,1"])
    assert (
        combos
        == (
            {"sparse": 0, "vocab": 1000},
            {"sparse": 0, "vocab": 2000},
            {"sparse": 1, "vocab": 1000},
            {"sparse": 1, "vocab": 2000},
        )
        and searched is None
    )
    assert parse_params(["vocab=max", "sparse=0"]) == (({"sparse": 0},), "vocab")
    assert parse_params([]) == (({},), None)


@pytest.mark.parametrize(
    ("texts", "piece"),
    [
        (["vocab"], "NAME=VALUE"),
        (["vocab=1K", "vocab=2K"], "twice"),
        (["vocab=max,1K"], "alone"),
        (["vocab=1K,1000"], "twice"),
        (["vocab=max", "sparse=max"], "only one"),
    ],
)
def test_bad_params(texts: list[str], piece: str) -> None:
    with pytest.raises(SpecError, match=piece):
        parse_params(texts)


def test_table_shows_params_compactly() -> None:
    assert [fmt_count(n) for n in (3_200_000, 1500, 1234, 819_200_000, 1_638_400_000)] == [
        "3.2M",
        "1.5K",
        "1.234K",
        "819.2M",
        "1638.4M",
    ]
    assert fmt_case_params((("sparse", 0), ("vocab", 3_200_000))) == " sparse=0 vocab=3.2M"


def _spec(**params: int) -> PointSpec:
    return PointSpec(
        framework="fake",
        model="wide_deep",
        batch_size=64,
        protocol=preset("quick"),
        memory_limit_bytes=2**30,
        case_params=tuple(sorted(params.items())),
    )


def test_param_values_are_identity_and_a_search_key_ignores_the_searched_one() -> None:
    assert _spec(vocab=1000).key() != _spec(vocab=2000).key() != _spec().key()
    assert with_value(_spec(sparse=0), "vocab", 5).params == {"sparse": 0, "vocab": 5}
    assert with_value(_spec(), "batch", 5).batch_size == 5
    k1, k2 = search_key(_spec(vocab=1000), 2**30, "vocab", 100), search_key(_spec(vocab=9000), 2**30, "vocab", 100)
    assert k1 == k2 != search_key(_spec(vocab=1000), 2**30)  # a batch search is another search
    assert search_key(_spec(vocab=1000, sparse=0), 2**30, "vocab", 100) != k1


@pytest.mark.parametrize("threshold", [100, 150, 700, 1234, 1499])
def test_bisect_in_units_finds_the_largest_multiple_that_fits(threshold: int) -> None:
    seen: list[int] = []

    def probe(v: int) -> Probe:
        seen.append(v)
        return Probe(value=v, fits=v <= threshold, status="ok" if v <= threshold else "oom")

    best, exact, _, note = bisect(100, 1600, probe, unit=100)
    assert (best, exact, note) == (threshold // 100 * 100, True, "")
    assert all(v % 100 == 0 for v in seen) and len(seen) <= 5  # ceil(log2(16)) + 1


def test_cli_runs_each_value_and_exports_it(cli: Callable[..., CliResult], store_path: Path) -> None:
    code, out, err = cli(
        "run",
        "-f",
        "fake",
        "-m",
        "wide_deep",
        "-b",
        "64",
        "--param",
        "vocab=1K,2.5K",
        "--warmup",
        "0",
        "--steps",
        "1",
        "--repeats",
        "1",
        "--device",
        "cpu",
        "--store",
        str(store_path),
    )
    assert code == 0, err
    assert "vocab=1K" in out and "vocab=2.5K" in out
    code, text, _ = cli("results", "--format", "csv", "--store", str(store_path))
    rows = list(csv.DictReader(io.StringIO(text)))
    assert sorted(r["case_params"] for r in rows) == ["vocab=1000", "vocab=2500"]
    code, text, _ = cli("results", "--format", "json", "--store", str(store_path))
    assert sorted(tuple(map(tuple, p["spec"]["case_params"])) for p in json.loads(text)) == [
        (("vocab", 1000),),
        (("vocab", 2500),),
    ]


def test_cli_param_max_finds_the_oom_boundary_and_reuses_probes(
    cli: Callable[..., CliResult], store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "param_oom_above:vocab:523400")
    args = (
        "run",
        "-f",
        "fake",
        "-m",
        "wide_deep",
        "-b",
        "64",
        "--param",
        "vocab=max",
        "--memory-limit",
        "1GiB",
        "--warmup",
        "0",
        "--steps",
        "1",
        "--repeats",
        "1",
        "--device",
        "cpu",
        "--store",
        str(store_path),
    )
    code, out, err = cli(*args)
    assert code == 0, err
    assert "max vocab for fake wide_deep bs64: 500,000 trains, 600,000 ran out of memory (exact within 100,000" in err
    assert "vocab=500K" in out
    # issue 24: the verdict (the max, the next value that failed, exact) is printed with the table, not only kept
    assert (
        "largest vocab that trains, fake wide_deep bs64 1n1c: 500K, 600K ran out of memory; exact: within 100K" in out
    )
    code, out, err = cli(*args)  # the same search again: every probe from the store
    assert code == 0 and "0 new)" in err


@pytest.mark.parametrize(
    ("args", "piece"),
    [
        (("--param", "vocab=max"), "needs --memory-limit"),
        (("--param", "sparse=max", "--memory-limit", "1GiB"), "sparse cannot be searched"),
        (("--param", "colour=3"), "has no parameter colour"),
        (("--param", "sparse=2"), "sparse must be one of 0, 1"),
        (("--param", "vocab=0"), "vocab must be at least 1"),
        (("--param", "vocab=1.5"), "a value is a whole number"),
    ],
)
def test_cli_bad_params_are_one_line(
    cli: Callable[..., CliResult], store_path: Path, args: tuple[str, ...], piece: str
) -> None:
    code, _, err = cli("run", "-f", "fake", "-m", "wide_deep", "--device", "cpu", *args, "--store", str(store_path))
    assert code == 2 and piece in err and len(err.strip().splitlines()) == 1
    assert not store_path.exists()


SUITE = """name: wd
device: cpu
protocol: {preset: quick, warmup: 0, steps: 1, repeats: 1}
memory_limit: 1GiB
axes: {framework: fake, model: [wide_deep, resnet50], batch: 8}
params: {vocab: %s}
"""


def test_suite_params_are_points_of_the_models_that_declare_them() -> None:
    from dlbench.suite.expand import expand
    from dlbench.suite.schema import parse_suite

    points = expand(parse_suite(SUITE % "[0.4M, 800000]", "s.yaml"), "cpu")
    assert sorted((p.spec.model, p.spec.case_params) for p in points) == [
        ("resnet50", ()),
        ("wide_deep", (("vocab", 400_000),)),
        ("wide_deep", (("vocab", 800_000),)),
    ]
    searched = expand(parse_suite(SUITE % "max", "s.yaml"), "cpu")
    assert [(p.spec.model, p.param_search, p.spec.case_params) for p in searched] == [
        ("wide_deep", "vocab", (("vocab", 100_000),)),
        ("resnet50", None, ()),
    ]


@pytest.mark.parametrize(
    ("value", "piece"),
    [
        ("[lots]", "a value is a whole number"),
        ("[0]", "at least 1"),
        ("[1K, 1000]", "twice"),
        ("[]", "at least one value"),
    ],
)
def test_bad_suite_params(value: str, piece: str) -> None:
    from dlbench.suite.schema import SuiteError, parse_suite

    with pytest.raises(SuiteError, match=piece):
        parse_suite(SUITE % value, "s.yaml")
    with pytest.raises(SuiteError, match="no model of the suite declares colour"):
        parse_suite(SUITE.replace("params: {vocab: %s}", "params: {colour: [1]}"), "s.yaml")


def test_sweep_searches_a_param_at_max(
    cli: Callable[..., CliResult], store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "param_oom_above:vocab:350000")
    suite = tmp_path / "wd.yaml"
    suite.write_text(SUITE.replace("model: [wide_deep, resnet50]", "model: wide_deep") % "max")
    code, _, err = cli("sweep", str(suite), "--store", str(store_path))
    assert code == 0, err
    code, text, _ = cli("results", "--format", "json", "--store", str(store_path))
    point = next(p for p in json.loads(text) if "max_param" in p["extra"])  # the sweep's point, not a probe
    assert point["spec"]["case_params"] == [["vocab", 300_000]] and point["status"] == "ok"
    assert point["extra"]["max_param"]["name"] == "vocab" and point["extra"]["max_param"]["exact"] is True


def test_report_draws_latency_and_memory_against_vocab_with_oom_marked(
    cli: Callable[..., CliResult], store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dlbench.report.wide_deep_vocab import vocab_curves, wide_deep_chart
    from dlbench.store.store import Store

    monkeypatch.setenv("DLBENCH_FAKE", "param_oom_above:vocab:2500")
    code, _, err = cli(
        "run",
        "-f",
        "fake",
        "-m",
        "wide_deep",
        "-b",
        "8",
        "--param",
        "vocab=1K,2K,4K",
        "--warmup",
        "0",
        "--steps",
        "1",
        "--repeats",
        "1",
        "--device",
        "cpu",
        "--store",
        str(store_path),
    )
    assert code != 2, err
    curves = vocab_curves(Store(store_path).points())
    [(key, pts)] = curves.items()
    assert key == ("fake", "cpu", 8, "sparse")
    assert [(p.vocab, p.status, p.step_ms is not None) for p in pts] == [
        (1000, "ok", True),
        (2000, "ok", True),
        (4000, "oom", False),
    ]
    charts = wide_deep_chart(Store(store_path).points(), {})
    assert [c.slug for c in charts.charts] == ["wide-deep-vocab"] and "not drawn" in charts.charts[0].caption
    out = tmp_path / "r.html"
    code, _, err = cli("report", "-o", str(out), "--store", str(store_path))
    assert code == 0, err
    assert '<figure id="wide-deep-vocab">' in out.read_text()
