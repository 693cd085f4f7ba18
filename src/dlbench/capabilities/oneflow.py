"""What dlbench's OneFlow backend runs, framework-free (dlbench.capabilities): read by the controller."""

from __future__ import annotations

from dlbench.capabilities import Capabilities, StrategyCap

CAPABILITIES = Capabilities(
    framework="oneflow",
    default_strategy="ddp",
    strategies=(StrategyCap("ddp"),),
    strategy_advice="OneFlow's data parallelism is wired as ddp only",
    precisions=(("cpu", ("fp32",)), ("cuda", ("fp32",))),
    precision_why="dlbench's OneFlow backend runs fp32 only (OneFlow's autocast and loss scaling are not wired)",
    channels_last=False,
    channels_last_why="dlbench's OneFlow backend trains NCHW only; channels-last is not offered",
    multi_device_compile_why="OneFlow's DDP wraps eager modules; an nn.Graph on several devices needs global "
    "tensors, not wired: drop --compile",
)
