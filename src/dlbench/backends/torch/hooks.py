"""DDP's communication hooks as gradient strategies, and its bucket size (--bucket-mb).

- ``ddp-fp16`` / ``ddp-bf16``: every bucket cast to fp16 / bf16, all-reduced, cast back (torch's
  ``fp16_compress_hook`` / ``bf16_compress_hook``). torch refuses its bf16 hook unless NCCL >= 2.10 runs it, by the
  hook's name; gloo reduces bf16 as well, so on the CPU the same function (``_compress_hook`` with bf16) is
  registered under another name, and the point says so.
- ``powersgd``: PowerSGD (Vogels et al. 2019), rank 1, error feedback and warm start; plain all-reduce for the
  first two iterations (DDP's bucket rebuild needs the first; PowerSGDState wants start_powerSGD_iter > 1) and
  compressed from the third. On gloo each bucket's reduction is finished before the hook returns
  (``ordered_on_gloo``): torch's hook issues a bucket's second and third all-reduce from the completion callback
  of its first, on gloo's threads, so with several buckets in flight two ranks can issue them in different
  orders; gloo pairs collectives by the order they are issued, so rank 1 waited on a collective rank 0 had not
  started, or its peer read a buffer of the wrong size and reset the connection ("Connection reset by peer",
  1 run in 4 of ResNet-50 at 1n2c). NCCL orders them on its stream and keeps torch's hook as it is.
- ``replicated-pscpu``: every bucket copied to the host, summed there by gloo, averaged and copied back (on CPU
  devices the buckets are already on the host: the hook is then DDP's all-reduce with one more copy).

No ``from __future__ import annotations`` here: DDP checks a hook's annotations against the real
``dist.GradBucket`` and ``Future`` objects, which string annotations fail.
"""

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

HOOKED: tuple[str, ...] = ("ddp-fp16", "ddp-bf16", "powersgd", "replicated-pscpu")
DEFAULT_BUCKET_MB = 25  # DistributedDataParallel's bucket_cap_mb default
POWERSGD_RANK = 1
POWERSGD_START = 2  # the first compressed iteration, counted from 0 (PowerSGDState needs > 1 with error feedback)


def bucket_mb(requested: int | None) -> int:
    """The bucket size a DDP point runs: --bucket-mb, else torch's default."""
    return requested if requested is not None else DEFAULT_BUCKET_MB


def bf16_gloo_hook(process_group: dist.ProcessGroup, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """torch's bf16_compress_hook under a name its NCCL-only check does not stop (gloo reduces bf16 too)."""
    return default_hooks._compress_hook(torch.bfloat16, process_group, bucket)


def cpu_reduce_hook(group: dist.ProcessGroup) -> Callable[[Any, dist.GradBucket], torch.futures.Future[torch.Tensor]]:
    """A hook summing each bucket on the host CPU over `group` (gloo), averaged, then copied back to its device."""
    world = dist.get_world_size(group)

    def hook(_: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        buffer = bucket.buffer()
        host = buffer.to("cpu")
        future = dist.all_reduce(host, group=group, async_op=True).get_future()

        def back(done: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            summed = done.value()[0].div_(world)
            return buffer.copy_(summed) if summed.data_ptr() != buffer.data_ptr() else buffer

        return future.then(back)

    return hook


def ordered_on_gloo(
    hook: Callable[[Any, dist.GradBucket], torch.futures.Future[torch.Tensor]],
) -> Callable[[Any, dist.GradBucket], torch.futures.Future[torch.Tensor]]:
    """The hook with each bucket's reduction (all its collectives) finished before it returns, so that every rank
    issues the same collectives in the same order (this module's docstring)."""

    def in_order(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        future = hook(state, bucket)
        future.wait()
        return future

    return in_order


def register(strategy: str, model: DistributedDataParallel, device: torch.device) -> dict[str, object]:
    """Register the strategy's hook on a DDP model; returns what the point ran, for its facts."""
    if strategy == "ddp-fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return {"comm_hook": "fp16_compress_hook (torch)"}
    if strategy == "ddp-bf16":
        if device.type == "cuda":
            model.register_comm_hook(None, default_hooks.bf16_compress_hook)
            return {"comm_hook": "bf16_compress_hook (torch)"}
        model.register_comm_hook(None, bf16_gloo_hook)
        return {"comm_hook": "torch's _compress_hook(bfloat16) on gloo (its bf16_compress_hook is refused off NCCL)"}
    if strategy == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=POWERSGD_RANK, start_powerSGD_iter=POWERSGD_START
        )
        gloo = device.type != "cuda"
        model.register_comm_hook(
            state, ordered_on_gloo(powerSGD_hook.powerSGD_hook) if gloo else powerSGD_hook.powerSGD_hook
        )
        return {
            "comm_hook": f"powerSGD_hook (torch): rank {POWERSGD_RANK}, error feedback, warm start; plain "
            f"all-reduce for the first {POWERSGD_START} iterations"
            + (
                "; on gloo each bucket's reduction finished before the next starts (collectives in one order)"
                if gloo
                else ""
            )
        }
    if strategy == "replicated-pscpu":
        group = dist.new_group(backend="gloo") if device.type == "cuda" else dist.group.WORLD
        model.register_comm_hook(None, cpu_reduce_hook(group))  # type: ignore[arg-type]
        where = (
            "copied to the host, summed by gloo, copied back"
            if device.type == "cuda"
            else "summed by gloo on the CPU, where the buckets already are"
        )
        return {"comm_hook": f"dlbench cpu_reduce_hook: each bucket {where}"}
    return {}
