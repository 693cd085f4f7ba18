"""`dlbench setup FW ...`: create or reuse one venv per framework, install dlbench with its extra, record it."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import click
from rich.console import Console

from dlbench.backends import BackendInfo, all_backends, get_info
from dlbench.launch import venvs as envs


class SetupFailed(Exception):
    """One framework's setup failed; the message is one line."""


def requirement(info: BackendInfo) -> list[str]:
    """pip arguments installing dlbench with the framework's extra (envs.install_source)."""
    return envs.install_source(info.extra)


def _run_logged(argv: Sequence[str], log: Path, label: str, console: Console) -> int:
    """Run argv, appending its output to log and showing its last line compactly; returns the exit code."""
    with log.open("a", encoding="utf-8") as fh, console.status(label) as status:
        fh.write(f"$ {' '.join(argv)}\n")
        fh.flush()
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            text = line.strip()
            if text:
                status.update(f"{label}: {text[:100]}")
        return proc.wait()


def _last_error(log: Path) -> str:
    """The most telling line of a pip log: the last ERROR line, else the last line."""
    lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["no output"])[-1][:300]


def _ask(python: str, *args: str, timeout: float) -> dict[str, object]:
    """Run `python -m dlbench.check ARGS` and parse its JSON answer; SetupFailed on any failure."""
    try:
        proc = subprocess.run([python, "-m", "dlbench.check", *args], capture_output=True, text=True,
                              timeout=timeout, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SetupFailed(f"`dlbench.check {' '.join(args)}` took over {timeout:g} s") from None
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SetupFailed(f"`dlbench.check {' '.join(args)}` failed: {tail[:300]}")
    answer = json.loads(lines[-1])
    if not isinstance(answer, dict):
        raise SetupFailed(f"`dlbench.check {' '.join(args)}` answered {lines[-1][:100]}")
    return answer


def setup_one(info: BackendInfo, recreate: bool, base_python: str, check_cases: bool, console: Console) -> envs.EnvRecord:
    """Create or reuse the framework's venv, install into it, verify and record it; SetupFailed on failure."""
    fw = info.name
    folder = envs.env_dir(fw)
    python = envs.venv_python(folder)
    stamp = datetime.datetime.now(datetime.timezone.utc)
    envs.logs_dir().mkdir(parents=True, exist_ok=True)
    log = envs.logs_dir() / f"setup-{fw}-{stamp:%Y%m%dT%H%M%S}.log"
    if recreate and folder.exists():
        shutil.rmtree(folder)
    created = stamp.isoformat(timespec="seconds")
    if python.is_file():
        old = envs.get(fw)
        created = old.created if old and old.created else created
        console.print(f"{fw}: reusing {folder}")
    else:
        code = _run_logged([base_python, "-m", "venv", str(folder)], log, f"{fw}: creating {folder}", console)
        if code != 0:
            raise SetupFailed(f"{fw}: could not create a venv at {folder}: {_last_error(log)} (log: {log})")
    argv = [str(python), "-m", "pip", "install", "--progress-bar", "off", *requirement(info)]
    code = _run_logged(argv, log, f"{fw}: pip install", console)
    if code != 0:
        raise SetupFailed(f"{fw}: pip install failed: {_last_error(log)} (full log: {log})")
    version = _ask(str(python), "version", fw, timeout=120).get("version")
    if not version:
        raise SetupFailed(f"{fw}: installed, but {info.distribution} is not importable in {folder} (log: {log})")
    cases: dict[str, object] = {}
    if check_cases:
        with console.status(f"{fw}: checking which cases it can build"):
            try:
                answer = _ask(str(python), "params", fw, timeout=900)
                cases = {k: v for k, v in answer.items() if k != "version"}
            except SetupFailed as exc:
                console.print(f"[yellow]{fw}: per-case support not cached: {exc}[/yellow]")
    rec = envs.EnvRecord(framework=fw, python=str(python), version=str(version), created=created,
                         source=" ".join(requirement(info)), cases=cases)
    envs.record(rec)
    return rec


def _targets(names: Sequence[str]) -> list[BackendInfo]:
    """Validate every name before anything is installed; 'all' = every installable framework."""
    if list(names) == ["all"]:
        return [i for i in all_backends().values() if not i.unavailable]
    infos = []
    for name in names:
        envs.check_name(name)
        info = get_info(name)
        if info.unavailable:
            raise click.UsageError(f"{name}: {info.unavailable}")
        if not info.extra:
            raise click.UsageError(f"{name}: has no pip extra to install (a test backend)")
        infos.append(info)
    return infos


@click.command("setup")
@click.argument("frameworks", nargs=-1, required=True)
@click.option("--recreate", is_flag=True, help="Delete each environment and build it afresh.")
@click.option("--python", "base_python", default=sys.executable, show_default="this interpreter",
              help="Interpreter the venvs are created from.")
@click.option("--no-case-check", is_flag=True, help="Skip caching which cases each framework can build.")
def setup(frameworks: tuple[str, ...], recreate: bool, base_python: str, no_case_check: bool) -> int:
    """Create or reuse one environment per framework under $DLBENCH_HOME/envs (e.g. `dlbench setup jax tf`)."""
    if shutil.which(base_python) is None:
        raise click.BadParameter(f"no Python interpreter at {base_python}", param_hint="--python")
    try:
        infos = _targets(frameworks)
    except envs.EnvError as exc:
        raise click.UsageError(str(exc)) from None
    console = Console(stderr=True)
    failed = 0
    for info in infos:
        try:
            rec = setup_one(info, recreate, base_python, not no_case_check, console)
        except (SetupFailed, envs.EnvError) as exc:
            failed += 1
            click.echo(f"dlbench: error: {exc}", err=True)
            continue
        console.print(f"{info.name}: {info.distribution} {rec.version} in {Path(rec.python).parents[1]}")
    return 2 if failed else 0
