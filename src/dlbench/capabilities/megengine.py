"""What dlbench's MegEngine backend runs, framework-free (dlbench.capabilities): read by the controller."""

from __future__ import annotations

from dlbench.capabilities import Capabilities

CAPABILITIES = Capabilities(
    framework="megengine",
    multi_device=(),
    multi_device_why="dlbench's MegEngine backend trains on one device only (MegEngine has no CPU collective "
    "backend, and its NCCL data parallelism is not wired): use --scale 1n1c",
    precisions=(("cpu", ("fp32",)), ("cuda", ("fp32",))),
    precision_why="dlbench's MegEngine backend runs fp32 only (MegEngine's autocast is not wired)",
    refused_archs=tuple(
        (
            arch,
            "dlbench's MegEngine backend does not build the Llama or MoE families: MegEngine 1.13, its last release "
            "(2023), has no RMSNorm, rsqrt, triu, masked_fill, repeat_interleave, bincount nor index_add, and they "
            "are not written out for it",
        )
        for arch in ("LlamaConfig", "MoeConfig")
    ),
    channels_last=False,
    channels_last_why="dlbench's MegEngine backend trains NCHW only; channels-last is not offered",
)
