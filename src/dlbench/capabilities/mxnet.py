"""What dlbench's MXNet backend runs, framework-free (dlbench.capabilities): read by the controller."""

from __future__ import annotations

from dlbench.capabilities import Capabilities, StrategyCap

_KVSTORE_WHY = "runs MXNet's kvstore in one process over one node's devices (across processes: --strategy ps), fp32"

_NO_DECODERS = (
    "dlbench's MXNet backend does not build the Llama or MoE families: MXNet 1.9.1 is its last release (Apache "
    "retired MXNet to the Attic in 2023) and has no RMSNorm, rotary embedding or causal scaled-dot-product "
    "attention op; use torch, jax, paddle or jittor"
)

CAPABILITIES = Capabilities(
    framework="mxnet",
    strategies=(
        *(
            StrategyCap(name, across_nodes=False, precisions=("fp32",), why_not=f"{name} {_KVSTORE_WHY}")
            for name in ("ps-cpu", "ps-gpu", "independent")
        ),
        StrategyCap(
            "replicated-nccl",
            devices=("cuda",),
            across_nodes=False,
            precisions=("fp32",),
            why_not="MXNet's nccl kvstore needs GPUs (NCCL) on one node, fp32: on the CPU use ps-cpu (local) "
            "or ps-gpu (device)",
        ),
        StrategyCap("ps", precisions=("fp32",), why_not="dlbench runs MXNet's kvstores in fp32 only"),
    ),
    strategy_advice="on several devices name its kvstore: --strategy ps-cpu (local), ps-gpu (device), "
    "replicated-nccl (nccl), independent (none) or ps (dist_sync)",
    real_data_multi=False,
    precisions=(("cpu", ("fp32", "bf16")), ("cuda", ("fp32",))),
    precision_why="dlbench's mxnet backend runs fp32 only on GPUs (MXNet 1.9 AMP: fp16 not wired, no bf16 on GPU)",
    refused_archs=(("LlamaConfig", _NO_DECODERS), ("MoeConfig", _NO_DECODERS)),
    channels_last=False,
    channels_last_why="MXNet Gluon's CPU convolutions take NCHW only; channels-last is not offered",
)
