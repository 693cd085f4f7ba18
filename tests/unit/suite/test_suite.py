"""Suite files: expansion into points, exclusions, batch groups, built-in suites, and bad files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench import suite
from dlbench.cases import CtrInput, get_case
from dlbench.suite.expand import expand, memory_limit_bytes
from dlbench.suite.schema import SuiteError, parse_suite

CliResult = tuple[int, str, str]

BASE = """\
name: t
device: cpu
protocol: {preset: quick, steps: 2}
memory_limit: 1GiB
axes:
  framework: fake
  model: [resnet50, bert_base]
  batch: [min, fixed, max, 16]
  precision: [fp32, amp]
  data: [synthetic, real]
exclude:
  - {model: bert_base, data: real}
  - {precision: amp, batch: [max, 16]}
"""


def test_expansion_is_the_product_less_the_exclusions() -> None:
    points = expand(parse_suite(BASE, "t.yaml"), "cpu", "/data")
    # resnet50: 2 data x (fp32: 4 batches + amp: 2); bert_base: synthetic only x (4 + 2)
    assert len(points) == 2 * 6 + 6
    assert not any(p.spec.model == "bert_base" and p.spec.data == "real" for p in points)
    assert not any(p.spec.precision == "amp" and p.batch_group in ("max", "16") for p in points)
    assert {p.batch_group for p in points} == {"min", "fixed", "max", "16"}


def test_batch_groups_resolve_per_case_and_device() -> None:
    s = parse_suite(BASE, "t.yaml")
    cpu = {(p.spec.model, p.batch_group): p.spec.batch_size for p in expand(s, "cpu", "/d")}
    gpu = {(p.spec.model, p.batch_group): p.spec.batch_size for p in expand(s, "cuda", "/d")}
    assert cpu[("resnet50", "min")] == 1 and cpu[("resnet50", "16")] == 16
    assert cpu[("resnet50", "fixed")] == 8 and gpu[("resnet50", "fixed")] == 64  # case's CPU / seed size
    assert gpu[("bert_base", "fixed")] == 128
    assert cpu[("resnet50", "max")] == 1  # the search's lower bound until the search has run
    assert all(p.needs_search == (p.batch_group == "max") for p in expand(s, "cpu", "/d"))


def test_points_carry_the_suite_settings() -> None:
    text = BASE.replace("memory_limit: 1GiB\n", "memory_limit: 1GiB\ninput_size: 32\nthreads: 1\ntimeout: 99\n")
    points = expand(parse_suite(text, "t.yaml"), "cpu", "/data")
    p = points[0].spec
    assert (p.input_size, p.threads, p.timeout_s, p.protocol.steps, p.protocol.preset) == (32, 1, 99.0, 2, "quick")
    assert {x.spec.data_dir for x in points if x.spec.data == "real"} == {"/data"}
    assert {x.spec.data_dir for x in points if x.spec.data == "synthetic"} == {None}


def test_point_order_keeps_the_batch_groups_together() -> None:
    points = expand(parse_suite(BASE, "t.yaml"), "cpu", "/d")
    assert [p.batch_group for p in points[:4]] == ["min", "fixed", "max", "16"]


def test_only_restricts_axes() -> None:
    points = expand(parse_suite(BASE, "t.yaml"), "cpu", "/d", only={"model": ["resnet50"], "data": ["real"]})
    assert {(p.spec.model, p.spec.data) for p in points} == {("resnet50", "real")}
    with pytest.raises(SuiteError, match="unknown axis"):
        expand(parse_suite(BASE, "t.yaml"), "cpu", "/d", only={"colour": ["red"]})


def test_scalar_axis_values_and_aliases() -> None:
    s = parse_suite("name: t\naxes: {framework: fake, model: bert, scale: 1N2C, compile: [off, on]}\n", "t.yaml")
    assert s.axes.model == ["bert_base"] and s.axes.scale == ["1n2c"] and s.axes.compile == [False, True]
    points = expand(s, "cpu")
    assert {(p.spec.nodes, p.spec.devices_per_node) for p in points} == {(1, 2)}


def test_installed_means_the_frameworks_found_here() -> None:
    s = parse_suite("name: t\naxes: {model: resnet50}\n", "t.yaml")
    assert s.axes.framework == ["installed"]
    assert "fake" not in {p.spec.framework for p in expand(s, "cpu")}


def test_memory_limit_per_model() -> None:
    s = parse_suite(
        "name: t\nmemory_limit: {resnet50: 1GiB, bert: 512MiB}\naxes: {model: [resnet50, vgg16]}\n", "t.yaml"
    )
    assert memory_limit_bytes(s, "resnet50") == 2**30
    assert memory_limit_bytes(s, "bert_base") == 512 * 2**20
    assert memory_limit_bytes(s, "vgg16") is None
    assert memory_limit_bytes(s, "vgg16", 2 * 2**30) == 2 * 2**30  # --memory-limit, in bytes


@pytest.mark.parametrize("name", suite.builtin_names())
def test_builtin_suites_load_and_expand(name: str) -> None:
    s = suite.load(name)
    device = "cpu" if name.endswith("-cpu") else "cuda"
    assert s.device == device
    points = expand(s.model_copy(update={"axes": s.axes.model_copy(update={"framework": ["fake"]})}), device, "/d")
    assert points, name
    if name.endswith("-cpu"):
        # labelled as shrunk; a shrunk input size where the cases have one (Wide & Deep's input has no size)
        sized = any(not isinstance(get_case(m).input, CtrInput) for m in s.axes.model)
        sized = sized and not s.layouts  # a suite of GPT layouts shrinks the shape by its params (seq, hidden)
        assert (s.input_size is not None or not sized) and "NOT the seed's sizes" in s.description
        if name.endswith("strategies-cpu"):  # gradient strategies (#22): several logical devices of one CPU
            assert "logical" in s.description and max(p.spec.world_size for p in points) == 4
        else:
            assert all(p.spec.world_size == 1 for p in points) or s.layouts  # GPT layouts: 1, 2 and 4 ranks


def test_every_seed_suite_has_a_cpu_variant() -> None:
    names = set(suite.builtin_names())
    for seed in ("caict", "dlperf", "tf_cnn", "paddle"):
        assert {seed, f"{seed}-cpu"} <= names


def test_caict_cpu_has_the_caict_groups() -> None:
    s = suite.load("caict-cpu")
    assert s.axes.batch == ["min", "fixed", "max"] and s.axes.data == ["synthetic", "real"]
    assert set(s.axes.model) == {"resnet50", "vgg16", "bert_base"}


@pytest.mark.parametrize(
    "text, where",
    [
        ("name: t\naxes:\n  model: [resnet50]\n  batch: [1, fixed, mx]\n", "t.yaml:4: axes.batch[2]: a batch is"),
        ("name: t\naxes:\n  model: resnet50\n  colour: red\n", "t.yaml:4: axes.colour: unknown key"),
        ("name: t\naxes:\n  model: [resnet50, resnet51]\n", "t.yaml:3: axes.model[1]: unknown model 'resnet51'"),
        ("name: t\naxes:\n  framework: caffe\n  model: resnet50\n", "t.yaml:3: axes.framework: unknown framework"),
        ("axes:\n  model: resnet50\n", "t.yaml:1: name: required key is missing"),
        ("name: t\naxes: {model: resnet50, precision: [fp16]}\n", "t.yaml:2: axes.precision[0]: Input should be"),
        ("name: t\naxes: {model: resnet50, scale: 2x8}\n", "t.yaml:2: axes.scale: scale must look like"),
        ("name: t\naxes: {model: resnet50}\nexclude:\n  - {}\n", "t.yaml:4: exclude[0]: an exclusion names"),
        ("name: t\naxes: {model: resnet50}\nexclude:\n  - {modle: vgg16}\n", "t.yaml:4: exclude[0].modle: unknown key"),
        ("name: t\naxes: {model: resnet50}\nmax_batch: {lo: 8, hi: 4}\n", "t.yaml:3: max_batch: hi (4) must be"),
        (
            "name: t\naxes: {model: resnet50}\nprotocol: {preset: fastest}\n",
            "t.yaml:3: protocol.preset: unknown preset",
        ),
        ("name: t\nmemory_limit: lots\naxes: {model: resnet50}\n", "t.yaml:2: memory_limit: memory size must"),
        ("name: [t\n", "t.yaml:2: not valid YAML"),
        ("- just\n- a list\n", "t.yaml:1: a suite is a mapping"),
    ],
)
def test_bad_suite_names_file_line_and_key(text: str, where: str) -> None:
    with pytest.raises(SuiteError) as info:
        parse_suite(text, "t.yaml")
    assert str(info.value).startswith(where), str(info.value)
    assert "\n" not in str(info.value)


def test_bad_suite_file_on_the_command_line(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\naxes:\n  model: resnet50\n  batch: [0]\n")
    code, _, err = cli("sweep", str(bad), "--dry-run", "--store", str(tmp_path / "s.db"))
    assert code == 2
    assert (
        err.strip() == f"dlbench: error: {bad}:4: axes.batch[0]: a batch is a whole number >= 1, or one of "
        "min, fixed, max; got 0"
    )
    assert not (tmp_path / "s.db").exists()


def test_unknown_suite_lists_the_builtin_ones(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    code, _, err = cli("sweep", "nosuch", "--dry-run", "--store", str(tmp_path / "s.db"))
    assert code == 2 and "caict-cpu" in err and len(err.strip().splitlines()) == 1


def test_dry_run_lists_points_and_writes_nothing(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    f = tmp_path / "s.yaml"
    f.write_text(BASE)
    code, out, err = cli("sweep", str(f), "--dry-run", "--store", str(tmp_path / "s.db"))
    assert code == 0, err
    assert "18 points" in out and "max (search 1..1024)" in out
    assert not (tmp_path / "s.db").exists()


def test_cpu_max_search_needs_a_budget(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(BASE.replace("memory_limit: 1GiB\n", ""))
    code, _, err = cli("sweep", str(f), "--dry-run", "--store", str(tmp_path / "s.db"))
    assert code == 2 and "needs an emulated device budget" in err


def test_dry_run_reads_stored_max_batches_from_the_store_itself(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_url: str
) -> None:
    """On SQLite and on a PostgreSQL server alike: a search stored there shows in --dry-run."""
    from dlbench.launch.registry import Launchers
    from dlbench.runapi.maxbatch import search
    from dlbench.store.store import Store

    monkeypatch.setenv("COLUMNS", "200")
    f = tmp_path / "s.yaml"
    f.write_text(
        "name: t\ndevice: cpu\nmemory_limit: 1GiB\nmax_batch: {lo: 1, hi: 8}\n"
        "axes: {framework: fake, model: resnet50, batch: max}\n"
    )
    [point] = expand(suite.load_suite_file(f), "cpu")
    monkeypatch.setenv("DLBENCH_FAKE", "oom_above:5")
    search(Store(store_url), point.spec, 1, 8, memory_limit=2**30, launchers=Launchers())
    code, out, err = cli("sweep", str(f), "--dry-run", "--store", store_url)
    assert code == 0, err
    assert "5 (max, stored)" in out


def test_channels_last_for_listed_frameworks_and_image_cases_only() -> None:
    suite = parse_suite(
        "name: s\ndevice: cpu\nchannels_last: [torch]\naxes: {framework: [torch, fake], "
        "model: [resnet50, bert_base]}\n",
        "inline",
    )
    planned = expand(suite, "cpu", None, {})
    nhwc = {(p.spec.framework, p.spec.model) for p in planned if p.spec.channels_last}
    assert nhwc == {("torch", "resnet50")}
    with pytest.raises(SuiteError, match="caffe"):
        parse_suite("name: s\nchannels_last: [caffe]\naxes: {model: resnet50}\n", "inline")
