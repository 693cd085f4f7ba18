"""What layouts the diffusion-transformer family (#48) cannot take, decided from its spec alone; the one place
that refuses (dlbench.refusals) calls `dit_layout_refusal` for every point. Framework-free.

A DiT trains data parallel (DDP) or sharded with FSDP2 (``--fsdp``, torch, as MLPerf's torchtitan reference does),
and recomputes its blocks' activations with ``--recompute`` (torch); it is not split over tensor or pipeline
ranks.
"""

from __future__ import annotations

from dlbench.cases import get_case
from dlbench.cases.arch import DitConfig
from dlbench.spec import PointSpec

DIT_LAYOUT_FRAMEWORKS = ("torch",)  # FSDP2 and --recompute


def dit_layout_refusal(spec: PointSpec) -> str | None:
    """Why this DiT point's layout cannot run (one line), or None; nothing to say for another case."""
    case = get_case(spec.model).configured(spec.params)
    if not isinstance(case.arch, DitConfig):
        return None
    lay = spec.layout
    if lay.tensor_parallel > 1 or lay.pipeline_parallel > 1:
        return (
            f"{case.name} is not split over tensor or pipeline ranks: use data parallel or --fsdp "
            "(--tensor-parallel 1 --pipeline-parallel 1)"
        )
    if (spec.layout.fsdp or lay.recompute) and spec.framework not in DIT_LAYOUT_FRAMEWORKS:
        return f"a DiT's --fsdp and --recompute are wired for {', '.join(DIT_LAYOUT_FRAMEWORKS)} only, not {spec.framework}"
    if spec.layout.fsdp and spec.strategy != "none":
        return "FSDP2 keeps a DiT point's replicas in step (--fsdp): leave --strategy at none"
    return None


__all__ = ["DIT_LAYOUT_FRAMEWORKS", "dit_layout_refusal"]
