"""What a framework backend can run, as plain data the controller reads without importing any framework.

Each backend declares one `Capabilities` in a light module of this package (``capabilities/<fw>.py``,
named by its `BackendInfo.capabilities`): its gradient strategies and the devices each runs on, the parallel
layouts it splits a model with, the precisions and options it offers, and, where it cannot, the one-line
reason. `dlbench.refusals` reads these tables to refuse, before anything runs, every point the spec alone shows
to be impossible; they are the one source of those rules (the controller asks before launch, the worker again
first). Only facts that need the framework at hand (its version, a device it sees, a GPU build's kernels, a CPU's
bf16 units, an optional package) stay in the backend's `refuse`, checked in the worker. The tables live outside `backends/<fw>/` because
those packages set environment variables for their framework when imported (NVIDIA_TF32_OVERRIDE ...), which
must never happen in the controller. A third party names its own module in its `BackendInfo.capabilities`.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL_DEVICES: tuple[str, ...] = ("cpu", "cuda")
ALL_PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "amp", "bf16")
_EVERY = (("cpu", (*ALL_PRECISIONS, "fp8")), ("cuda", (*ALL_PRECISIONS, "fp8")))


@dataclass(frozen=True)
class StrategyCap:
    """One gradient strategy a framework runs on several devices, and where it cannot (`why_not` says why)."""

    name: str
    devices: tuple[str, ...] = ALL_DEVICES
    across_nodes: bool = True
    precisions: tuple[str, ...] = ALL_PRECISIONS  # on the devices it runs on (fp16 scaling may not cross replicas)
    why_not: str = ""  # the one-line reason on a device, node count or precision it lacks
    sparse_why: str = ""  # why it cannot take sparse embedding gradients (Wide & Deep's sparse 1); '' = it can

    def refusal(self, device: str, nodes: int, precision: str) -> str | None:
        """Why this strategy cannot run on this device, node count and precision (one line), or None."""
        if device not in self.devices or (nodes > 1 and not self.across_nodes) or precision not in self.precisions:
            return self.why_not or (
                f"strategy {self.name} runs on {'/'.join(self.devices)} with "
                f"{'/'.join(self.precisions)}{'' if self.across_nodes else ', one node'}"
            )
        return None


@dataclass(frozen=True)
class Capabilities:
    """A framework backend's table: strategies, layouts, precisions, devices and options it runs."""

    framework: str
    # Several devices: the devices on which the backend wires them at all ('' reason: it does not).
    multi_device: tuple[str, ...] = ALL_DEVICES
    multi_device_why: str = ""
    default_strategy: str = ""  # what --strategy none means on several devices; '' = it must be named
    strategies: tuple[StrategyCap, ...] = ()
    any_strategy: bool = False  # the test double: it runs whatever the spec names
    refused_strategies: tuple[tuple[str, str], ...] = ()  # named strategies it never runs, with the reason
    strategy_advice: str = ""  # what to use instead of a strategy it lacks
    real_data_multi: bool = True  # real data over several devices
    # Precisions per device ('cpu', 'cuda'); a device missing means every precision the numerics policy allows.
    precisions: tuple[tuple[str, tuple[str, ...]], ...] = ()
    precision_why: str = ""
    numerics_policy: bool = True  # the numerics policy's device refusals apply (dlbench.numerics: amp on the CPU)
    # Parallel layouts (dlbench.parallel), for cases that declare a splittable architecture (the GPT cases).
    tensor_parallel: bool = False
    pipeline_parallel: bool = False
    recompute: bool = False
    layout_why: str = ""  # why a layout it lacks cannot run
    split_needs_strategy_none: bool = False  # a split model keeps its replicas in step itself (FSDP2)
    split_compile: bool = True
    split_amp_on_gpu: bool = True  # fp16 loss scaling over a split or FSDP-sharded model on GPUs
    even_vocab_shards: bool = False  # the vocabulary must divide by the tensor ranks (else: at least as many)
    # MLPerf's fine-tuning and recommendation workloads (#47): LoRA on the llama family (and over FSDP's
    # data-parallel ranks), DLRM's tables placed whole on the ranks (table-wise model parallel).
    lora: bool = False
    lora_fsdp: bool = False
    table_wise: bool = False
    fp8_layouts: bool = False  # fp8 with a split or FSDP layout (float8 DTensor styles), where fp8 is offered
    # The strategies a model-parallel classifier (the face cases' model_parallel=1) trains with on several devices;
    # () = the backend builds no such classifier (its worker says it does not build the case).
    sharded_classifier_strategies: tuple[str, ...] = ()
    # Case families it never builds: (dlbench.cases.arch class name, the one-line reason), refused before a worker
    # starts (#46: the Llama and MoE families where a framework lacks their pieces).
    refused_archs: tuple[tuple[str, str], ...] = ()
    # Options.
    channels_last: bool = True  # for image models
    channels_last_why: str = ""
    # The architectures (dlbench.cases.arch class names) it builds channels-last; () = every image model.
    channels_last_archs: tuple[str, ...] = ()
    compile: bool = True
    compile_why: str = ""
    # (architecture class name, why --compile cannot build it): the architectures it builds eagerly only.
    no_compile_archs: tuple[tuple[str, str], ...] = ()
    multi_device_compile_why: str = ""  # why --compile cannot run on several devices ('' = it can)

    def strategy(self, name: str) -> StrategyCap | None:
        """The strategy of that name this backend runs, or None."""
        return next((s for s in self.strategies if s.name == name), None)

    def names(self) -> tuple[str, ...]:
        """The names of the strategies it runs on several devices."""
        return tuple(s.name for s in self.strategies)

    def arch_refusal(self, arch: object) -> str | None:
        """Why it never builds a case of this architecture (`refused_archs`), or None."""
        return dict(self.refused_archs).get(type(arch).__name__)

    def precisions_on(self, device: str) -> tuple[str, ...]:
        """The precisions it runs on a device (before the numerics policy's own refusals)."""
        return dict(self.precisions).get(device, ALL_PRECISIONS)

    @classmethod
    def unknown(cls, framework: str) -> Capabilities:
        """The table of a third-party backend that declares none: every strategy, precision and option is left to
        its worker, and no model is split (a backend says it splits one by declaring a table)."""
        return cls(framework=framework, any_strategy=True, numerics_policy=False, precisions=_EVERY)


__all__ = ["ALL_DEVICES", "ALL_PRECISIONS", "Capabilities", "StrategyCap"]
