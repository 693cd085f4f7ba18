"""Every `dlbench run` option has a suite spelling: a suite can ask for any point `run` can, and both build it
through the one builder (points.py), so the points are the same, field for field. Options that say where and how
a session runs (the store, --force, the hosts) are the sweep's own options or environment; options that say how
the command prints are `dlbench results`'."""

from __future__ import annotations

from typing import Any

import click
import pytest
import yaml

from dlbench.cli.results import results
from dlbench.cli.run import run
from dlbench.cli.run_request import run_request
from dlbench.cli.sweep import sweep
from dlbench.launch.hosts import HostsConfig
from dlbench.parallel import Layout, option_fields
from dlbench.points import points
from dlbench.spec import PointSpec
from dlbench.suite import parse_suite
from dlbench.suite.expand import expand

BASE_ARGS = ["-f", "fake", "-m", "alexnet", "--device", "cpu"]
BASE_SUITE: dict[str, Any] = {"name": "s", "device": "cpu", "axes": {"framework": "fake", "model": "alexnet"}}
TWO = ["--scale", "1n2c"]
TWO_AXES = {"axes": {"scale": ["1n2c"]}}
DDP = {"axes": {"scale": ["1n2c"], "strategy": ["ddp"]}}


def _layout_row(name: str) -> tuple[list[str], dict[str, Any]]:
    """A layout option at a value other than its default, on two devices (ddp for a bucket size; a pipeline for
    micro-batches and a schedule)."""
    field = next(f for f in option_fields() if f.name == name)
    flag = "--" + name.replace("_", "-")
    if isinstance(field.default, bool):
        args, value = [flag], True
    elif field.metadata["choices"]:
        value = field.metadata["choices"][-1]
        args = [flag, str(value)]
    else:
        value = 2
        args = [flag, "2"]
    if name == "bucket_mb":
        return [*TWO, "--strategy", "ddp", *args], {**DDP, "layout": {name: value}}
    if name in ("micro_batches", "schedule"):
        pipe = ["--pipeline-parallel", "2"]
        return [*TWO, *pipe, *args], {**TWO_AXES, "layout": {"pipeline_parallel": 2, name: value}}
    return [*TWO, *args], {**TWO_AXES, "layout": {name: value}}


# Options that make the points: the `run` arguments added to BASE_ARGS, and the suite keys merged into BASE_SUITE.
POINT_OPTIONS: dict[str, tuple[list[str], dict[str, Any]]] = {
    "framework": (["-f", "fake"], {"axes": {"framework": ["fake"]}}),
    "model": (["-m", "resnet50,alexnet"], {"axes": {"model": ["resnet50", "alexnet"]}}),
    "batch_size": (["-b", "4,8"], {"axes": {"batch": [4, 8]}}),
    "precision": (["-p", "fp32,bf16"], {"axes": {"precision": ["fp32", "bf16"]}}),
    "compile_": (["--compile"], {"axes": {"compile": [True]}}),
    "channels_last": (["--channels-last"], {"channels_last": True}),
    "device": (["--device", "cpu"], {"device": "cpu"}),
    "preset_name": (["--preset", "caict"], {"protocol": {"preset": "caict"}}),
    "warmup": (["--warmup", "3"], {"protocol": {"warmup": 3}}),
    "steps": (["--steps", "4"], {"protocol": {"steps": 4}}),
    "repeats": (["--repeats", "2"], {"protocol": {"repeats": 2}}),
    "statistic": (["--statistic", "mean"], {"protocol": {"statistic": "mean"}}),
    "timeout": (["--timeout", "60"], {"timeout": 60}),
    "input_size": (["--input-size", "64"], {"input_size": 64}),
    "threads": (["--threads", "1"], {"threads": 1}),
    "data": (["--data", "real", "--data-dir", "/data"], {"axes": {"data": ["real"]}}),
    "data_dir": (["--data", "real", "--data-dir", "/data"], {"axes": {"data": ["real"]}}),
    "scale": ([*TWO, "--strategy", "ddp"], DDP),
    "nodes": (["--nodes", "1", "--devices-per-node", "2", "--strategy", "ddp"], DDP),
    "devices_per_node": (["--devices-per-node", "2", "--strategy", "ddp"], DDP),
    "strategy": ([*TWO, "--strategy", "allreduce"], {"axes": {"scale": ["1n2c"], "strategy": ["allreduce"]}}),
    "launcher": (["--launcher", "hosts"], {"launcher": "hosts"}),
    "memory_limit": (["--memory-limit", "1GiB"], {"point_memory_limit": "1GiB"}),
    "params": (
        ["-m", "llama_tiny", "--param", "vocab=1000,2000"],
        {"axes": {"model": ["llama_tiny"]}, "params": {"vocab": [1000, 2000]}},
    ),
    "lora": (  # --lora R is --param lora=R
        ["-m", "llama_tiny", "--lora", "4"],
        {"axes": {"model": ["llama_tiny"]}, "params": {"lora": [4]}},
    ),
    **{f.name: _layout_row(f.name) for f in option_fields()},
    "sync_every_step": (["--sync-every-step"], {"sync_every_step": True}),
    "converge": (["--converge"], {"converge": True}),
    "converge_steps": (["--converge", "--converge-steps", "50"], {"converge": {"steps": 50}}),
    "converge_target": (["--converge", "--converge-target", "2.5"], {"converge": {"target": 2.5}}),
    "converge_runs": (["--converge", "--converge-runs", "3"], {"converge": {"runs": 3}}),
    "converge_reference": (["--converge", "--converge-reference", "local"], {"converge": {"reference": "local"}}),
    "seed": (["--seed", "7"], {"seed": 7}),
}
SESSION_OPTIONS = ("store_path", "force", "wait_quiet", "price_per_hour", "dry_run")  # sweep has the same option
HOSTS_OPTIONS = ("hosts", "reach", "master_addr", "rendezvous_timeout")  # the sweep reads them from the environment
OUTPUT_OPTIONS = ("fmt", "columns", "wide")  # `dlbench results RUN` prints a sweep's run with them


def _merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in patch.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _run_points(args: list[str]) -> list[PointSpec]:
    params = run.make_context("run", [*BASE_ARGS, *args]).params
    options = {k: v for k, v in params.items() if k not in OUTPUT_OPTIONS}
    request, _ = run_request(options, "dlbench run")
    return points(request.axes, request.shared)


def _suite_points(patch: dict[str, Any]) -> list[PointSpec]:
    suite = parse_suite(yaml.safe_dump(_merged(BASE_SUITE, patch)), "spelling.yaml")
    return [p.spec for p in expand(suite, "cpu", data_dir="/data")]


def _names(command: click.Command) -> set[str]:
    return {p.name for p in command.params if p.name}


def test_every_run_option_is_accounted_for() -> None:
    """A new `run` option fails here until it has a suite spelling (or is named a session or output option)."""
    accounted = {*POINT_OPTIONS, *SESSION_OPTIONS, *HOSTS_OPTIONS, *OUTPUT_OPTIONS}
    assert _names(run) == accounted


@pytest.mark.parametrize("option", sorted(POINT_OPTIONS))
def test_a_suite_makes_the_points_run_makes(option: str) -> None:
    args, patch = POINT_OPTIONS[option]
    from_run, from_suite = _run_points(args), _suite_points(patch)
    assert from_run, option
    assert [s.to_dict() for s in from_suite] == [s.to_dict() for s in from_run]
    assert from_run != _run_points([]) or option in ("framework", "device")  # the option changed the points


def test_the_suite_layout_keys_are_the_layout_fields() -> None:
    """One spelling: a suite's `layout:` keys are parallel.Layout's options, which make run's options."""
    from dlbench.suite.schema import LayoutOptions

    assert list(LayoutOptions.model_fields) == [f.name for f in option_fields()]
    defaults = LayoutOptions().over(LayoutOptions())
    assert defaults == Layout()


def test_session_options_are_the_sweeps_own() -> None:
    assert set(SESSION_OPTIONS) <= _names(sweep)
    assert {"fmt", "columns", "wide"} <= _names(results)


def test_host_options_reach_a_sweep_through_their_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    envvars = {p.name: p.envvar for p in run.params if p.name in HOSTS_OPTIONS}
    assert set(envvars) == set(HOSTS_OPTIONS) and all(envvars.values())
    values = {"hosts": "h1,h2", "reach": "ssh -p 2 {host}", "master_addr": "h9", "rendezvous_timeout": "12"}
    for name, value in values.items():
        monkeypatch.setenv(str(envvars[name]), value)
    config = HostsConfig.from_env()  # what a sweep's launchers are configured from
    assert config == HostsConfig.from_options("h1,h2", "ssh -p 2 {host}", "h9", 12.0)


@pytest.mark.parametrize(
    "axes",
    [
        {"framework": ["fake==1.0", "fake==2.0"]},
        {"framework": ["fake"], "versions": {"fake": ["1.0", 2.0]}},  # a YAML number is the release as written
    ],
)
def test_a_suite_spells_framework_releases_as_run_does(axes: dict[str, Any]) -> None:
    """`-f fake==1.0,fake==2.0` and the suite's two spellings of releases (#49) make the same points."""
    from_run = _run_points(["-f", "fake==1.0,fake==2.0"])
    from_suite = _suite_points({"axes": axes})
    assert [s.release for s in from_run] == ["1.0", "2.0"]
    assert [s.to_dict() for s in from_suite] == [s.to_dict() for s in from_run]


def test_a_framework_named_without_a_release_picks_its_releases() -> None:
    """An exclusion or `--only framework=fake` naming the framework alone takes every release of it."""
    base = _merged(BASE_SUITE, {"axes": {"framework": ["fake"], "versions": {"fake": ["1.0", "2.0"]}}})
    suite = parse_suite(yaml.safe_dump(base), "s.yaml")
    assert len(expand(suite, "cpu", only={"framework": ["fake"]})) == 2
    assert [p.spec.release for p in expand(suite, "cpu", only={"framework": ["fake==2.0"]})] == ["2.0"]
    excluded = parse_suite(yaml.safe_dump({**base, "exclude": [{"framework": "fake", "model": "alexnet"}]}), "s.yaml")
    assert expand(excluded, "cpu") == []
    for bad, message in (
        ({"versions": {"jax": ["0.10.1"]}}, "not on the framework axis"),
        ({"versions": {"fake": []}}, "lists no release"),
        ({"versions": {"fake": ["x1"]}}, "release looks like"),
        ({"framework": ["fake=1.0"]}, "NAME==VERSION"),
    ):
        with pytest.raises(Exception, match=message):
            parse_suite(yaml.safe_dump(_merged(BASE_SUITE, {"axes": bad})), "s.yaml")
