"""The launchers as objects: each class names itself (NAME), refuses before anything runs what it cannot place
(check) and starts a point's ranks (launch). The registry is built from the classes, configured once from a hosts
configuration and immutable: a caller cannot forget to fill it.

`local` runs one worker (several on one machine for a multi-device point); `hosts`, `torchrun`, `mpirun` and
`slurm` place ranks on configured hosts or a Slurm allocation. Which engine a framework prefers on several
devices is its BackendInfo's `engine` (points.default_launcher gives each point its launcher).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

from dlbench.launch import hosts, mpirun, slurm, torchrun
from dlbench.launch.hosts import HostsConfig
from dlbench.launch.outcome import ChildOutcome
from dlbench.launch.process import ProgressSink
from dlbench.spec import PointSpec, SpecError


class Launcher(ABC):
    """Where a point runs: a launcher configured with the hosts it may reach."""

    NAME: ClassVar[str]

    def __init__(self, config: HostsConfig) -> None:
        self.config = config

    def check(self, spec: PointSpec) -> None:
        """Refuse, before anything runs, a point this launcher cannot place (SpecError, one line)."""
        problem = self.config.problem(spec)
        if problem:
            raise SpecError(problem)

    @abstractmethod
    def launch(self, spec: PointSpec, python: str, on_progress: ProgressSink | None) -> ChildOutcome:
        """Run the spec's ranks with this interpreter; how its child(ren) ended, every rank included."""

    def runs_here(self, spec: PointSpec) -> bool:
        """Whether every rank of the point runs on this machine (so its CPUs are the ones this machine sees)."""
        return spec.nodes == 1 and not self.config.hosts


class LocalLauncher(Launcher):
    """This machine: one worker, or one plain worker per rank (and the servers beside them)."""

    NAME = "local"

    def check(self, spec: PointSpec) -> None:
        """Several nodes are not this machine."""
        if spec.nodes > 1:
            raise SpecError(
                f"the local launcher runs on this machine only; for {spec.nodes} nodes use --launcher "
                "torchrun, hosts or mpirun with --hosts, or --launcher slurm"
            )
        super().check(spec)

    def launch(self, spec: PointSpec, python: str, on_progress: ProgressSink | None) -> ChildOutcome:
        """hosts.local."""
        return hosts.local(spec, python, on_progress)


class HostsLauncher(Launcher):
    """Every rank a plain worker on its host, reached by the reach command."""

    NAME = "hosts"

    def launch(self, spec: PointSpec, python: str, on_progress: ProgressSink | None) -> ChildOutcome:
        """hosts.launch."""
        return hosts.launch(spec, python, on_progress, config=self.config)


class TorchrunLauncher(Launcher):
    """One torchrun per node."""

    NAME = "torchrun"

    def launch(self, spec: PointSpec, python: str, on_progress: ProgressSink | None) -> ChildOutcome:
        """torchrun.launch."""
        return torchrun.launch(spec, python, on_progress, config=self.config)


class MpirunLauncher(Launcher):
    """One mpirun over the hosts."""

    NAME = "mpirun"

    def launch(self, spec: PointSpec, python: str, on_progress: ProgressSink | None) -> ChildOutcome:
        """mpirun.launch."""
        return mpirun.launch(spec, python, on_progress, config=self.config)


class SlurmLauncher(Launcher):
    """One Slurm job: the allocation places the nodes, not the hosts configuration."""

    NAME = "slurm"

    def check(self, spec: PointSpec) -> None:
        """Slurm places any number of nodes: nothing to refuse here."""

    def runs_here(self, spec: PointSpec) -> bool:
        """The allocation's nodes, never this machine as such."""
        return False

    def launch(self, spec: PointSpec, python: str, on_progress: ProgressSink | None) -> ChildOutcome:
        """slurm.launch."""
        return slurm.launch(spec, python, on_progress, config=self.config)


# The registry: every launcher class, in the order help texts list them; names come from the classes.
LAUNCHER_CLASSES: tuple[type[Launcher], ...] = (
    LocalLauncher,
    HostsLauncher,
    TorchrunLauncher,
    MpirunLauncher,
    SlurmLauncher,
)
NAMES: tuple[str, ...] = tuple(cls.NAME for cls in LAUNCHER_CLASSES)


def _table(config: HostsConfig) -> Mapping[str, Launcher]:
    return MappingProxyType({cls.NAME: cls(config) for cls in LAUNCHER_CLASSES})


@dataclass(frozen=True)
class Launchers:
    """Every launcher, configured with one hosts configuration."""

    config: HostsConfig = field(default_factory=HostsConfig)
    table: Mapping[str, Launcher] = field(default_factory=lambda: _table(HostsConfig()))

    @classmethod
    def build(cls, config: HostsConfig | None = None) -> Launchers:
        """The launchers for a configuration (default: $DLBENCH_HOSTS, $DLBENCH_REACH ...)."""
        cfg = config if config is not None else HostsConfig.from_env()
        return cls(cfg, _table(cfg))

    def get(self, name: str) -> Launcher:
        """The launcher of that name; SpecError naming the known ones."""
        if name not in self.table:
            raise SpecError(f"unknown launcher {name!r}; known: {', '.join(NAMES)}")
        return self.table[name]

    def check(self, spec: PointSpec) -> None:
        """Refuse, before anything runs, a point its launcher cannot place (SpecError, one line)."""
        self.get(spec.launcher).check(spec)


__all__ = [
    "LAUNCHER_CLASSES",
    "NAMES",
    "HostsLauncher",
    "Launcher",
    "Launchers",
    "LocalLauncher",
    "MpirunLauncher",
    "SlurmLauncher",
    "TorchrunLauncher",
]
