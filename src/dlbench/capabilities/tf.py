"""What dlbench's TensorFlow backend runs, framework-free (dlbench.capabilities): read by the controller."""

from __future__ import annotations

from dlbench.capabilities import Capabilities, StrategyCap

_ONE_PRECISIONS = ("fp32", "tf32", "bf16")  # one node; no fp16 loss scaling across replicas
_MANAGERS = ("ps-cpu", "ps-gpu", "replicated-copy", "replicated-pscpu", "independent")  # tf_cnn_benchmarks'

CAPABILITIES = Capabilities(
    framework="tf",
    default_strategy="multiworker",
    strategies=(
        StrategyCap("multiworker"),
        StrategyCap(
            "mirrored",
            devices=("cuda",),
            across_nodes=False,
            why_not="mirrored runs one process over one node's GPUs (--device cuda, --scale 1nNc); on the CPU "
            "or across nodes use --strategy multiworker",
        ),
        StrategyCap(
            "ps",
            across_nodes=False,
            precisions=_ONE_PRECISIONS,
            why_not="ps: dlbench starts its servers on one host (--scale 1nNc) and does "
            "not scale fp16 losses across workers (fp32, tf32 or bf16)",
        ),
        *(
            StrategyCap(
                name,
                across_nodes=False,
                precisions=_ONE_PRECISIONS,
                why_not=f"{name} runs one process over one node's devices (--scale 1nNc; across nodes use "
                "--strategy multiworker) and does not scale fp16 losses across replicas",
            )
            for name in _MANAGERS
        ),
        StrategyCap(
            "replicated-nccl",
            devices=("cuda",),
            across_nodes=False,
            precisions=_ONE_PRECISIONS,
            why_not="replicated-nccl needs NCCL, which runs on GPUs only (on CPU devices TF silently swaps it "
            "for ReductionToOneDevice): on the CPU use replicated-copy or replicated-pscpu",
        ),
    ),
    refused_strategies=(
        (
            "horovod",
            "dlbench's TF backend does not drive Horovod (its last release, 0.28.1, does "
            "not work with TF >= 2.16): use --strategy multiworker",
        ),
    ),
    strategy_advice="use --strategy multiworker (or mirrored on one multi-GPU node)",
    real_data_multi=False,
)
