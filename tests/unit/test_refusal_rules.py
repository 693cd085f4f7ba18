"""Every refusal rule, one row each (#43): the capability tables (dlbench.capabilities) are the one source of what
the spec alone shows cannot run, and dlbench.refusals reads them. Each row is a point and the words of its one-line
refusal; the rows that run say None. A completeness check finds, for every reason a built-in table holds, a row
that reaches it, so that a rule added to a table without a row here fails."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlbench.backends import all_backends
from dlbench.capabilities import Capabilities, StrategyCap
from dlbench.capabilities.mxnet import CAPABILITIES as MXNET
from dlbench.capabilities.paddle import CAPABILITIES as PADDLE
from dlbench.capabilities.tf import CAPABILITIES as TF
from dlbench.refusals import refusal
from dlbench.spec import PointSpec, Protocol
from tests.support.specs import flat_spec

PROTO = Protocol(0, 1, 1, "median")
GPT2 = {"model": "gpt", "devices_per_node": 2}
LLAMA_FSDP = {"model": "llama_tiny", "devices_per_node": 2, "fsdp": True, "device": "cuda"}
PADDLE_LLAMA = {"model": "llama_tiny", "devices_per_node": 2}
FACE_MP = {"model": "face", "devices_per_node": 2, "case_params": (("model_parallel", 1),)}


def _point(framework: str, **kw: Any) -> PointSpec:
    base: dict[str, Any] = {"framework": framework, "model": "alexnet", "batch_size": 2, "protocol": PROTO}
    return flat_spec(**{**base, **kw})


# (framework, point fields, words of its refusal); one row per rule, and per reason a built-in table holds.
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    # several devices where a backend wires one (Capabilities.multi_device); real data across replicas
    ("jittor", {"devices_per_node": 2}, "Jittor backend trains on one device only"),
    ("megengine", {"devices_per_node": 2}, "MegEngine has no CPU collective backend"),
    ("mindspore", {"devices_per_node": 2}, "MindSpore backend trains on one device only"),
    *((f"keras_{b}", {"devices_per_node": 2}, f"keras_{b} trains on one device") for b in ("jax", "tf", "torch")),
    *((f"keras_{b}", {"precision": "bf16"}, f"keras_{b} trains in fp32 only") for b in ("jax", "tf", "torch")),
    ("tf", {"devices_per_node": 2, "data": "real", "data_dir": "/d"}, "real data is not split over tf's replicas"),
    # the llama and MoE families' layouts (cases/llama_layout.py, cases/moe_layout.py), wired in the same place
    (
        "torch",
        {"model": "alexnet", "devices_per_node": 2, "fsdp": True},
        "--fsdp is wired for the llama and DiT cases only",
    ),
    ("torch", {"model": "moe_tiny", "expert_parallel": 2}, "expert"),
    # Paddle's fleet hybrid parallel on gloo (#46): found by running it, docs/llm.md
    ("paddle", {**PADDLE_LLAMA, "tensor_parallel": 2}, "all_reduce_on_calc_stream, which ProcessGroupGLOO does not"),
    ("paddle", {**PADDLE_LLAMA, "pipeline_parallel": 2}, "send/recv_on_calc_stream, which ProcessGroupGLOO does not"),
    ("paddle", {**PADDLE_LLAMA, "tensor_parallel": 2, "device": "cuda"}, "(NCCL) are not wired in dlbench yet"),
    ("paddle", {**PADDLE_LLAMA, "fsdp": True}, "--fsdp is not wired for paddle (Paddle's stage 3"),
    ("paddle", {**GPT2, "tensor_parallel": 2}, "dlbench's paddle backend splits no model"),
    # layouts (Capabilities.tensor_parallel, pipeline_parallel, recompute, split_*; the shape of a GPT)
    ("torch", {"model": "resnet50", "devices_per_node": 2, "tensor_parallel": 2}, "resnet50 has no parallel layout"),
    ("torch", {"model": "bert_base", "recompute": True}, "bert_base has no parallel layout"),
    ("tf", {**GPT2, "tensor_parallel": 2}, "dlbench's tf backend does not split a model"),
    ("tf", {"model": "gpt", "recompute": True}, "dlbench's tf backend does not recompute activations"),
    ("jax", {**GPT2, "pipeline_parallel": 2}, "JAX has no pipeline-parallel schedule"),
    ("fake", {**GPT2, "tensor_parallel": 2}, "the fake backend does not split a model"),
    ("torch", {**GPT2, "tensor_parallel": 2, "strategy": "allreduce"}, "leave --strategy at none"),
    ("torch", {**GPT2, "tensor_parallel": 2, "compile": True}, "torch's compiler is not wired for a split model"),
    ("torch", {**GPT2, "tensor_parallel": 2, "device": "cuda", "precision": "amp"}, "fp16 loss scaling across shards"),
    ("torch", {**LLAMA_FSDP, "precision": "amp"}, "fp16 loss scaling across shards"),
    ("torch", {**LLAMA_FSDP, "model": "dit_tiny", "precision": "amp"}, "fp16 loss scaling across shards"),  # #48
    ("torch", {**GPT2, "tensor_parallel": 2, "case_params": (("hidden", 64),)}, "1 attention head(s) do not split"),
    ("torch", {**GPT2, "tensor_parallel": 2, "case_params": (("heads", 3), ("hidden", 96))}, "3 attention head(s)"),
    ("torch", {**GPT2, "pipeline_parallel": 2, "case_params": (("layers", 3),)}, "3 layer(s) do not split into 2"),
    ("torch", {**GPT2, "tensor_parallel": 2, "case_params": (("vocab", 1),)}, "a vocabulary of 1 does not split over"),
    ("jax", {**GPT2, "tensor_parallel": 2, "case_params": (("vocab", 101),)}, "101 does not split evenly over 2"),
    # strategies (Capabilities.strategies, refused_strategies, default_strategy; StrategyCap.refusal)
    ("torch", {"strategy": "ddp"}, "strategy ddp needs several devices"),
    ("torch", {"devices_per_node": 2, "strategy": "horovod"}, "torch backend does not drive Horovod"),
    ("tf", {"devices_per_node": 2, "strategy": "horovod"}, "TF backend does not drive Horovod"),
    ("paddle", {"devices_per_node": 2, "strategy": "ps-cpu"}, "fleet's parameter-server mode"),
    ("mxnet", {"devices_per_node": 2}, "mxnet needs a strategy named on several devices"),
    ("torch", {"devices_per_node": 2, "strategy": "mirrored"}, "torch has no mirrored strategy; use one of ddp"),
    ("jax", {"devices_per_node": 2, "strategy": "ddp"}, "jax has no ddp strategy; use --strategy sharding"),
    ("oneflow", {"devices_per_node": 2, "strategy": "allreduce"}, "OneFlow's data parallelism is wired as ddp only"),
    ("paddle", {"model": "wide_deep", "devices_per_node": 2, "strategy": "sharding"}, "sparse (SelectedRows)"),
    ("paddle", {"devices_per_node": 2, "strategy": "ddp"}, "paddle has no ddp strategy; use --strategy fleet"),
    ("torch", {"devices_per_node": 2, "strategy": "dp"}, "on the CPU it cannot run several devices"),
    ("torch", {"nodes": 2, "devices_per_node": 2, "strategy": "dp", "device": "cuda"}, "across nodes neither"),
    ("torch", {"devices_per_node": 2, "strategy": "ps", "device": "cuda", "precision": "amp"}, "ps with fp16 loss"),
    ("tf", {"devices_per_node": 2, "strategy": "mirrored"}, "mirrored runs one process over one node's GPUs"),
    ("tf", {"nodes": 2, "devices_per_node": 2, "strategy": "ps"}, "dlbench starts its servers on one host"),
    ("tf", {"devices_per_node": 2, "strategy": "replicated-nccl"}, "replicated-nccl needs NCCL"),
    *[
        ("tf", {"nodes": 2, "devices_per_node": 2, "strategy": name}, f"{name} runs one process over one node's")
        for name in ("ps-cpu", "ps-gpu", "replicated-copy", "replicated-pscpu", "independent")
    ],
    *[
        ("mxnet", {"nodes": 2, "devices_per_node": 2, "strategy": name}, f"{name} runs MXNet's kvstore in one process")
        for name in ("ps-cpu", "ps-gpu", "independent")
    ],
    ("mxnet", {"devices_per_node": 2, "strategy": "replicated-nccl"}, "MXNet's nccl kvstore needs GPUs"),
    ("mxnet", {"devices_per_node": 2, "strategy": "ps", "precision": "bf16"}, "kvstores in fp32 only"),
    # a model-parallel classifier (Capabilities.sharded_classifier_strategies)
    ("torch", {**FACE_MP, "strategy": "allreduce"}, "a model-parallel classifier trains with the ddp strategy only"),
    # precisions (the numerics policy, Capabilities.precisions, fp8_layouts)
    ("torch", {"precision": "amp"}, "amp is float16 with loss scaling"),
    ("torch", {"precision": "tf32"}, "tf32 is a tensor-core mode"),
    ("jax", {"precision": "fp8", "device": "cuda"}, "--precision fp8 is wired for torch only"),
    ("jittor", {"precision": "bf16"}, "Jittor backend trains in fp32 only"),
    ("megengine", {"precision": "bf16"}, "MegEngine backend runs fp32 only"),
    ("mindspore", {"precision": "bf16"}, "CPU kernels have no bf16"),
    ("mxnet", {"precision": "bf16", "device": "cuda"}, "mxnet backend runs fp32 only on GPUs"),
    ("oneflow", {"precision": "bf16"}, "OneFlow backend runs fp32 only"),
    ("torch", {**LLAMA_FSDP, "precision": "fp8"}, "fp8 with a split or FSDP layout is not wired"),
    ("torch", {"devices_per_node": 2, "device": "cuda", "precision": "fp8"}, "fp8 is wired for one device only"),
    # options (Capabilities.channels_last, channels_last_archs, compile, no_compile_archs, multi_device_compile_why)
    ("jax", {"model": "resnet50", "channels_last": True}, "JAX/XLA chooses layouts itself"),
    ("jittor", {"channels_last": True}, "Jittor's convolutions take NCHW only"),
    ("megengine", {"channels_last": True}, "MegEngine backend trains NCHW only"),
    ("mindspore", {"channels_last": True}, "MindSpore's convolutions take NCHW only"),
    ("mxnet", {"channels_last": True}, "MXNet Gluon's CPU convolutions take NCHW only"),
    ("oneflow", {"channels_last": True}, "OneFlow backend trains NCHW only"),
    ("torch", {"model": "bert_base", "channels_last": True}, "channels-last applies to image models only"),
    ("paddle", {"model": "vgg16", "channels_last": True}, "paddle builds this model NCHW only"),
    ("jittor", {"compile": True}, "Jittor always JIT-compiles"),
    ("mindspore", {"model": "moe_tiny", "compile": True}, "an ms.jit graph needs static shapes"),
    ("oneflow", {"devices_per_node": 2, "compile": True}, "an nn.Graph on several devices needs global tensors"),
    # case families a framework never builds (Capabilities.refused_archs, #46)
    ("megengine", {"model": "llama_tiny"}, "MegEngine 1.13, its last release (2023), has no RMSNorm"),
    ("megengine", {"model": "mixtral_8x7b"}, "does not build the Llama or MoE families"),
    ("mxnet", {"model": "llama_tiny"}, "Apache retired MXNet to the Attic in 2023"),
    ("mxnet", {"model": "moe_tiny"}, "MXNet backend does not build the Llama or MoE families"),
]

# Points next to a rule that run: the rule does not reach too far.
ALLOWED: list[tuple[str, dict[str, Any]]] = [
    ("torch", {"devices_per_node": 2}),  # none means ddp
    ("torch", {"devices_per_node": 2, "strategy": "dp", "device": "cuda"}),
    ("torch", {"devices_per_node": 2, "strategy": "ps", "device": "cuda", "precision": "bf16"}),
    ("torch", {**GPT2, "tensor_parallel": 2}),
    ("torch", {"model": "gpt", "recompute": True}),
    ("torch", {**LLAMA_FSDP, "precision": "bf16"}),
    ("torch", {**LLAMA_FSDP, "model": "dit_tiny", "precision": "bf16"}),
    ("torch", {"model": "llama_tiny", "precision": "fp8", "device": "cuda"}),
    ("torch", {**FACE_MP, "strategy": "ddp"}),
    ("torch", FACE_MP),  # none means ddp
    ("torch", {"model": "resnet50", "channels_last": True}),
    ("jax", {**GPT2, "tensor_parallel": 2, "case_params": (("vocab", 128),)}),
    ("jax", {"devices_per_node": 2}),  # none means sharding
    ("tf", {"devices_per_node": 2, "strategy": "mirrored", "device": "cuda"}),
    ("tf", {"devices_per_node": 2, "strategy": "replicated-copy"}),
    ("mxnet", {"devices_per_node": 2, "strategy": "ps-cpu"}),
    ("mxnet", {"precision": "bf16"}),
    ("paddle", {"model": "resnet50", "channels_last": True}),
    ("paddle", {**PADDLE_LLAMA, "strategy": "sharding"}),
    ("paddle", {"model": "wide_deep", "devices_per_node": 2, "strategy": "sharding", "case_params": (("sparse", 0),)}),
    ("paddle", {"model": "resnet50", "devices_per_node": 2, "strategy": "sharding"}),
    ("paddle", {**PADDLE_LLAMA, "model": "moe_tiny"}),  # none means fleet
    ("oneflow", {"compile": True}),
    ("oneflow", {"model": "llama_tiny"}),
    ("oneflow", {"model": "moe_tiny"}),
    ("megengine", {"model": "bert_base"}),
    ("mindspore", {"model": "llama_tiny", "compile": True}),
    ("fake", {"devices_per_node": 2, "strategy": "mirrored", "precision": "amp"}),
]


@pytest.mark.parametrize(
    ("framework", "fields", "words"), REFUSED, ids=[f"{fw}-{words[:40]}" for fw, _, words in REFUSED]
)
def test_each_rule_refuses_in_one_line(framework: str, fields: dict[str, Any], words: str) -> None:
    reason = refusal(_point(framework, **fields)) or ""
    assert words in reason and "\n" not in reason, reason


@pytest.mark.parametrize(("framework", "fields"), ALLOWED, ids=[f"{fw}-{i}" for i, (fw, _) in enumerate(ALLOWED)])
def test_points_beside_a_rule_run(framework: str, fields: dict[str, Any]) -> None:
    assert refusal(_point(framework, **fields)) is None


def _reasons(caps: Capabilities) -> set[str]:
    """Every refusal text a table holds: its *_why fields, its strategies' why_not, its refused strategies."""
    found = {getattr(caps, f.name) for f in dataclasses.fields(caps) if f.name.endswith("_why")}
    found |= {s.why_not for s in caps.strategies} | {s.sparse_why for s in caps.strategies}
    found |= {why for _, why in caps.refused_strategies}
    found |= {why for _, why in caps.refused_archs} | {why for _, why in caps.no_compile_archs}
    return {text for text in found if text}


def test_every_reason_a_table_holds_is_reached_by_a_row() -> None:
    reached = {refusal(_point(fw, **fields)) for fw, fields, _ in REFUSED}
    for name, info in all_backends(include_test=True).items():
        table = info.capabilities_table()
        assert table is not None
        missing = _reasons(table) - reached
        assert not missing, f"{name}: no row of REFUSED reaches {sorted(missing)}"


def test_a_strategy_without_its_own_reason_says_where_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default lines of a table that leaves a reason out (a third party's, say)."""
    caps = Capabilities(
        framework="torch",
        multi_device=("cuda",),
        strategies=(StrategyCap("allreduce", devices=("cuda",), across_nodes=False, precisions=("fp32",)),),
        precisions=(("cpu", ("fp32",)),),
        channels_last=False,
        compile=False,
    )
    monkeypatch.setattr("dlbench.refusals.get_info", lambda _name: _Info(caps))
    assert "runs several devices on cuda only" in (refusal(_point("torch", devices_per_node=2)) or "")
    ring = _point("torch", devices_per_node=2, device="cuda", strategy="allreduce", nodes=2)
    assert "strategy allreduce runs on cuda with fp32, one node" in (refusal(ring) or "")
    assert "runs fp32 on cpu: use --precision fp32" in (refusal(_point("torch", precision="bf16")) or "")
    assert "offers no channels-last" in (refusal(_point("torch", channels_last=True)) or "")
    assert "has no compile switch" in (refusal(_point("torch", compile=True)) or "")
    assert refusal(_point("torch", devices_per_node=2, device="cuda", strategy="allreduce")) is None


def test_a_backend_without_a_table_splits_no_model_and_leaves_the_rest_to_its_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("dlbench.refusals.get_info", lambda _name: _Info(None))
    assert "does not split a model" in (refusal(_point("fake", **GPT2, tensor_parallel=2)) or "")
    assert "does not recompute activations" in (refusal(_point("fake", model="gpt", recompute=True)) or "")
    for fields in ({"devices_per_node": 2, "strategy": "allreduce"}, {"precision": "amp"}, {"compile": True}):
        assert refusal(_point("fake", **fields)) is None, fields


def test_the_torch_table_names_the_strategies_its_backend_runs() -> None:
    distributed = pytest.importorskip("dlbench.backends.torch.distributed", reason="torch is not installed here")
    from dlbench.capabilities.torch import CAPABILITIES

    assert set(CAPABILITIES.names()) == set(distributed.STRATEGIES)


def test_the_tables_name_the_strategies_of_their_backends_modules() -> None:
    """TF's, MXNet's and Paddle's strategy names, as their backends spell them (read as text: no framework here)."""
    from pathlib import Path

    import dlbench

    root = Path(dlbench.__file__).parent / "backends"
    assert all(f'"{s.name}"' in (root / "mxnet" / "kvstores.py").read_text() for s in MXNET.strategies)
    tf_text = "".join((root / "tf" / f).read_text() for f in ("backend.py", "distributed.py", "variables.py"))
    assert all(f'"{s.name}"' in tf_text for s in TF.strategies)
    paddle_text = (root / "paddle" / "distributed.py").read_text()
    assert all(f'"{s.name}"' in paddle_text for s in PADDLE.strategies)


@dataclasses.dataclass
class _Info:
    table: Capabilities | None

    def capabilities_table(self) -> Capabilities | None:
        return self.table


def test_a_family_a_framework_never_builds_is_refused_in_one_line_with_exit_2(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    """`dlbench run -f megengine -m llama_tiny` as a user types it: the table's reason, before any environment is
    asked (none is set up here) and nothing stored."""
    code, _, err = cli("run", "-f", "megengine", "-m", "llama_tiny", "--store", str(tmp_path / "r.db"))
    assert code == 2 and err.strip().count("\n") == 0, err
    assert "does not build the Llama or MoE families" in err
    assert not (tmp_path / "r.db").exists()
