"""Every bad input gets one line on stderr and exit code 2, and nothing is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

CliResult = tuple[int, str, str]


@pytest.mark.parametrize("args, message", [
    (["run", "-m", "resnet51"], "unknown model 'resnet51'"),
    (["run", "-f", "caffe"], "unknown framework 'caffe'"),
    (["run", "--preset", "fastest"], "fastest"),
    (["run", "-b", "0"], "batch size must be a whole number >= 1"),
    (["run", "-b", "-4"], "batch size must be a whole number >= 1"),
    (["run", "-b", "eight"], "batch size must be a whole number >= 1"),
    (["run", "-p", "fp8"], "precision must be one of"),
    (["run", "--scale", "two"], "scale must look like"),
    (["run", "--memory-limit", "lots"], "memory size must look like"),
    (["run", "--data", "real"], "real data needs a data folder"),
    (["results", "nope"], "no run 'nope'"),
    (["frobnicate"], "No such command"),
])
def test_bad_input_is_one_line_and_exit_2(cli: Callable[..., CliResult], store_path: Path, args: list[str],
                                          message: str) -> None:
    if args[0] == "results":
        cli("run", "-f", "fake", "-m", "resnet50", "--steps", "1", "--warmup", "0", "--repeats", "1",
            "--store", str(store_path))
    code, out, err = cli(*args, "--store", str(store_path)) if args[0] in ("run", "results") else cli(*args)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_bad_run_writes_nothing(cli: Callable[..., CliResult], store_path: Path) -> None:
    code, _, _ = cli("run", "-m", "resnet50,nope", "--store", str(store_path))
    assert code == 2 and not store_path.exists()


def test_unwritable_store(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code, _, err = cli("run", "-f", "fake", "--store", str(blocker / "results.db"))
    assert code == 2 and "cannot open the store" in err and len(err.strip().splitlines()) == 1


def test_framework_not_installed(cli: Callable[..., CliResult], store_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import dlbench.backends as backends

    info = backends.get_info("torch")
    absent = backends.BackendInfo(info.name, info.title, "no_such_module_xyz", "no-such-dist", info.entry, "torch")
    monkeypatch.setattr(backends, "_BUILTIN", (absent,))
    monkeypatch.setenv("DLBENCH_HOME", str(store_path.parent / "home"))
    code, _, err = cli("run", "-f", "torch", "--store", str(store_path))
    assert code == 2 and "torch" in err and "not installed" in err
    assert not store_path.exists()
