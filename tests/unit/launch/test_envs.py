"""Per-framework environments: the registry, interpreter resolution, `dlbench setup` refusals, `list`."""

from __future__ import annotations

import json
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench import backends
from dlbench.backends import BackendInfo
from dlbench.cli.values import as_frameworks
from dlbench.envs import provision as setup_cli
from dlbench.envs import venvs as envs
from dlbench.envs.interpreters import NotInstalled, interpreter_for, probe, state
from dlbench.envs.provision import Plan, requirement, setup_one
from dlbench.envs.venvs import source_root

CliResult = tuple[int, str, str]
GHOST = BackendInfo(
    "ghost", "Ghost", "dlbench_no_such_module", "dlbench-no-such-dist", "dlbench_no_such_module:Backend", "ghost"
)
GONE = BackendInfo(
    "gone",
    "Gone",
    "dlbench_no_such_module",
    "dlbench-no-such-dist",
    "",
    "gone",
    unavailable="not installable on this Python: no wheel for it",
)


@pytest.fixture(autouse=True)
def temp_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own DLBENCH_HOME."""
    home = tmp_path / "home"
    monkeypatch.setenv("DLBENCH_HOME", str(home))
    return home


@pytest.fixture
def with_ghost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register a framework that no interpreter has."""
    monkeypatch.setattr(backends, "_BUILTIN", (*backends._BUILTIN, GHOST, GONE))


def _fake_python(folder: Path) -> str:
    """An executable file standing in for a venv's interpreter."""
    py = envs.venv_python(folder)
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\nexit 0\n")
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    return str(py)


def _rec(name: str, python: str, **kw: object) -> envs.EnvRecord:
    return envs.EnvRecord(framework=name, python=python, version="1.0", created="2026-01-01T00:00:00+00:00", **kw)  # type: ignore[arg-type]


def test_home_follows_the_variable(temp_home: Path) -> None:
    assert envs.home() == temp_home
    assert envs.env_dir("jax") == temp_home / "envs" / "jax"
    assert envs.registry_path() == temp_home / "envs.json"


def test_registry_round_trip_keeps_other_entries(temp_home: Path) -> None:
    assert envs.load() == {}
    envs.record(_rec("jax", "/a/bin/python", cases={"resnet50": 25_557_032}))
    envs.record(_rec("tf", "/b/bin/python"))
    envs.record(_rec("jax", "/c/bin/python"))
    loaded = envs.load()
    assert set(loaded) == {"jax", "tf"}
    assert loaded["jax"].python == "/c/bin/python"
    assert loaded["tf"].python == "/b/bin/python"
    raw = json.loads((temp_home / "envs.json").read_text())
    assert raw["_version"] == envs.REGISTRY_VERSION
    assert set(raw["tf"]) == {"python", "version", "created", "source", "cases", "python_version", "build", "existing"}
    assert not [p for p in temp_home.iterdir() if p.name.startswith(".envs-")]  # no temp file left


def test_forget() -> None:
    envs.record(_rec("jax", "/a/bin/python"))
    assert envs.forget("jax") is True
    assert envs.forget("jax") is False
    assert envs.load() == {}


@pytest.mark.parametrize("bad", ["../x", "Jax", "", "a/b", "x" * 40, "1tf"])
def test_bad_names_are_refused(bad: str) -> None:
    with pytest.raises(envs.EnvError, match="bad framework name"):
        envs.env_dir(bad)
    with pytest.raises(envs.EnvError):
        envs.record(_rec(bad, "/a/bin/python"))


def test_corrupt_registry_is_one_clear_line(temp_home: Path) -> None:
    temp_home.mkdir()
    (temp_home / "envs.json").write_text("{not json")
    with pytest.raises(envs.EnvError, match="not valid JSON") as exc:
        envs.load()
    assert "\n" not in str(exc.value)
    with pytest.raises(NotInstalled, match="not valid JSON"):
        interpreter_for("torch")


def test_registered_env_comes_first(temp_home: Path) -> None:
    py = _fake_python(temp_home / "envs" / "torch")
    envs.record(_rec("torch", py, cases={"resnet50": 1}))
    assert interpreter_for("torch") == py
    st = state("torch")
    assert st.where == f"env {temp_home / 'envs' / 'torch'}"
    assert st.version == "1.0" and st.cases == {"resnet50": 1}


def test_env_set_up_from_another_checkout_is_refused_with_the_fix(temp_home: Path) -> None:
    py = _fake_python(temp_home / "envs" / "torch")
    envs.record(_rec("torch", py, source="-e /elsewhere/old-clone[torch]"))
    with pytest.raises(
        NotInstalled,
        match=r"runs dlbench from '-e /elsewhere/old-clone\[torch\]'.*"
        r"run: dlbench setup torch",
    ):
        interpreter_for("torch")
    envs.record(_rec("torch", py, source=" ".join(envs.install_source("torch"))))  # what setup records
    assert interpreter_for("torch") == py


def test_missing_env_python_falls_back_to_this_interpreter() -> None:
    if backends.get_info("torch").installed_version() is None:
        pytest.skip("torch is not installed in this interpreter")
    envs.record(_rec("torch", "/nowhere/bin/python"))
    assert interpreter_for("torch") == sys.executable
    assert state("torch").where == "this interpreter"


@pytest.mark.usefixtures("with_ghost")
def test_absent_framework_names_the_fix() -> None:
    with pytest.raises(NotInstalled, match="run: dlbench setup ghost"):
        interpreter_for("ghost")
    envs.record(_rec("ghost", "/nowhere/bin/python"))
    with pytest.raises(NotInstalled, match="python /nowhere/bin/python is gone: run: dlbench setup ghost"):
        interpreter_for("ghost")


@pytest.mark.usefixtures("with_ghost")
def test_unavailable_frameworks_say_why() -> None:
    with pytest.raises(NotInstalled, match="not installable on this Python: no wheel"):
        interpreter_for("gone")


@pytest.mark.usefixtures("with_ghost")
def test_framework_all_skips_absent_ones_with_a_note() -> None:
    found = as_frameworks("all")
    assert "ghost" not in found.names and "gone" not in found.names
    assert "skips" in found.note and "ghost" in found.note and "dlbench setup" in found.note and "gone" in found.note


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("setup", "gone"), "gone: not installable on this Python: "),
        (("setup", "nosuch"), "unknown framework 'nosuch'"),
        (("setup", "../evil"), "bad framework name"),
        (("setup", "fake"), "no pip extra"),
    ],
)
@pytest.mark.usefixtures("with_ghost")
def test_setup_refusals_are_one_line_exit_2(
    cli: Callable[..., CliResult], temp_home: Path, args: tuple[str, ...], message: str
) -> None:
    code, _, err = cli(*args)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (temp_home / "envs").exists()  # nothing half-made


@pytest.mark.usefixtures("with_ghost")
def test_list_shows_cached_case_support_and_unavailable_reasons(cli: Callable[..., CliResult], temp_home: Path) -> None:
    py = _fake_python(temp_home / "envs" / "torch")
    envs.record(_rec("torch", py, cases={"resnet50": 25_557_032, "vgg16": 5, "bert_base": "unsupported: nope"}))
    code, out, _ = cli("list")
    assert code == 0
    flat = " ".join(out.split())
    assert "not installable on" in flat and "Gone" in flat and "OneFlow" in flat and "MegEngine" in flat
    assert "needs 3.10" in flat  # an absent framework shows the Pythons it needs (OneFlow's, MegEngine's)
    assert "no: nope" in flat and "yes" in flat and "(ref 138,357,544)" in flat


def test_requirement_is_editable_from_a_checkout() -> None:
    root = source_root()
    if root is None:
        pytest.skip("dlbench is not running from a checkout")
    assert requirement(backends.get_info("torch")) == ["-e", f"{root}[torch]"]


@pytest.mark.slow
def test_real_setup_of_a_tiny_env(temp_home: Path) -> None:
    """A real venv and pip install of dlbench alone (the fake backend has no extra), verified and recorded."""
    from rich.console import Console

    from dlbench.cli.feedback import ConsoleFeedback

    if source_root() is None:
        pytest.skip("dlbench is not running from a checkout")
    here = probe(sys.executable)
    assert here is not None
    rec = setup_one(
        Plan(backends.get_info("fake"), here, "cpu"),
        recreate=False,
        check_cases=True,
        feedback=ConsoleFeedback(Console(stderr=True)),
    )
    assert Path(rec.python) == envs.venv_python(temp_home / "envs" / "fake")
    assert rec.version and rec.cases["resnet50"]
    assert rec.python_version == here.label and not rec.existing
    assert envs.get("fake") == rec
    assert interpreter_for("fake") == rec.python
    assert list((temp_home / "logs").glob("setup-fake-*.log"))


@pytest.fixture
def pip_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every command setup would run through _run_logged, recorded and not run (they 'succeed')."""
    calls: list[list[str]] = []

    def fake_run(argv: list[str], log: Path, label: str, console: object) -> int:
        calls.append(list(argv))
        return 0

    monkeypatch.setattr(setup_cli, "_run_logged", fake_run)
    return calls


def test_existing_registers_this_python_for_torch_without_installing_torch(
    cli: Callable[..., CliResult], pip_calls: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    version = backends.get_info("torch").installed_version()
    if version is None:
        pytest.skip("torch is not installed in this interpreter")
    code, _, err = cli("setup", "torch", "--existing", "--no-case-check")
    assert code == 0, err
    rec = envs.get("torch")
    assert rec is not None and rec.existing and rec.version == version
    assert Path(rec.python).resolve() == Path(sys.executable).resolve()
    assert rec.python_version == ".".join(map(str, sys.version_info[:3]))
    assert rec.build == ("cpu" if "+cpu" in version else rec.build)
    # This interpreter already runs this checkout: nothing is installed at all.
    assert pip_calls == []
    st = state("torch")
    assert st.where.startswith("existing ") and st.python_version == rec.python_version
    # An interpreter running another dlbench gets this one with --no-deps, never torch.
    monkeypatch.setattr(setup_cli, "_this_checkout", lambda origin: False)
    code, _, err = cli("setup", "torch", "--existing", sys.executable, "--no-case-check")
    assert code == 0, err
    assert len(pip_calls) == 1
    argv = pip_calls[0]
    assert argv[1:4] == ["-m", "pip", "install"] and "--no-deps" in argv
    assert not any("torch" in a for a in argv[4:]), argv
    code, out, _ = cli("list")
    flat = " ".join(out.split())
    assert code == 0 and "existing" in flat and rec.python_version in flat


def _plan(
    monkeypatch: pytest.MonkeyPatch, gpu: bool, *names: str, cuda: bool | None = None, index_url: str | None = None
) -> list[Plan]:
    from rich.console import Console

    from dlbench.cli.feedback import ConsoleFeedback

    monkeypatch.setattr(setup_cli, "gpu_present", lambda: gpu)
    return setup_cli.plan(
        [backends.get_info(n) for n in names], None, None, cuda, index_url, ConsoleFeedback(Console(stderr=True))
    )


def test_a_gpu_means_the_gpu_build_where_one_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    import click

    tf, jax, mxnet = _plan(monkeypatch, True, "tf", "jax", "mxnet")
    assert (tf.build, tf.extra) == ("cuda", "tf-cuda")
    assert (jax.build, jax.extra) == ("cuda", "jax-cuda")
    assert (mxnet.build, mxnet.extra) == ("cpu", "mxnet")  # no GPU build known: the CPU one, said so
    (cpu_tf,) = _plan(monkeypatch, True, "tf", cuda=False)
    assert cpu_tf.extra == "tf"
    (forced,) = _plan(monkeypatch, False, "tf", cuda=True)
    assert forced.extra == "tf-cuda"
    with pytest.raises(click.UsageError, match=r"pass --index-url https://www.paddlepaddle.org.cn/"):
        _plan(monkeypatch, True, "paddle")
    (paddle,) = _plan(monkeypatch, True, "paddle", index_url="https://example.org/simple")
    assert paddle.extra == "paddle-cuda" and paddle.index_url == "https://example.org/simple"


def test_gpu_build_pip_arguments_and_record(
    temp_home: Path, pip_calls: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """setup_one with every command faked: the GPU extra, the extra index, and the build recorded as pip says."""
    from rich.console import Console

    from dlbench.cli.feedback import ConsoleFeedback

    monkeypatch.setattr(setup_cli, "_ask", lambda python, *args, timeout: {"version": "3.3.1"})
    monkeypatch.setattr(
        setup_cli,
        "probe_framework",
        lambda python, info: {"version": "3.3.1", "provides": ["paddlepaddle-gpu"], "cuda": []},
    )
    here = probe(sys.executable)
    assert here is not None
    plan = Plan(backends.get_info("paddle"), here, "cuda", index_url="https://example.org/simple")
    rec = setup_one(plan, recreate=False, check_cases=False, feedback=ConsoleFeedback(Console(stderr=True)))
    venv_cmd, pip_cmd = pip_calls
    assert venv_cmd[:3] == [here.path, "-m", "venv"]
    assert pip_cmd[-2:] == ["--extra-index-url", "https://example.org/simple"]
    assert any(a.endswith("[paddle-cuda]") or a.startswith("dlbench[paddle-cuda]") for a in pip_cmd)
    assert rec.build == "cuda" and rec.source.endswith("[paddle-cuda]")
    assert envs.stale_source(rec, "paddle") is None  # the same checkout, whichever extra


def test_every_backend_names_extras_that_exist_and_a_python_range() -> None:
    """The pins live in pyproject's extras; BackendInfo names them and says which Pythons they have wheels for."""
    import tomllib

    root = source_root()
    if root is None:
        pytest.skip("dlbench is not running from a checkout")
    meta = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = meta["optional-dependencies"]
    for name, info in backends.all_backends().items():
        assert info.extra in extras, name
        assert not info.cuda_extra or info.cuda_extra in extras, name
        lo, hi = (tuple(int(p) for p in v.split(".")) for v in info.python)
        assert (3, 6) <= lo <= hi, name
    assert backends.get_info("oneflow").python == ("3.8", "3.10") == backends.get_info("megengine").python


def test_on_a_gpu_machine_a_refusal_is_still_one_line(
    cli: Callable[..., CliResult], temp_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 'no GPU build known, the CPU one' note waits until every framework passed its checks."""
    monkeypatch.setattr(setup_cli, "gpu_present", lambda: True)
    code, _, err = cli("setup", "mxnet", "jittor", "--python", "3.12")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "too new for mxnet" in err
    assert not temp_home.exists()


def test_setup_all_leaves_out_what_the_interpreter_does_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """`setup all --existing` registers what a container's Python has; `setup all --python 3.12` skips mxnet."""
    import click
    from rich.console import Console

    from dlbench.cli.feedback import ConsoleFeedback

    infos = [backends.get_info(n) for n in ("torch", "mxnet")]
    if backends.get_info("torch").installed_version() is None:
        pytest.skip("torch is not installed in this interpreter")
    plans = setup_cli.plan(infos, None, "", None, None, ConsoleFeedback(Console(stderr=True)), skip_misfits=True)
    assert [p.info.name for p in plans] == ["torch"] and plans[0].existing
    with pytest.raises(click.UsageError, match="has no mxnet"):
        setup_cli.plan(infos, None, "", None, None, ConsoleFeedback(Console(stderr=True)))
    with pytest.raises(click.UsageError, match=r"no framework to set up: mxnet: skipped: .*too new for mxnet"):
        setup_cli.plan(infos[1:], "3.12", None, False, None, ConsoleFeedback(Console(stderr=True)), skip_misfits=True)


def test_a_cpu_wheel_installed_for_a_gpu_request_is_recorded_as_cpu(
    temp_home: Path, pip_calls: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--cuda torch where a find-links folder holds torch +cpu (as here): recorded as the CPU build it is."""
    from rich.console import Console

    from dlbench.cli.feedback import ConsoleFeedback

    monkeypatch.setattr(setup_cli, "_ask", lambda python, *args, timeout: {"version": "2.13.0+cpu"})
    monkeypatch.setattr(setup_cli, "probe_framework", lambda python, info: {"version": "2.13.0+cpu"})
    here = probe(sys.executable)
    assert here is not None
    rec = setup_one(
        Plan(backends.get_info("torch"), here, "cuda"),
        recreate=False,
        check_cases=False,
        feedback=ConsoleFeedback(Console(stderr=True)),
    )
    assert rec.build == "cpu"
