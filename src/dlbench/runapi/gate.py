"""The one gate every point passes before anything is written, whichever command asked for it (run, sweep, rerun,
reproduce --run, the max searches behind them): what the spec alone shows cannot run (dlbench.refusals, from
the capability tables), what its launcher cannot place, a GPU this machine lacks, more ranks or threads than
the machine has (launch/bounds.py: `--force` goes past), a memory estimate that cannot fit where the point would
run (launch/fits.py: `--force` goes past), a framework not installed here. Each refusal is one
line (exit 2); so a rule added here holds for every path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

from dlbench.envs.interpreters import interpreter_for
from dlbench.launch.bounds import check_bounds
from dlbench.launch.fits import check_memory, fitting
from dlbench.launch.registry import Launchers
from dlbench.machine.env import cuda_available
from dlbench.refusals import possible, refuse_impossible
from dlbench.spec import PointSpec, SpecError

T = TypeVar("T")


def require_gpu(specs: Sequence[PointSpec], remote_hosts: bool) -> None:
    """--device cuda where NVML sees no GPU on this machine: a SpecError (exit 2, nothing run), so that a CI job
    that lost its GPU fails. Points placed elsewhere (--hosts, Slurm) are left to the machines that run them."""
    here = [s for s in specs if s.device == "cuda" and s.launcher != "slurm"]
    if here and not remote_hosts and not cuda_available():
        why = (
            "CUDA_VISIBLE_DEVICES hides every GPU"
            if os.environ.get("CUDA_VISIBLE_DEVICES") == ""
            else "NVML reports no NVIDIA GPU"
        )
        raise SpecError(f"--device cuda: {why} on this machine; use --device cpu (or auto)")


def placeable(specs: Sequence[PointSpec], launchers: Launchers, force: bool, installed: bool = True) -> None:
    """Refuse (one line) a point its launcher cannot place, a GPU point on a machine without one, more ranks or
    threads than the machine has or a memory estimate that cannot fit unless forced, and (`installed`) a framework
    not installed here."""
    remote = bool(launchers.config.hosts)
    for s in specs:
        launchers.check(s)
    require_gpu(specs, remote)
    check_bounds(specs, force, remote_hosts=remote)  # no fork bomb from a typo
    check_memory(specs, force, remote_hosts=remote)  # nothing allocated that cannot fit (#41)
    if installed:
        for fw, release in dict.fromkeys((s.framework, s.release) for s in specs):
            interpreter_for(fw, release)  # refuse a missing framework (release) before anything is written


def admit(specs: Sequence[PointSpec], launchers: Launchers, force: bool) -> None:
    """`run`, `rerun` and `reproduce --run`: every point can run here, or a one-line refusal naming those that
    cannot (the reason alone for one point)."""
    refuse_impossible(specs)
    placeable(specs, launchers, force)


def admit_matrix(
    items: Sequence[T],
    spec_of: Callable[[T], PointSpec],
    skip: bool,
    say: Callable[[str], None],
    what: str,
    force: bool = False,
    remote: bool = False,
) -> list[T]:
    """A sweep's matrix: the items whose point can run and may fit (unless forced). Without `skip`, an impossible
    one, or one whose memory estimate cannot fit, refuses the whole matrix (one line naming them); with it, each
    is named through `say` and left out, so a matrix that grows until memory ends stops before it. The rest of
    the gate (placeable) follows once the matrix is known."""
    return fitting(possible(items, spec_of, skip, say, what), spec_of, force, skip, say, what, remote)


__all__ = ["admit", "admit_matrix", "placeable", "require_gpu"]
