"""Versioned environments (#49): `dlbench setup jax==0.10.1` beside the default one, its registry key, the
interpreter a point asking for a release runs in, the pip arguments pinning a release, the Python chosen for it,
`--existing` under a release, and `dlbench list`. Every pip and index call is faked: nothing is installed."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from rich.console import Console

from dlbench import backends
from dlbench.cli.feedback import ConsoleFeedback
from dlbench.envs import provision
from dlbench.envs import venvs as envs
from dlbench.envs.interpreters import Interpreter, NotInstalled, interpreter_for, probe, state
from dlbench.envs.releases import ReleaseError, choose_for_release, in_range, offered, ordered, requirements

CliResult = tuple[int, str, str]


@pytest.fixture(autouse=True)
def temp_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own DLBENCH_HOME."""
    home = tmp_path / "home"
    monkeypatch.setenv("DLBENCH_HOME", str(home))
    return home


def _python(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _record(framework: str, release: str, python: str, version: str, python_version: str = "3.11.7") -> None:
    source = " ".join(envs.install_source(""))
    envs.record(
        envs.EnvRecord(
            framework,
            python,
            version,
            "2026-01-01T00:00:00+00:00",
            source,
            python_version=python_version,
            release=release,
        )
    )


def test_a_release_has_its_own_folder_and_registry_key(temp_home: Path) -> None:
    assert envs.env_dir("jax", "0.10.1") == temp_home / "envs" / "jax-0.10.1"
    py = _python(envs.venv_python(envs.env_dir("jax", "0.10.1")))
    _record("jax", "0.10.1", py, "0.10.1")
    raw = json.loads(envs.registry_path().read_text())
    assert "jax==0.10.1" in raw and "release" not in raw["jax==0.10.1"]  # the key says it
    rec = envs.get("jax", "0.10.1")
    assert rec is not None and rec.release == "0.10.1" and rec.framework == "jax" and rec.key == "jax==0.10.1"
    assert envs.get("jax") is None  # the default environment is another entry
    assert [r.key for r in envs.releases("jax")] == ["jax==0.10.1"]
    assert envs.forget("jax", "0.10.1") and envs.releases("jax") == []
    with pytest.raises(envs.EnvError, match="NAME==VERSION"):
        envs.split_key("jax=0.10.1")
    with pytest.raises(envs.EnvError, match="release looks like"):
        envs.split_key("jax==../../x")


def test_a_point_asking_for_a_release_runs_in_its_environment(temp_home: Path) -> None:
    py = _python(envs.venv_python(envs.env_dir("jax", "0.10.1")))
    _record("jax", "0.10.1", py, "0.10.1")
    assert interpreter_for("jax", "0.10.1") == py
    st = state("jax", "0.10.1")
    assert st.installed and st.version == "0.10.1" and st.release == "0.10.1"
    with pytest.raises(NotInstalled, match=r"framework jax==0.10.2 is not installed.*dlbench setup jax==0.10.2"):
        interpreter_for("jax", "0.10.2")


def test_the_default_environment_serves_the_release_it_holds(temp_home: Path) -> None:
    py = _python(envs.venv_python(envs.env_dir("jax")))
    envs.record(envs.EnvRecord("jax", py, "0.10.2", "2026", " ".join(envs.install_source("jax"))))
    assert interpreter_for("jax", "0.10.2") == py
    with pytest.raises(NotInstalled, match=r"its default environment holds 0.10.2\): run: dlbench setup jax==0.10.1"):
        interpreter_for("jax", "0.10.1")


def test_the_fake_backend_takes_any_release_without_setup() -> None:
    st = state("fake", "2.0")
    assert st.installed and st.version == "2.0" and st.python == sys.executable


def test_requirements_pin_the_release_packages_and_keep_the_others() -> None:
    jax = backends.get_info("jax")
    reqs, pinned = requirements(jax, "0.10.1", "jax", (3, 11, 7))
    assert "jax==0.10.1" in reqs and "jaxlib==0.10.1" in reqs and pinned == ["jax", "jaxlib"]
    assert not any(r.startswith(("jax==0.10.2", "jaxlib==0.10.2")) for r in reqs)  # the extra's own pin is replaced
    assert any(r.startswith("optax") for r in reqs) and not any(";" in r for r in reqs)  # markers evaluated
    newer, _ = requirements(jax, "0.11.0", "jax", (3, 12, 1))  # the extra's 3.12 branch
    assert "jax==0.11.0" in newer and any(r.startswith("flax") and "<0.13" in r for r in newer)
    gpu, _ = requirements(jax, "0.10.1", "jax-cuda", (3, 11, 7))  # dlbench[jax] inside jax-cuda is followed
    assert "jax[cuda13]==0.10.1" in gpu and "jaxlib==0.10.1" in gpu
    assert requirements(backends.get_info("torch"), "2.12.0", "torch", (3, 11, 7)) == (["torch==2.12.0"], ["torch"])


def _index(offers: dict[str, dict[str, list[str]]]) -> Callable[[Sequence[str]], subprocess.CompletedProcess[str]]:
    """A stand-in for `pip index versions DIST --python-version X.Y ...`: offers[dist][X.Y] (or [''] for any)."""

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        dist = argv[5]
        minor = argv[argv.index("--python-version") + 1] if "--python-version" in argv else ""
        versions = offers.get(dist, {}).get(minor, offers.get(dist, {}).get("", []))
        return subprocess.CompletedProcess(list(argv), 0, json.dumps({"name": dist, "versions": versions}), "")

    return run


def test_the_index_listing_is_read_and_ordered() -> None:
    run = _index({"jax": {"": ["0.10.0", "0.9.0.1", "0.10.2", "0.9.0", "0.11.0rc1"]}})
    assert offered("jax", None, run) == ["0.9.0", "0.9.0.1", "0.10.0", "0.10.2", "0.11.0rc1"]
    assert ordered(["0.10.0", "0.9.2", "0.9.10"]) == ["0.9.2", "0.9.10", "0.10.0"]
    assert in_range(offered("jax", None, run), "0.9.0", "0.11.0") == ["0.9.0", "0.9.0.1", "0.10.0", "0.10.2", "0.11.0"]
    with pytest.raises(ReleaseError, match="must be older"):
        in_range([], "0.10.0", "0.9.0")


def test_a_release_gets_a_python_its_wheels_exist_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """jax 0.11 has no wheel for 3.11: setup picks the 3.12 found, or names the Pythons that would take it."""
    from dlbench.envs import releases

    here = probe(sys.executable)
    assert here is not None
    py312 = Interpreter("/opt/py312/bin/python", (3, 12, 1))
    monkeypatch.setattr(releases, "probe", lambda path: Interpreter(here.path, (3, 11, 7)))
    monkeypatch.setattr(releases, "discover", lambda: [py312])
    offers = {
        "jax": {"3.11": ["0.10.1"], "3.12": ["0.10.1", "0.11.0"]},
        "jaxlib": {"3.11": ["0.10.1"], "3.12": ["0.11.0"]},
    }
    jax = backends.get_info("jax")
    assert choose_for_release(jax, "0.10.1", "cpu", None, _index(offers)).minor == (3, 11)  # this one first
    assert choose_for_release(jax, "0.11.0", "cpu", None, _index(offers)) == py312
    monkeypatch.setattr(releases, "discover", lambda: [])
    with pytest.raises(ReleaseError, match=r"jax 0.11.0 has wheels for Python 3.12, not for the Python 3.11.7 found"):
        choose_for_release(jax, "0.11.0", "cpu", None, _index(offers))
    with pytest.raises(ReleaseError, match=r"the package index has no jax 0\.99\.0"):
        choose_for_release(jax, "0.99.0", "cpu", None, _index(offers))


def test_setup_of_a_release_installs_dlbench_and_the_pinned_release(
    temp_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """setup_one with every command faked: the release's folder, pip's arguments, the check of what pip installed."""
    calls: list[list[str]] = []
    installed = {"version": "0.10.1"}
    monkeypatch.setattr(provision, "_run_logged", lambda argv, log, label, console: calls.append(list(argv)) or 0)
    monkeypatch.setattr(provision, "_ask", lambda python, *args, timeout: dict(installed))
    monkeypatch.setattr(provision, "probe_framework", lambda python, info: dict(installed))
    here = probe(sys.executable)
    assert here is not None
    plan = provision.Plan(backends.get_info("jax"), here, "cpu", release="0.10.1")
    rec = provision.setup_one(plan, recreate=False, check_cases=False, feedback=ConsoleFeedback(Console(stderr=True)))
    assert calls[0][:3] == [here.path, "-m", "venv"] and calls[0][3] == str(temp_home / "envs" / "jax-0.10.1")
    pip = calls[1]
    assert pip[:4] == [str(envs.venv_python(temp_home / "envs" / "jax-0.10.1")), "-m", "pip", "install"]
    assert "jax==0.10.1" in pip and "jaxlib==0.10.1" in pip and not any(a.endswith("[jax]") for a in pip)
    assert rec.key == "jax==0.10.1" and envs.get("jax", "0.10.1") == rec and envs.get("jax") is None
    installed["version"] = "0.10.2"  # pip resolved another release: refused, not recorded under 0.10.1
    envs.forget("jax", "0.10.1")
    with pytest.raises(provision.SetupFailed, match=r"pip installed jax 0\.10\.2, not 0\.10\.1"):
        provision.setup_one(plan, recreate=False, check_cases=False, feedback=ConsoleFeedback(Console(stderr=True)))
    assert envs.get("jax", "0.10.1") is None


def test_setup_refuses_bad_release_arguments(cli: Callable[..., CliResult]) -> None:
    for args, message in (
        (("jax=0.10.1",), "NAME==VERSION"),
        (("jax==",), "release looks like"),
        (("fake==1.0",), "takes any release without one"),
        (("jax==0.10.1", "jax==0.10.1"), "named twice"),
    ):
        code, _, err = cli("setup", *args)
        assert code == 2 and message in err and "Traceback" not in err, (args, err)


def test_existing_registers_an_interpreter_under_its_release(
    cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(provision, "probe_framework", lambda python, info: {"version": "0.9.0", "dlbench": None})
    monkeypatch.setattr(provision, "_this_checkout", lambda origin: True)
    monkeypatch.setattr(provision, "_ask", lambda python, *args, timeout: {"version": "0.9.0"})
    code, _, err = cli("setup", "jax==0.9.0", "--existing", sys.executable, "--no-case-check")
    assert code == 0, err
    rec = envs.get("jax", "0.9.0")
    assert rec is not None and rec.existing and rec.version == "0.9.0"
    code, _, err = cli("setup", "jax==0.10.1", "--existing", sys.executable, "--no-case-check")
    assert code == 2 and "has jax 0.9.0, not 0.10.1" in err


def test_list_shows_each_release_and_says_when_their_pythons_differ(
    cli: Callable[..., CliResult], temp_home: Path
) -> None:
    _record("jax", "0.10.1", _python(envs.venv_python(envs.env_dir("jax", "0.10.1"))), "0.10.1", "3.11.7")
    _record("jax", "0.11.0", _python(envs.venv_python(envs.env_dir("jax", "0.11.0"))), "0.11.0", "3.12.1")
    code, out, _ = cli("list", "--wide")
    flat = " ".join(out.split())
    assert code == 0
    assert "jax==0.10.1 yes 0.10.1" in flat and "jax==0.11.0 yes 0.11.0" in flat
    assert "jax's releases run on different Pythons (0.10.1 on Python 3.11.7, 0.11.0 on Python 3.12.1)" in flat
