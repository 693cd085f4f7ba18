"""`dlbench list` and `dlbench env`: what can run here, and what the store would record."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field

import click

from dlbench.backends import all_backends, get_info, gpu_builds
from dlbench.cases import Case, ImageInput, LatentInput, TextInput, all_cases
from dlbench.cli.output import stdout_console
from dlbench.cli.values import as_device
from dlbench.envs import cases_cache, venvs
from dlbench.envs.interpreters import installed, interpreter_for, probe, range_text, state
from dlbench.machine.env import host_descriptive, host_identity, physical_cores
from dlbench.machine.nvml import no_gpu_reason
from dlbench.report.families import builders_table, llama_family_table
from dlbench.report.fit import Cell
from dlbench.report.listing import (
    CASES_OPTIONAL,
    FRAMEWORKS_OPTIONAL,
    cases_table,
    env_table,
    frameworks_table,
    gpu_builds_table,
    styled,
    support_table,
)
from dlbench.report.moe_family import moe_family_table
from dlbench.spec import SpecError, release_key


def _support(case: Case, answer: object) -> str:
    """One cell of the case-support table from a cached `dlbench.check params` answer."""
    if answer is None:
        return "?"
    if isinstance(answer, int):
        return "yes" if answer == case.param_count else f"[red]{answer:,} params (ref {case.param_count:,})[/red]"
    text = str(answer)
    return "no: " + text.removeprefix("unsupported: ") if text.startswith("unsupported") else text


def _shape(inp: object) -> str:
    """A case input in one short cell: CxHxW, a sequence length, latents and text tokens, or a click-through row's
    feature counts."""
    if isinstance(inp, ImageInput):
        return f"{inp.channels}x{inp.size}x{inp.size}"
    if isinstance(inp, TextInput):
        return f"seq {inp.seq_len}"
    if isinstance(inp, LatentInput):  # a DiT's latents and text tokens (#48)
        return f"{inp.channels}x{inp.side}x{inp.side} + {inp.text_tokens} tokens"
    fields = getattr(inp, "__dataclass_fields__", {})
    return " ".join(f"{k} {getattr(inp, k)}" for k in fields) or type(inp).__name__


def _python_version(recorded: str, python: str) -> str:
    """The interpreter's version as recorded, else asked (registries older than the field), else '?'."""
    if recorded:
        return recorded
    found = probe(python)
    return found.label if found else "?"


def _live_cases(python: str, framework: str) -> dict[str, object]:
    """Ask an environment which cases it can build (slow: it builds every model)."""
    proc = subprocess.run(
        [python, "-m", "dlbench.check", "params", framework],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {}
    answer = json.loads(lines[-1])
    return {k: v for k, v in answer.items() if k != "version"} if isinstance(answer, dict) else {}


def _this_interpreter_cases(framework: str, python: str, version: str, where: str, check: bool) -> dict[str, object]:
    """The cases a framework installed in dlbench's own interpreter builds: cached, or asked now once (it has no
    `dlbench setup` to ask it) and cached; {} for a framework in an environment of its own."""
    if where != "this interpreter":
        return {}
    key = cases_cache.fingerprint(python, framework, version, ((c.name, c.param_count) for c in all_cases()))
    answers = {} if check else cases_cache.load(key)
    if not answers:
        click.echo(
            f"checking which cases {framework} builds in this interpreter (once; kept in the dlbench home)", err=True
        )
        answers = _live_cases(python, framework)
        if answers:
            cases_cache.store(key, answers)
    return answers


def _releases(name: str) -> list[venvs.EnvRecord]:
    """The releases of a framework set up, oldest first ([] where the registry cannot be read: its row says why)."""
    try:
        return sorted(venvs.releases(name), key=lambda r: release_key(r.release))
    except venvs.EnvError:
        return []


def _release_rows(name: str) -> list[list[Cell]]:
    """`dlbench list`'s rows for the releases of a framework set up beside its default environment (#49)."""
    rows: list[list[Cell]] = []
    for rec in _releases(name):
        st = state(name, rec.release)
        python = _python_version(st.python_version, st.python) if st.installed else "-"
        rows.append(
            [
                rec.key,
                "yes" if st.installed else "no",
                st.version or "-",
                st.build or "-",
                python,
                st.where or st.reason,
            ]
        )
    return rows


def _python_note(name: str) -> list[str]:
    """A line where a framework's releases were set up on different Pythons: comparing them compares those too."""
    recs = _releases(name)
    minors = {".".join(r.python_version.split(".")[:2]) for r in recs if r.python_version}
    if len(minors) < 2:
        return []
    each = ", ".join(f"{r.release} on Python {r.python_version}" for r in recs)
    return [f"{name}'s releases run on different Pythons ({each}): a comparison across them compares the Pythons too."]


def _case_rows() -> list[tuple[str, str, str, str, str, str]]:
    """One row per case: name, title, input shape, optimizer, trainable parameters, fixed / CPU batch."""
    rows = []
    for c in all_cases():
        opt = f"{c.optimizer.name} lr {c.optimizer.lr:g}" + (
            f" m {c.optimizer.momentum:g}" if c.optimizer.momentum else ""
        )
        rows.append((c.name, c.title, _shape(c.input), opt, f"{c.param_count:,}", f"{c.batch_fixed} / {c.batch_cpu}"))
    return rows


@dataclass
class _Frameworks:
    """`dlbench list`'s framework rows (each followed by its releases' rows), each installed one's case support,
    the frameworks whose support is not checked, and the notes on their Pythons."""

    rows: list[list[Cell]] = field(default_factory=list)
    support: list[list[Cell]] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    pythons: list[str] = field(default_factory=list)
    answered: dict[str, dict[str, object]] = field(default_factory=dict)  # each installed one's answers ({}: none)


def _frameworks(check: bool) -> _Frameworks:
    """Every registered framework: installed or not, version, build, Python, where; which cases it can build."""
    found = _Frameworks()
    for name, info in all_backends().items():
        st = state(name)
        found.rows.append(
            [
                f"{name} ({info.title})",
                "yes" if st.installed else "no",
                st.version or "-",
                (st.build or "?") if st.installed else "-",
                _python_version(st.python_version, st.python) if st.installed else f"needs {range_text(info)}",
                st.where or st.reason,
            ]
        )
        found.rows += _release_rows(name)
        found.pythons += _python_note(name)
        if not st.installed:
            continue
        answers = st.cases or _this_interpreter_cases(name, st.python, st.version or "", st.where, check)
        if not answers and check:
            answers = _live_cases(st.python, name)
        if not answers:
            found.unchecked.append(name)
        found.answered[name] = dict(answers or {})
        found.support.append(
            [name, *(styled(_support(c, answers.get(c.name) if answers else None)) for c in all_cases())]
        )
    return found


@click.command("list")
@click.option(
    "--check", is_flag=True, help="Ask installed frameworks without a cached answer which cases they can build (slow)."
)
@click.option(
    "--wide",
    is_flag=True,
    help=f"Keep every column ({', '.join(CASES_OPTIONAL + FRAMEWORKS_OPTIONAL)} are "
    "left out where the terminal is too narrow); outside a terminal, print the tables at full width.",
)
def list_cmd(check: bool, wide: bool = False) -> None:
    """Cases with their parameter counts, and frameworks: installed or not, which version, CPU or GPU build, which
    Python (or the range it needs), where, which cases."""
    out = stdout_console(wide)
    out.print(cases_table(_case_rows(), wide=wide))
    out.print(llama_family_table(wide))
    out.print(moe_family_table(wide))
    fws = _frameworks(check)
    out.print(frameworks_table(fws.rows, wide=wide))
    for line in fws.pythons:
        out.print(line, highlight=False, markup=False)
    builds = {name: gpu_builds(name) for name in all_backends()}
    out.print(
        gpu_builds_table(
            [
                (name, b.hopper, b.blackwell, "yes" if b.on_pypi else "no", b.how)
                for name, b in builds.items()
                if b is not None
            ],
            wide=wide,
        )
    )
    out.print(support_table([c.name for c in all_cases()], fws.support))
    out.print(builders_table(fws.answered, wide))
    if fws.unchecked:
        out.print(
            f"? = not checked for {', '.join(fws.unchecked)}: `dlbench setup FW` caches it, "
            f"or `dlbench list --check` asks now."
        )


@click.command("env")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option(
    "--framework",
    "framework",
    default=None,
    help="With --device cuda: the framework asked whether it sees the GPU too (default: torch where installed).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def env(device: str, framework: str | None, as_json: bool) -> None:
    """The environment the store would record (the framework's own keys are added by its worker). With --device
    cuda it exits 2, naming the cause, when NVML or the framework sees no GPU."""
    chosen = as_device(device)
    ident = host_identity(chosen, physical_cores())
    desc = host_descriptive(chosen)
    if as_json:
        click.echo(json.dumps({"identity": ident, "descriptive": desc}, indent=2))
    else:
        rows = [(k, v, "identity") for k, v in ident.items()] + [(k, v, "descriptive") for k, v in desc.items()]
        stdout_console().print(env_table(rows))
    if device == "cuda":
        problems = [p for p in (no_gpu_reason(), _framework_gpu(framework)) if p]
        if problems:
            raise SpecError(f"--device cuda: {'; '.join(problems)}")


def _framework_gpu(framework: str | None) -> str | None:
    """Why the framework's interpreter sees no GPU (its own refusal of a CUDA point), or None; torch by default,
    where it is installed (not asked where it is not)."""
    name = framework or "torch"
    get_info(name)  # an unknown name: one line, exit 2
    if not installed(name):
        if framework is None:
            return None
        return f"{name} is not installed here ({state(name).reason})"
    try:
        proc = subprocess.run(
            [interpreter_for(name), "-m", "dlbench.check", "cuda", name],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        reason = json.loads(proc.stdout.strip().splitlines()[-1])["reason"] if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError, KeyError) as exc:
        return f"{name} could not be asked whether it sees the GPU ({type(exc).__name__})"
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return f"{name} could not be asked whether it sees the GPU (exit {proc.returncode}: {tail})"
    return f"{name}: {reason}" if reason else None
