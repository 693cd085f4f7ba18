"""`dlbench list` and `dlbench env`: what can run here, and what the store would record."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from dlbench.backends import all_backends
from dlbench.cases import all_cases
from dlbench.cli.options import resolve_device
from dlbench.launch.interpreters import framework_status
from dlbench.results.env import host_descriptive, host_identity, physical_cores


@click.command("list")
def list_cmd() -> None:
    """Cases with their parameter counts, and frameworks marked installed or not, with the reason."""
    out = Console()
    cases = Table(title="cases")
    for col in ("case", "model", "input", "optimizer", "parameters", "batch (fixed / cpu)"):
        cases.add_column(col)
    for c in all_cases():
        inp = c.input
        shape = f"{inp.channels}x{inp.size}x{inp.size}" if hasattr(inp, "size") else f"seq {inp.seq_len}"  # type: ignore[union-attr]
        opt = f"{c.optimizer.name} lr {c.optimizer.lr:g}" + (f" m {c.optimizer.momentum:g}" if c.optimizer.momentum else "")
        cases.add_row(c.name, c.title, shape, opt, f"{c.params:,}", f"{c.batch_fixed} / {c.batch_cpu}")
    out.print(cases)
    fws = Table(title="frameworks")
    for col in ("framework", "installed", "version", "environment / reason"):
        fws.add_column(col)
    for name, info in all_backends().items():
        version, python, reason = framework_status(name)
        fws.add_row(f"{name} ({info.title})", "yes" if version else "no", version or "-", python or reason)
    out.print(fws)


@click.command("env")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def env(device: str, as_json: bool) -> None:
    """The environment the store would record (the framework's own keys are added by its worker)."""
    ident = host_identity(resolve_device(device), physical_cores())
    desc = host_descriptive()
    if as_json:
        click.echo(json.dumps({"identity": ident, "descriptive": desc}, indent=2))
        return
    t = Table(title="environment")
    t.add_column("key")
    t.add_column("value")
    t.add_column("kind")
    for k, v in ident.items():
        t.add_row(k, v, "identity")
    for k, v in desc.items():
        t.add_row(k, v, "descriptive")
    Console().print(t)
