"""The `dlbench` command. One sub-command per module; every user error is one line on stderr and exit 2."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import click

from dlbench import __version__
from dlbench.backends import UnknownFramework
from dlbench.cases import UnknownCase
from dlbench.launch.interpreters import NotInstalled
from dlbench.results.errors import EXIT_NOT_STORED, PointNotStored, StoreError
from dlbench.spec import SpecError

USER_ERRORS = (SpecError, StoreError, UnknownCase, UnknownFramework, NotInstalled)


class UserError(click.ClickException):
    """A bad input, reported as one line with exit code 2."""

    exit_code = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dlbench")
def cli() -> None:
    """Measure how fast deep-learning frameworks train the standard models, one protocol for all."""


def _register() -> None:
    from dlbench.cli import info, results, run, setup

    cli.add_command(run.run)
    cli.add_command(setup.setup)
    cli.add_command(info.list_cmd)
    cli.add_command(info.env)
    cli.add_command(results.results)
    from dlbench.cli import data, sweep

    cli.add_command(sweep.sweep)
    cli.add_command(data.data)
    from dlbench.cli import compare, reference, report

    cli.add_command(report.report)
    cli.add_command(compare.compare)
    cli.add_command(reference.reference_cmd)
    from dlbench.cli import history, store

    cli.add_command(store.store_cmd)
    cli.add_command(history.history)


_register()


def _one_line(exc: BaseException) -> str:
    from dlbench.redact import redact

    text = str(exc).strip().splitlines()
    return redact(text[0]) if text else type(exc).__name__


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM / SIGHUP end a run like Ctrl-C: workers stopped, finished points kept, the run marked."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the CLI, turning bad input into one stderr line and exit 2."""
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return _main(argv)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
    except USER_ERRORS as exc:
        print(f"dlbench: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dlbench: interrupted; finished points are kept in the store", file=sys.stderr)
        return 130
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
