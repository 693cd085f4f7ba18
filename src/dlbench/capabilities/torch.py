"""What dlbench's PyTorch backend runs, framework-free (dlbench.capabilities): read by the controller."""

from __future__ import annotations

from dlbench.capabilities import ALL_PRECISIONS, Capabilities, StrategyCap

_FP8_ONE_DEVICE = (
    "fp8 is wired for one device only (torchao's float8 training under DDP is not checked by dlbench): use fp32, "
    "tf32, amp or bf16 on several devices"
)
_NO_FP16_SCALING = "fp16 loss scaling would reduce gradients scaled differently per rank: use --precision bf16 or fp32"

CAPABILITIES = Capabilities(
    framework="torch",
    default_strategy="ddp",
    strategies=(
        StrategyCap("ddp", why_not=_FP8_ONE_DEVICE),
        StrategyCap("allreduce"),
        StrategyCap("ps", precisions=("fp32", "tf32", "bf16"), why_not=f"ps with {_NO_FP16_SCALING}"),
        StrategyCap(
            "dp",
            devices=("cuda",),
            across_nodes=False,
            why_not="dp (nn.DataParallel) replicates the module over one node's GPUs from one process; on the "
            "CPU it cannot run several devices, and across nodes neither: use --strategy ddp",
        ),
        StrategyCap("ddp-fp16"),
        StrategyCap("ddp-bf16"),
        StrategyCap("powersgd"),
        StrategyCap("replicated-pscpu"),
    ),
    refused_strategies=(
        (
            "horovod",
            "dlbench's torch backend does not drive Horovod (its last release, 0.28.1, "
            "does not build against torch >= 2.1): use --strategy ddp",
        ),
    ),
    strategy_advice="use one of ddp, allreduce, ps, dp, ddp-fp16, ddp-bf16, powersgd, replicated-pscpu",
    tensor_parallel=True,
    pipeline_parallel=True,
    recompute=True,
    split_needs_strategy_none=True,
    split_compile=False,
    split_amp_on_gpu=False,
    sharded_classifier_strategies=("ddp",),  # only DDP leaves its shards out of the all-reduce
    precisions=(("cpu", ALL_PRECISIONS), ("cuda", (*ALL_PRECISIONS, "fp8"))),  # fp8: torchao's float8 training
    lora=True,
    lora_fsdp=True,
    table_wise=True,
)
