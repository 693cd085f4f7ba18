"""What a model builder is told about where it builds: one `BuildContext` for every builder of the torch-shaped
backends (torch, OneFlow, MegEngine), instead of a special case for the builders that need their rank.

A builder is ``builder(case, ctx) -> model``. Most ignore the context; face's model-parallel classifier takes
its rank's shard (rank, world), GPT's tensor- and pipeline-parallel builders take this rank's stage and its
shards over the layout's process groups (`groups`: the framework's device mesh). Framework-free: the device and
the groups are the framework's own objects, carried opaquely.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlbench.parallel import Layout
from dlbench.spec import PointSpec
from dlbench.wire import RankContext


@dataclass(frozen=True)
class BuildContext:
    """This rank among the point's (`rank` of `world`), its device, the parallel layout, and the framework's
    process groups for that layout (None on one device, or when the layout does not split the model)."""

    rank: int = 0
    world: int = 1
    device: Any = None
    layout: Layout = field(default_factory=Layout)
    groups: Any = None

    @classmethod
    def of(cls, spec: PointSpec, ctx: RankContext, device: Any = None, groups: Any = None) -> BuildContext:
        """The context of this worker's rank for a point."""
        return cls(ctx.rank, spec.world_size, device, spec.layout, groups)


SINGLE = BuildContext()  # one device, the whole model: what parameter counts and FLOP tests build

__all__ = ["SINGLE", "BuildContext"]
