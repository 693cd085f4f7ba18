"""`dlbench setup FW ...`: create or reuse one venv per framework from an interpreter its wheels support, install
dlbench with its extra (the CPU or the GPU build), record it; or register an interpreter that has it already. FW==VERSION
(jax==0.10.1) sets up that release in an environment of its own, beside the default one (#49)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from dlbench.cli.feedback import ConsoleFeedback
from dlbench.envs import venvs as envs
from dlbench.envs.provision import SetupFailed, plan, setup_existing, setup_one, targets


@click.command("setup")
@click.argument("frameworks", nargs=-1, required=True)
@click.option(
    "--python",
    "python",
    metavar="X.Y|PATH",
    default=None,
    help="The interpreter of the framework's venv: a version (found on PATH, in pyenv or through uv) or a "
    "path. Default: this interpreter where the framework supports it, else the newest that it does.",
)
@click.option(
    "--existing",
    metavar="[PATH]",
    is_flag=False,
    flag_value="",
    default=None,
    help="Register an interpreter that already has the framework (default: this one); only dlbench "
    "itself is installed into it, with --no-deps.",
)
@click.option(
    "--cuda/--cpu",
    "cuda",
    default=None,
    help="The GPU (CUDA) or CPU build. Default: the GPU build where NVML finds an NVIDIA driver.",
)
@click.option(
    "--index-url",
    metavar="URL",
    default=None,
    help="An extra package index for builds PyPI lacks (e.g. paddlepaddle-gpu).",
)
@click.option("--recreate", is_flag=True, help="Delete each environment and build it afresh.")
@click.option("--no-case-check", is_flag=True, help="Skip caching which cases each framework can build.")
def setup(
    frameworks: tuple[str, ...],
    python: str | None,
    existing: str | None,
    cuda: bool | None,
    index_url: str | None,
    recreate: bool,
    no_case_check: bool,
) -> int:
    """Create or reuse one environment per framework under $DLBENCH_HOME/envs (e.g. `dlbench setup jax tf`), or one
    per release beside it (`dlbench setup jax==0.10.1 jax==0.10.2`, on a Python the release has wheels for), or
    register an interpreter that has it (--existing; with FW==VERSION under that release). `all`: every framework
    the interpreter fits (or has)."""
    if existing is not None and (python is not None or cuda is not None or recreate or index_url):
        raise click.UsageError(
            "--existing registers an interpreter as it is: it takes no --python, --cuda/--cpu, "
            "--index-url or --recreate"
        )
    if index_url is not None and not index_url.startswith(("https://", "http://", "file://")):
        raise click.BadParameter(f"{index_url!r} is not a package index URL (https://...)", param_hint="--index-url")
    try:
        infos = targets(frameworks)
    except envs.EnvError as exc:
        raise click.UsageError(str(exc)) from None
    console = Console(stderr=True)
    feedback = ConsoleFeedback(console)
    plans = plan(infos, python, existing, cuda, index_url, feedback, skip_misfits=list(frameworks) == ["all"])
    failed = 0
    for p in plans:
        try:
            rec = (
                setup_existing(p, not no_case_check, feedback)
                if p.existing
                else setup_one(p, recreate, not no_case_check, feedback)
            )
        except (SetupFailed, envs.EnvError) as exc:
            failed += 1
            click.echo(f"dlbench: error: {exc}", err=True)
            continue
        where = f"registered {rec.python}" if rec.existing else f"in {Path(rec.python).parents[1]}"
        console.print(
            f"{p.key}: {p.info.distribution} {rec.version} ({rec.build or 'unknown'} build, "
            f"Python {rec.python_version}) {where}"
        )
    return 2 if failed else 0
