"""The launchers, built once from a hosts configuration and immutable: a caller cannot forget to fill them.

`local` runs one worker (several on one machine for a multi-device point); `hosts`, `torchrun`, `mpirun` and
`slurm` place ranks on configured hosts or a Slurm allocation. Which engine a framework prefers on several
devices is its BackendInfo's `engine`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from dlbench.backends import get_info
from dlbench.launch import hosts, mpirun, slurm, torchrun
from dlbench.launch.hosts import HostsConfig
from dlbench.launch.process import ChildOutcome, ProgressSink
from dlbench.spec import PointSpec, SpecError

# A launcher runs a spec with an interpreter and returns how its child(ren) ended, every rank included.
Launcher = Callable[[PointSpec, str, ProgressSink | None], ChildOutcome]
NAMES: tuple[str, ...] = ("local", "hosts", "torchrun", "mpirun", "slurm")


def _table(config: HostsConfig) -> Mapping[str, Launcher]:
    return MappingProxyType({
        "local": hosts.local,
        "hosts": functools.partial(hosts.launch, config=config),
        "torchrun": functools.partial(torchrun.launch, config=config),
        "mpirun": functools.partial(mpirun.launch, config=config),
        "slurm": functools.partial(slurm.launch, config=config),
    })


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

    @staticmethod
    def default_for(spec: PointSpec) -> str:
        """`local` for one device; for several, the engine the framework's backend prefers."""
        return get_info(spec.framework).engine if spec.world_size > 1 else "local"

    def check(self, spec: PointSpec) -> None:
        """Refuse, before anything runs, a point this launcher cannot place (SpecError, one line)."""
        self.get(spec.launcher)
        if spec.launcher == "local" and spec.nodes > 1:
            raise SpecError(f"the local launcher runs on this machine only; for {spec.nodes} nodes use --launcher "
                            "torchrun, hosts or mpirun with --hosts, or --launcher slurm")
        problem = self.config.problem(spec) if spec.launcher != "slurm" else None
        if problem:
            raise SpecError(problem)


__all__ = ["NAMES", "Launcher", "Launchers"]
