"""The `dlbench` command. One sub-command per module, each imported only when it runs (cli/lazy.py), so that
`dlbench --version` and `--help` start fast; every user error is one line on stderr and exit 2."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import click

from dlbench.cli.lazy import LazyGroup
from dlbench.spec import SpecError
from dlbench.store.errors import EXIT_NOT_STORED, PointNotStored, StoreError


def user_errors() -> tuple[type[BaseException], ...]:
    """The errors that mean bad input (exit 2). Imported when one is raised: their modules are loaded by then."""
    from dlbench.backends import UnknownFramework
    from dlbench.cases import UnknownCase
    from dlbench.envs.interpreters import NotInstalled

    return (SpecError, StoreError, UnknownCase, UnknownFramework, NotInstalled)


def _version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from dlbench import __version__  # the installed metadata, read only here

    click.echo(f"dlbench, version {__version__}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_version, help="Show the version and exit."
)
def cli() -> None:
    """Measure how fast deep-learning frameworks train the standard models, one protocol for all."""


# Each sub-command: its name, where it lives, and the first sentence of its help (what `dlbench --help` lists;
# tests/unit/cli/test_startup.py checks it against the command).
COMMANDS: tuple[tuple[str, str, str], ...] = (
    (
        "run",
        "dlbench.cli.run:run",
        "Run benchmark points now (with no options: PyTorch ResNet-50 and BERT-base, preset quick).",
    ),
    (
        "setup",
        "dlbench.cli.setup:setup",
        (
            "Create or reuse one environment per framework under $DLBENCH_HOME/envs (e.g. `dlbench setup jax "
            "tf`), or register an interpreter that has it (--existing)."
        ),
    ),
    (
        "list",
        "dlbench.cli.info:list_cmd",
        (
            "Cases with their parameter counts, and frameworks: installed or not, which version, CPU or GPU "
            "build, which Python (or the range it needs), where, which cases."
        ),
    ),
    (
        "env",
        "dlbench.cli.info:env",
        "The environment the store would record (the framework's own keys are added by its worker).",
    ),
    ("results", "dlbench.cli.results:results", "Show stored runs and points (RUN_ID prefixes work)."),
    (
        "sweep",
        "dlbench.cli.sweep:sweep",
        "Run a suite (built-in name or YAML file) as one resumable run; Ctrl-C keeps every finished point.",
    ),
    (
        "data",
        "dlbench.cli.data:data",
        "Make real data locally (nothing is downloaded): ImageNet-layout JPEGs, BERT samples.",
    ),
    (
        "report",
        "dlbench.cli.report:report",
        "Write a report of stored runs: tables per model, charts, published figures (RUN_ID prefixes work).",
    ),
    (
        "compare",
        "dlbench.cli.compare:compare",
        "Compare run B with run A point by point (RUN_ID prefixes work), or each configuration's releases (--by "
        "version).",
    ),
    (
        "reference",
        "dlbench.cli.reference:reference_cmd",
        "Published training-throughput figures from the seed studies (DLPerf, Paddle, tf_cnn_benchmarks).",
    ),
    (
        "store",
        "dlbench.cli.store:store_cmd",
        "Share results: copy runs to and from another store (a PostgreSQL server or a SQLite file).",
    ),
    (
        "history",
        "dlbench.cli.history:history",
        (
            "Throughput of each configuration over time and framework versions; regressions and improvements are "
            "called with the test `dlbench compare` uses."
        ),
    ),
    (
        "bisect",
        "dlbench.cli.bisect:bisect",
        "Find the framework release that changed one configuration's speed, halving the releases between two "
        "(run's options say the configuration; releases already measured are read from the store).",
    ),
    (
        "rerun",
        "dlbench.cli.rerun:rerun",
        "Measure RUN's configurations again here, store them as a new run and compare it with RUN.",
    ),
    (
        "check",
        "dlbench.cli.check:check",
        "Check dlbench itself: that every framework trains the same model (same-model).",
    ),
    (
        "reproduce",
        "dlbench.cli.reproduce:reproduce",
        "How a stored point (or run) was made: command, package lock, host; --run measures it again beside it.",
    ),
)


def _register() -> None:
    group: LazyGroup = cli
    for name, target, summary in COMMANDS:
        group.add_lazy(name, target, summary)


_register()


def _one_line(exc: BaseException) -> str:
    from dlbench.printable import printable
    from dlbench.redact import redact

    text = str(exc).strip().splitlines()
    return printable(redact(text[0])) if text else type(exc).__name__


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM / SIGHUP end a run like Ctrl-C: workers stopped, finished points kept, the run marked."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the CLI, turning bad input into one stderr line and exit 2."""
    from dlbench.cli import invocation

    invocation.record(sys.argv[1:] if argv is None else argv)  # the command line each new run keeps
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return _main(argv)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        invocation.record(None)


def _main(argv: list[str] | None) -> int:
    try:
        rv = cli.main(args=argv, prog_name="dlbench", standalone_mode=False)
    except click.exceptions.Abort:
        print("dlbench: interrupted", file=sys.stderr)
        return 130
    except click.ClickException as exc:
        print(f"dlbench: error: {_one_line(Exception(exc.format_message()))}", file=sys.stderr)
        return 2 if exc.exit_code in (1, 2) else exc.exit_code
    except PointNotStored as exc:  # it ran, but the store could not keep a point: not bad input
        print(f"dlbench: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_NOT_STORED
    except KeyboardInterrupt:
        print("dlbench: interrupted; finished points are kept in the store", file=sys.stderr)
        return 130
    except Exception as exc:
        if not isinstance(exc, user_errors()):
            raise
        print(f"dlbench: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
