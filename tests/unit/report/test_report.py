"""`dlbench report` from a fixture store built here (no training): tables, charts, failures, published figures."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.analysis.scaling import scaling
from dlbench.cli import main
from dlbench.records import Environment, PointResult
from dlbench.report.document import build_report
from dlbench.report.export import CSV_COLUMNS, to_csv
from dlbench.report.groups import build_sections, framework_title
from dlbench.report.published import beside, same_hardware
from dlbench.store.store import Store, StoredPoint
from tests.support.reports import CPU, fill_store, make_point

CliResult = tuple[int, str, str]
P100 = {"device": "cuda", "device_model": "Tesla P100-SXM2-16GB", "device_count": "8", "cpu_model": "Xeon"}


def fixture_points() -> list[PointResult]:
    """Two frameworks at 1, 2 and 4 devices, failures, real data, a max batch point and a P100 point."""
    pts = []
    for fw, base in (("torch", 0.010), ("tf", 0.012)):
        for devices, slow in ((1, 1.0), (2, 1.1), (4, 1.3)):
            pts.append(make_point(fw, per_node=devices, step_s=base * slow, seed=devices))
    pts.append(make_point("torch", batch=64, step_s=0.07))
    pts.append(
        make_point(
            "tf",
            batch=64,
            status="oom",
            error="Traceback (most recent call last):\n  ...\nResourceExhaustedError: OOM when allocating tensor",
        )
    )
    pts.append(make_point("mxnet", status="unsupported", error="mxnet has no bf16 kernels here"))
    pts.append(make_point("tf", batch=32, step_s=0.04))
    pts.append(make_point("torch", data="real", step_s=0.02))
    pts.append(make_point("torch", model="alexnet", batch=96, step_s=0.05, extra={"max_batch": 96}))
    pts.append(make_point("tf", batch=64, device="cuda", identity=P100, step_s=0.3))
    return pts


@pytest.fixture(scope="module")
def fixture_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("store") / "results.db"
    fill_store(path, fixture_points())
    return path


@pytest.fixture(scope="module")
def html_page(fixture_store: Path) -> str:
    """The HTML report of the fixture store, made once for this module (charts take a few seconds)."""
    out = fixture_store.parent / "report.html"
    assert main(["report", "--store", str(fixture_store), "-o", str(out)]) == 0
    return out.read_text()


def _throughput(points: list[PointResult], fw: str, devices: int, batch: int = 8) -> float:
    hit = [
        p
        for p in points
        if p.spec.framework == fw
        and p.spec.world_size == devices
        and p.spec.batch_size == batch
        and p.status == "ok"
        and p.spec.data == "synthetic"
        and p.spec.device == "cpu"
        and p.metrics
    ]
    assert len(hit) == 1 and hit[0].metrics
    return hit[0].metrics.throughput


def test_html_report(html_page: str) -> None:
    page = html_page
    assert "13 points from 1 run" in page
    # one table per section, frameworks as columns, configurations as rows
    assert page.count('<table class="results">') == 4
    for title in (*map(framework_title, ("torch", "tf", "mxnet")), "batch 8", "1n4c", "real data", "AlexNet"):
        assert title in page
    # charts: throughput and speedup vs scale, memory, spread, synthetic vs real, max batch
    for slug in ("scale-bs8", "speedup-bs8", "memory", "spread"):
        assert f'id="resnet50-fp32-synthetic-cpu-{slug}"' in page, slug
    assert 'id="data-synthetic-vs-real"' in page and 'id="max-batch"' in page
    assert page.count("<svg") >= 8
    assert "ideal (linear)" in page
    # failures as footnotes, the exception line rather than the traceback header
    oom = re.search(r'badge oom">OOM</span><sup>\[(\d)\]', page)
    assert oom
    assert (
        f'<li value="{oom.group(1)}">{framework_title("tf")}, batch 64, 1n1c: OOM: '
        "ResourceExhaustedError: OOM when allocating tensor</li>"
    ) in page
    assert "mxnet has no bf16 kernels here" in page and "unsupported" in page
    # speedup and efficiency, computed from the stored throughputs
    pts = fixture_points()
    s = scaling(_throughput(pts, "torch", 4), _throughput(pts, "torch", 1), 4)
    assert f"speedup {s.speedup:.2f}× · efficiency {s.efficiency * 100:.0f}% · vs #" in page
    # header: identity keys and protocol
    assert "device_model" in page and "AMD EPYC" in page
    assert "1 warm-up + 6 measured steps, 3 repeats, median" in page
    # self-contained: no script, no stylesheet link, no external load
    assert "<script" not in page and "<link" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)


def test_published_figures_beside(html_page: str) -> None:
    page = html_page
    assert "Published figures beside the measured points" in page
    assert "NVIDIA Tesla P100" in page  # the reference hardware is named
    assert "other hardware (AMD EPYC)" in page  # CPU points get no ratio


def test_ratio_only_on_matching_hardware() -> None:
    pts = fixture_points()
    sections = build_sections([StoredPoint(i, "r", p) for i, p in enumerate(pts)])
    gpu = next(s for s in sections if s.device == "cuda")
    rows = beside(gpu)
    with_ratio = [b for b in rows if b.ratio is not None]
    assert with_ratio, "a P100 point at batch 64 on 1 device should meet the tf_cnn P100 figures"
    for b in with_ratio:
        assert same_hardware(b.ref.hardware, "Tesla P100-SXM2-16GB") and b.ref.devices == 1
        assert b.measured_throughput is not None
        assert b.ratio == pytest.approx(b.measured_throughput / b.ref.throughput)
    assert all(b.ratio is None for b in rows if b.ref.devices != 1 or b.ref.framework != "tf")
    cpu = next(s for s in sections if s.device == "cpu" and s.model == "resnet50" and s.data == "synthetic")
    assert all(b.ratio is None for b in beside(cpu))


def test_same_hardware() -> None:
    assert same_hardware("NVIDIA Tesla V100-SXM2-16GB", "Tesla V100-SXM2-16GB")
    assert same_hardware("NVIDIA Tesla P100", "Tesla P100-SXM2-16GB")
    assert not same_hardware("NVIDIA Tesla V100-SXM2-16GB", "NVIDIA A100-SXM4-40GB")
    assert not same_hardware("NVIDIA Tesla K80", "AMD EPYC")


def test_markdown_report(fixture_store: Path, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    out = tmp_path / "report.md"
    code, stdout, stderr = cli("report", "--store", str(fixture_store), "--format", "md", "-o", str(out))
    assert code == 0, stderr
    assert "13 points from 1 run" in stdout
    text = out.read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(images) >= 8
    for rel in images:
        png = out.parent / rel
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", rel
    header = " | ".join(framework_title(f) for f in ("mxnet", "tf", "torch"))
    assert f"| configuration | {header} |" in text
    oom = re.search(r"OOM \[(\d)\]", text)
    assert oom and f"- [{oom.group(1)}] {framework_title('tf')}, batch 64, 1n1c: OOM: ResourceExhaustedError" in text
    assert not list(tmp_path.glob("*.part")) and not list(tmp_path.glob(".*part"))


def test_max_batch_note_when_absent(store_path: Path, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    fill_store(store_path, [make_point("torch")])
    out = tmp_path / "r.html"
    assert cli("report", "--store", str(store_path), "-o", str(out))[0] == 0
    page = out.read_text()
    assert "no point in these runs came from a max batch search" in page
    assert "speedup needs more than one scale" in page


def test_identity_mismatch_warns_in_report(store_path: Path, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    fill_store(
        store_path, [make_point("torch"), make_point("torch", batch=16, identity={**CPU, "device_model": "Xeon"})]
    )
    out = tmp_path / "r.html"
    assert cli("report", "--store", str(store_path), "-o", str(out))[0] == 0
    assert "identity key device_model differs between points (AMD EPYC, Xeon)" in out.read_text()


@pytest.mark.parametrize(
    "args,needle",
    [
        (("nope-run",), "no run 'nope-run'"),
        (("--format", "pdf"), "pdf"),
    ],
)
def test_bad_input(
    fixture_store: Path, tmp_path: Path, cli: Callable[..., CliResult], args: tuple[str, ...], needle: str
) -> None:
    out = tmp_path / "r.html"
    code, _, err = cli("report", "--store", str(fixture_store), "-o", str(out), *args)
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_no_store(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    code, _, err = cli("report", "--store", str(tmp_path / "none.db"), "-o", str(tmp_path / "r.html"))
    assert code == 2 and "no store" in err


def test_csv_reads_straight_into_pandas(fixture_store: Path) -> None:
    pd = pytest.importorskip("pandas", reason="pandas is not installed (pip install pandas)")
    store = Store(fixture_store, readonly=True)
    points = store.points()
    df = pd.read_csv(io.StringIO(to_csv(points)))
    assert list(df.columns) == list(CSV_COLUMNS)
    assert len(df) == len(points)
    assert df["throughput"].dtype.kind == "f" and df["batch_size"].dtype.kind == "i"
    assert df["world_size"].dtype.kind == "i"
    ok = df[df["status"] == "ok"]
    assert ok["throughput"].notna().all() and (ok["ci_low"] <= ok["throughput"]).all()
    assert df.loc[df["status"] == "oom", "throughput"].isna().all()
    assert set(df["status"]) == {"ok", "oom", "unsupported"}
    # scaling: each multi-device point against the 1-device point of its framework, from the same store
    multi = df[(df["world_size"] > 1) & (df["status"] == "ok")].set_index(["framework", "world_size"])
    one = df[
        (df["world_size"] == 1)
        & (df["status"] == "ok")
        & (df["batch_size"] == 8)
        & (df["data"] == "synthetic")
        & (df["model"] == "resnet50")
        & (df["device"] == "cpu")
    ].set_index("framework")
    for (fw, n), row in multi.iterrows():
        assert row["baseline_point_id"] == one.loc[fw, "point_id"]
        assert row["speedup"] == pytest.approx(row["throughput"] / one.loc[fw, "throughput"])
        assert row["scaling_efficiency"] == pytest.approx(row["speedup"] / n)
    assert df.loc[df["world_size"] == 1, "speedup"].isna().all()


def test_json_export_carries_raw_samples_and_scaling(fixture_store: Path) -> None:
    import json

    from dlbench.report.export import to_json

    points = Store(fixture_store, readonly=True).points()
    rows = json.loads(to_json(points))
    by_id = {r["point_id"]: r for r in rows}
    multi = [r for r in rows if r["status"] == "ok" and r["spec"]["devices_per_node"] > 1]
    assert len(multi) == 4
    for r in multi:
        base = by_id[r["scaling"]["baseline_point_id"]]
        assert base["spec"]["framework"] == r["spec"]["framework"] and base["spec"]["devices_per_node"] == 1
        assert r["scaling"]["speedup"] == pytest.approx(r["metrics"]["throughput"] / base["metrics"]["throughput"])
        assert len(r["ranks"]) == r["spec"]["devices_per_node"]


def test_failed_point_without_version_is_not_a_second_version() -> None:
    ok = make_point("torch")
    died = make_point("torch", batch=512, status="oom")
    died = PointResult(died.spec, "oom", env=Environment(identity=dict(CPU)), error="passed the memory limit")
    doc = build_report([], [StoredPoint(1, "r", ok), StoredPoint(2, "r", died)])
    assert [kv.value for kv in doc.frameworks] == ["torch-1.0"]
    assert not [w for w in doc.warnings if "version" in w]


HOSTILE_TITLE = 'Q3 <img src="//evil.example/x.png"> @import url(//evil.example/a.css) # *bold* |pipe| `tick`'


def test_hostile_title_is_text_in_html(fixture_store: Path, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    from dlbench.report.html import external_resources

    out = tmp_path / "r.html"
    code, _, err = cli("report", "--all", "--title", HOSTILE_TITLE, "-o", str(out), "--store", str(fixture_store))
    assert code == 0, err
    page = out.read_text()
    assert external_resources(page) == []
    assert "&lt;img src=&#34;//evil.example/x.png&#34;&gt;" in page  # shown as the text it is


def test_external_resources_are_found_in_markup_only() -> None:
    from dlbench.report.html import external_resources

    assert external_resources('<img src="https://x.example/y.png">') != []
    assert external_resources('<p style="background:url(//x.example/y)">') != []
    assert external_resources("<style>@import url(a.css);</style>") != []
    assert external_resources("<p>src=//x.example @import url(//y)</p><a href='#runs'>runs</a>") == []


def test_hostile_title_is_text_in_markdown(fixture_store: Path, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    from dlbench.report.markdown import md_code

    out = tmp_path / "r.md"
    code, _, err = cli(
        "report", "--all", "--format", "md", "--title", HOSTILE_TITLE, "-o", str(out), "--store", str(fixture_store)
    )
    assert code == 0, err
    heading = out.read_text().splitlines()[0]
    assert "<img" not in heading and "&lt;img" in heading
    assert r"\*bold\*" in heading and r"\|pipe\|" in heading and r"\`tick\`" in heading
    assert md_code("a `b` c") == "``a `b` c``"  # a command with backticks stays one code span


@pytest.mark.parametrize("fmt", ["html", "md"])
def test_report_never_writes_through_a_planted_link(
    fixture_store: Path, tmp_path: Path, fmt: str, cli: Callable[..., CliResult]
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / f"r.{fmt}"
    for planted in (f"r.{fmt}.part", ".r_files.part", "r_files"):
        (tmp_path / planted).symlink_to(victim)
    if fmt == "md":  # r_files is not a folder dlbench made: refused, the link left as it is (#25)
        code, _, err = cli("report", "--all", "--format", fmt, "-o", str(out), "--store", str(fixture_store))
        assert code == 2 and "r_files is a symbolic link" in err and (tmp_path / "r_files").is_symlink()
        (tmp_path / "r_files").unlink()
    code, _, err = cli("report", "--all", "--format", fmt, "-o", str(out), "--store", str(fixture_store))
    assert code == 0, err
    assert victim.read_text() == "keep me"
    assert out.is_file() and not out.is_symlink() and "dlbench report" in out.read_text()
    assert not list(tmp_path.glob(".r.*.tmp"))  # no temporary file left behind
