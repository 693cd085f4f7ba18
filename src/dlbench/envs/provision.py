"""Provisioning framework environments: plan each framework's interpreter and build (checked before anything is
written), create or reuse its venv, install dlbench with the framework's extra, verify and record it; or register an
interpreter that has the framework already. `dlbench setup` is the command over it."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import click

from dlbench.backends import BackendInfo, advice, all_backends, get_info
from dlbench.envs import venvs as envs
from dlbench.envs.interpreters import (
    Interpreter,
    NoInterpreter,
    build_of,
    choose,
    misfit,
    named,
    probe,
    same_release,
)
from dlbench.envs.releases import ReleaseError, choose_for_release, requirements
from dlbench.machine.nvml import gpu_info
from dlbench.spec import release_label


class Feedback(Protocol):
    """What setup tells its user while it works; the command shows it (cli/feedback.py: ConsoleFeedback), so no
    console lives below the CLI."""

    @property
    def live(self) -> bool:
        """Whether a live status line is seen (a terminal): then stages print no start and end lines."""
        ...

    def say(self, text: str, warning: bool = False) -> None:
        """One plain line (a warning stands out)."""
        ...

    def status(self, label: str) -> AbstractContextManager[Callable[[str], None]]:
        """A live status line while the block runs; the block gets a function that replaces its text."""
        ...


@contextmanager
def stage(feedback: Feedback, label: str, log: Path | None = None) -> Iterator[None]:
    """Outside a terminal (no spinner to see) a line when a setup stage starts, naming its log, and one when it
    ends, with its duration; on a terminal, nothing (the spinner says it)."""
    if feedback.live:
        yield
        return
    feedback.say(f"{label} ..." + (f" (output in {log})" if log else ""))
    start = time.monotonic()
    yield
    feedback.say(f"{label}: finished in {time.monotonic() - start:,.0f} s")


class SetupFailed(Exception):
    """One framework's setup failed; the message is one line."""


def requirement(info: BackendInfo) -> list[str]:
    """pip arguments installing dlbench with the framework's extra (envs.install_source)."""
    return envs.install_source(info.extra)


def _run_logged(argv: Sequence[str], log: Path, label: str, feedback: Feedback) -> int:
    """Run argv, appending its output to log and showing its last line compactly; returns the exit code."""
    with log.open("a", encoding="utf-8") as fh, stage(feedback, label, log), feedback.status(label) as update:
        fh.write(f"$ {' '.join(argv)}\n")
        fh.flush()
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                fh.write(line)
                text = line.strip()
                if text:
                    update(f"{label}: {text[:100]}")
            return proc.wait()
        except BaseException:  # SIGTERM / Ctrl-C (KeyboardInterrupt, cli._interrupt): pip must not live on
            _end(proc)
            raise


def _end(proc: subprocess.Popen[str], grace_s: float = 10.0) -> None:
    """Stop a child: SIGTERM, then SIGKILL after grace_s; reaped either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _last_error(log: Path) -> str:
    """The most telling line of a pip log: the last ERROR line, else the last line."""
    lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["no output"])[-1][:300]


def _ask(python: str, *args: str, timeout: float) -> dict[str, object]:
    """Run `python -m dlbench.check ARGS` and parse its JSON answer; SetupFailed on any failure."""
    try:
        proc = subprocess.run(
            [python, "-m", "dlbench.check", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
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


# Run in the target interpreter (>= 3.10, so importlib.metadata has packages_distributions): is the framework
# there, which distributions provide it, is dlbench there and from where, and which of dlbench's own requirements
# are missing. Never imports the framework.
_PROBE = """
import importlib.metadata as md, importlib.util, json, re, sys
name, dist = sys.argv[1], sys.argv[2]
def spec(n):
    try:
        return importlib.util.find_spec(n)
    except (ImportError, ValueError):
        return None
version, provides = None, []
if spec(name) is not None:
    provides = [dist] + [d for d in md.packages_distributions().get(name, []) if d != dist]
    for d in provides:
        try:
            version = md.version(d)
            break
        except md.PackageNotFoundError:
            pass
names = {(d.metadata['Name'] or '') for d in md.distributions()}
cuda = sorted(n for n in names if n.lower().startswith('nvidia-') or 'cuda' in n.lower())
mine, missing = spec('dlbench'), []
if mine is not None:
    try:
        reqs = md.requires('dlbench') or []
    except md.PackageNotFoundError:
        reqs = []
    for r in reqs:
        if 'extra ==' not in r:
            n = re.match(r'[A-Za-z0-9._-]+', r).group(0)
            try:
                md.version(n)
            except md.PackageNotFoundError:
                missing.append(n)
print(json.dumps({'version': version, 'provides': [d for d in provides if d in names], 'cuda': cuda,
                  'dlbench': mine.origin if mine else None, 'missing': missing}))
"""


def probe_framework(python: str, info: BackendInfo) -> dict[str, object]:
    """What an interpreter holds of the framework and of dlbench (see _PROBE); SetupFailed if it cannot answer."""
    try:
        proc = subprocess.run(
            [python, "-c", _PROBE, info.import_name, info.distribution],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            stdin=subprocess.DEVNULL,
            cwd="/",
        )
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        raise SetupFailed(f"{python} could not say whether it has {info.distribution}") from None
    if not isinstance(answer, dict):
        raise SetupFailed(f"{python} could not say whether it has {info.distribution}")
    return answer


def build_from(answer: dict[str, object], fallback: str) -> str:
    """'cuda' or 'cpu' as the installed distributions say (interpreters.build_of), else the fallback."""
    dists = tuple(str(d) for d in [*answer.get("provides", []), *answer.get("cuda", [])])  # type: ignore[misc]
    return build_of(str(answer.get("version") or ""), dists) or fallback


@dataclass(frozen=True)
class Plan:
    """Everything one framework's setup will do, decided and checked before anything is written."""

    info: BackendInfo
    python: Interpreter
    build: str  # "cpu" or "cuda" (for an existing interpreter: what its distributions say, "" if unknown)
    existing: bool = False
    pinned: bool = False  # the user named the interpreter: an environment of another Python is rebuilt
    index_url: str | None = None
    version: str = ""  # an existing interpreter's framework version
    release: str | None = None  # the release set up (`dlbench setup jax==0.10.1`), in an environment of its own

    @property
    def extra(self) -> str:
        """The pyproject extra installed: the GPU build's where it is one."""
        return self.info.cuda_extra if self.build == "cuda" and not self.existing else self.info.extra

    @property
    def key(self) -> str:
        """What it is set up as: 'jax', or 'jax==0.10.1'."""
        return release_label(self.info.name, self.release)

    def install_args(self) -> list[str]:
        """What pip installs: dlbench with the framework's extra, or for a release dlbench alone and the extra's
        requirements with the release's packages pinned to it (envs/releases.py)."""
        if self.release is None:
            return envs.install_source(self.extra)
        return [*envs.install_source(""), *requirements(self.info, self.release, self.extra, self.python.version)[0]]


def _log(fw: str) -> Path:
    stamp = datetime.datetime.now(datetime.timezone.utc)
    envs.logs_dir().mkdir(parents=True, exist_ok=True)
    return envs.logs_dir() / f"setup-{fw}-{stamp:%Y%m%dT%H%M%S}.log"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _cases(python: str, fw: str, check_cases: bool, feedback: Feedback) -> dict[str, object]:
    """The cached per-case support answer, or {} when skipped or failed (said so)."""
    if not check_cases:
        return {}
    label = f"{fw}: checking which cases it can build"
    with stage(feedback, label), feedback.status(label):
        try:
            answer = _ask(python, "params", fw, timeout=900)
            return {k: v for k, v in answer.items() if k != "version"}
        except SetupFailed as exc:
            feedback.say(f"{fw}: per-case support not cached: {exc}", warning=True)
            return {}


def _make_venv(plan: Plan, folder: Path, log: Path, feedback: Feedback) -> None:
    """A venv from the plan's interpreter; through `uv venv --seed` where `-m venv` fails (Debian strips ensurepip)."""
    fw = plan.key
    code = _run_logged([plan.python.path, "-m", "venv", str(folder)], log, f"{fw}: creating {folder}", feedback)
    uv = shutil.which("uv")
    if code != 0 and uv is not None:
        shutil.rmtree(folder, ignore_errors=True)
        code = _run_logged(
            [uv, "venv", "--seed", "--python", plan.python.path, str(folder)],
            log,
            f"{fw}: creating {folder} with uv",
            feedback,
        )
    if code != 0:
        raise SetupFailed(f"{fw}: could not create a venv at {folder}: {_last_error(log)} (log: {log})")


def _venv(plan: Plan, folder: Path, recreate: bool, log: Path, feedback: Feedback) -> str:
    """Reuse the plan's venv (rebuilt where its Python no longer fits, or another was asked for) or make it; when it
    was first created."""
    python, key = envs.venv_python(folder), plan.key
    if python.is_file() and not recreate:
        have = probe(str(python))
        if have is None or misfit(plan.info, have.minor) or (plan.pinned and have.minor != plan.python.minor):
            was = f"Python {have.label}" if have else "broken"
            feedback.say(f"{key}: its venv is {was}; rebuilding it with Python {plan.python.label}")
            recreate = True
    if recreate and folder.exists():
        shutil.rmtree(folder)
    if python.is_file():
        old = envs.get(plan.info.name, plan.release)
        feedback.say(f"{key}: reusing {folder}")
        return old.created if old and old.created else _now()
    _make_venv(plan, folder, log, feedback)
    return _now()


def setup_one(plan: Plan, recreate: bool, check_cases: bool, feedback: Feedback) -> envs.EnvRecord:
    """Create or reuse the framework's venv (a release's own), install into it, verify and record it; SetupFailed on
    failure."""
    info, fw, key = plan.info, plan.info.name, plan.key
    folder = envs.env_dir(fw, plan.release)
    python = envs.venv_python(folder)
    log = _log(key)
    created = _venv(plan, folder, recreate, log, feedback)
    try:
        args = plan.install_args()
    except ReleaseError as exc:
        raise SetupFailed(f"{key}: {exc}") from None
    argv = [str(python), "-m", "pip", "install", "--progress-bar", "off", *args]
    if plan.index_url:
        argv += ["--extra-index-url", plan.index_url]
    try:
        code = _run_logged(argv, log, f"{key}: pip install ({plan.build} build)", feedback)
    except KeyboardInterrupt:  # pip stopped half-way: the environment is no longer known to be whole
        if envs.forget(fw, plan.release):
            feedback.say(
                f"{key}: interrupted during pip install; its environment is no longer marked ready: "
                f"run `dlbench setup {key}` again"
            )
        raise
    if code != 0:
        raise SetupFailed(f"{key}: pip install failed: {_last_error(log)} (full log: {log})")
    version = _ask(str(python), "version", fw, timeout=120).get("version")
    if not version:
        raise SetupFailed(f"{key}: installed, but {info.distribution} is not importable in {folder} (log: {log})")
    if plan.release is not None and not same_release(str(version), plan.release):
        raise SetupFailed(f"{key}: pip installed {info.distribution} {version}, not {plan.release} (log: {log})")
    have, build = probe(str(python)), plan.build
    if build == "cuda" and build_from(probe_framework(str(python), info), "") == "cpu":
        build = "cpu"  # e.g. a +cpu wheel from a find-links folder won over PyPI's CUDA one
        feedback.say(f"{key}: the GPU build was asked for, but pip installed a CPU one", warning=True)
    rec = envs.EnvRecord(
        framework=fw,
        python=str(python),
        version=str(version),
        created=created,
        source=" ".join(envs.install_source(plan.extra if plan.release is None else "")),
        cases=_cases(str(python), fw, check_cases, feedback),
        python_version=have.label if have else plan.python.label,
        build=build,
        release=plan.release or "",
    )
    envs.record(rec)
    return rec


def _this_checkout(origin: object) -> bool:
    """Whether a dlbench found at `origin` (its __init__.py) is this checkout's."""
    root = envs.source_root()
    return root is not None and isinstance(origin, str) and Path(origin).resolve().is_relative_to(root / "src")


def setup_existing(plan: Plan, check_cases: bool, feedback: Feedback) -> envs.EnvRecord:
    """Register an interpreter that has the framework: install dlbench alone into it (`--no-deps`: nothing else
    changes) unless it already runs this checkout, check dlbench's own requirements are there, record it."""
    info, fw, python, key = plan.info, plan.info.name, plan.python.path, plan.key
    source = envs.install_source("")
    answer = probe_framework(python, info)
    if not _this_checkout(answer.get("dlbench")):
        log = _log(key)
        argv = [python, "-m", "pip", "install", "--no-deps", "--progress-bar", "off", *source]
        if _run_logged(argv, log, f"{key}: pip install --no-deps dlbench", feedback) != 0:
            raise SetupFailed(
                f"{key}: pip install --no-deps dlbench into {python} failed: {_last_error(log)} (full log: {log})"
            )
        answer = probe_framework(python, info)
    missing = [str(m) for m in answer.get("missing", [])]  # type: ignore[attr-defined]
    if missing:
        raise SetupFailed(
            f"{key}: {python} lacks dlbench's own requirements {', '.join(missing)}; dlbench leaves "
            f"its packages alone: install them there ({python} -m pip install {' '.join(missing)})"
        )
    version = _ask(python, "version", fw, timeout=120).get("version") or plan.version
    rec = envs.EnvRecord(
        framework=fw,
        python=python,
        version=str(version),
        created=_now(),
        source=" ".join(source),
        cases=_cases(python, fw, check_cases, feedback),
        python_version=plan.python.label,
        build=plan.build,
        existing=True,
        release=plan.release or "",
    )
    envs.record(rec)
    return rec


def gpu_present() -> bool:
    """Whether NVML sees an NVIDIA GPU here (the driver is installed)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(gpu_info().devices)


@dataclass(frozen=True)
class Target:
    """One argument of `dlbench setup`: a framework, and the release asked for (None: its default environment)."""

    info: BackendInfo
    release: str | None = None


def targets(names: Sequence[str]) -> list[Target]:
    """Validate every name (jax, or jax==0.10.1) before anything is installed; 'all' = every installable framework."""
    if list(names) == ["all"]:
        return [Target(i) for i in all_backends().values() if not i.unavailable]
    out = []
    for text in names:
        name, release = envs.split_key(text)
        info = get_info(name)
        if info.unavailable:
            raise click.UsageError(f"{name}: {info.unavailable}")
        if not info.extra:
            why = " (it takes any release without one: -f fake==1.0)" if release else ""
            raise click.UsageError(f"{name}: has no pip extra to install (a test backend){why}")
        out.append(Target(info, release))
    if len({(t.info.name, t.release) for t in out}) != len(out):
        raise click.UsageError("a framework (or release) is named twice")
    return out


def _build(info: BackendInfo, cuda: bool | None, gpu: bool, index_url: str | None, notes: list[str]) -> str:
    """'cuda' or 'cpu' for a new environment; UsageError (one line) where the GPU build cannot be had as asked."""
    if not (gpu if cuda is None else cuda):
        return "cpu"
    if not info.cuda_extra:
        if cuda:
            raise click.UsageError(
                f"{advice(info.name)}. Leave out --cuda, or register an interpreter that has a "
                f"GPU build with --existing PATH"
            )
        notes.append(
            f"an NVIDIA GPU is here, but dlbench installs no GPU build of it: the CPU build. {advice(info.name)}"
        )
        return "cpu"
    if cuda:
        notes.append(advice(info.name))  # what runs on a Hopper or Blackwell GPU, said before installing
    if info.cuda_index and not index_url:
        why = "--cuda" if cuda else "an NVIDIA GPU is here, so the GPU build"
        raise click.UsageError(
            f"{info.name}: {why} (extra {info.cuda_extra}) needs another index than PyPI: "
            f"pass --index-url {info.cuda_index} (or --cpu for the CPU build)"
        )
    return "cuda"


def plan(
    infos: Sequence[BackendInfo | Target],
    python: str | None,
    existing: str | None,
    cuda: bool | None,
    index_url: str | None,
    feedback: Feedback,
    skip_misfits: bool = False,
) -> list[Plan]:
    """Check every framework's interpreter and build before anything is installed; UsageError (one line) if not.
    With skip_misfits (`setup all`), a framework that the interpreter does not fit, or an existing interpreter
    lacks, is left out with a note instead; UsageError only if none is left."""
    gpu = cuda is None and existing is None and gpu_present()
    plans: list[Plan] = []
    notes: list[str] = []  # shown once every framework passed its checks (a refusal stays one line)
    for target in infos:
        info, release = (target.info, target.release) if isinstance(target, Target) else (target, None)
        try:
            if existing is not None:
                found = named(info, existing or sys.executable)
                answer = probe_framework(found.path, info)
                if not answer.get("version"):
                    if skip_misfits:
                        notes.append(f"{info.name}: skipped: {found.path} has no {info.distribution}")
                        continue
                    raise click.UsageError(
                        f"{info.name}: {found.path} has no {info.distribution}: install it there, "
                        f"or leave out --existing to let dlbench make an environment"
                    )
                version = str(answer["version"])
                if release is not None and not same_release(version, release):
                    raise click.UsageError(
                        f"{info.name}=={release}: {found.path} has {info.distribution} {version}, not {release}"
                    )
                plans.append(Plan(info, found, build_from(answer, ""), True, version=version, release=release))
                continue
            build = _build(info, cuda, gpu, index_url, notes)
            chosen = choose(info, python) if release is None else choose_for_release(info, release, build, python)
            plans.append(Plan(info, chosen, build, pinned=python is not None, index_url=index_url, release=release))
        except ReleaseError as exc:
            raise click.UsageError(f"{info.name}=={release}: {exc}") from None
        except NoInterpreter as exc:
            if not skip_misfits:
                raise click.UsageError(f"{info.name}: {exc}") from None
            notes.append(f"{info.name}: skipped: {exc}")
        except SetupFailed as exc:
            raise click.UsageError(str(exc)) from None
    if not plans:
        raise click.UsageError(f"no framework to set up: {'; '.join(notes)}"[:600])
    for note in notes:
        feedback.say(note)
    return plans
