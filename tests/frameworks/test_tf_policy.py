"""The TF backend's GPU-correctness settings, checked on the CPU in the tf environment: the numerics flags read
back from TensorFlow, the out-of-memory classification from TF's real exceptions (raised by a tf.function and by
an XLA-compiled one), TF_CONFIG from the rank context, and no allocator peak on the CPU.

Each probe runs once in the tf environment's interpreter (`dlbench setup tf`) and prints JSON; a test skips,
naming it, where that environment is absent.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.support.frameworks import interpreter_or_skip

pytestmark = [pytest.mark.framework("tf"), pytest.mark.slow]

PROBE = textwrap.dedent("""
    import dataclasses
    import json
    import tensorflow as tf
    from dlbench.backends.tf import backend as tfb
    from dlbench.backends.tf.step import make_optimizer
    from dlbench.cases import get_case
    from dlbench.numerics import resolve_precision
    from dlbench.spec import PointSpec, preset
    from dlbench.wire import RankContext
    from dlbench.worker import refusal

    out = {"tf32_default": tf.config.experimental.tensor_float_32_execution_enabled()}
    b = tfb.TfBackend()
    case = get_case("alexnet")
    spec = PointSpec(framework="tf", model="alexnet", batch_size=1, protocol=preset("quick"), input_size=64)
    trainer = b.build(spec, case, RankContext())
    trainer.train_step(trainer.next_batch())
    out["fp32"] = {"tf32": tf.config.experimental.tensor_float_32_execution_enabled(),
                   "env": b.environment(spec), "facts": {k: str(v) for k, v in b.facts().items()},
                   "loss": trainer.loss(), "peak": repr(trainer.allocator_peak())}
    for precision in ("tf32", "amp", "bf16"):
        out["refuse_" + precision] = refusal(b, dataclasses.replace(spec, precision=precision))
    # what tf32 and amp apply where they run (a GPU), applied here and read back from TF and Keras
    for precision in ("tf32", "amp", "bf16"):
        tfb.apply_numerics(resolve_precision(precision, "cuda"))
        out["applied_" + precision] = {
            "tf32": tf.config.experimental.tensor_float_32_execution_enabled(),
            "policy": tf.keras.mixed_precision.global_policy().name,
            "math_mode_gpu": tfb.math_mode(on_gpu=True), "math_mode_cpu": tfb.math_mode(on_gpu=False)}
    out["amp_optimizer"] = type(make_optimizer(case, 2, loss_scale=True)).__name__

    def raised(fn, arg):
        try:
            fn(arg)
        except Exception as exc:
            return exc
        return None

    big = tf.function(lambda n: tf.reduce_sum(tf.zeros([n, 1024, 1024], tf.float32)))  # 16 TiB: refused at once
    tiled = tf.function(lambda x: tf.reduce_sum(tf.tile(x, [1 << 20, 1 << 20])), jit_compile=True)
    errors = {"tf.function": raised(big, tf.constant(1 << 22)), "xla": raised(tiled, tf.ones([64, 64]))}
    for name, exc in errors.items():
        try:
            raise RuntimeError("a step failed") from exc
        except RuntimeError as wrapped:
            out["oom_" + name] = {"class": type(exc).__name__, "oom": b.oom_error(exc), "wrapped": b.is_oom(wrapped)}
    cubin = tf.errors.InternalError(None, None, "Failed to load in-memory CUBIN: CUDA_ERROR_OUT_OF_MEMORY: out of memory")
    out["oom_cubin"] = b.is_oom(cubin)
    out["oom_internal_other"] = b.is_oom(tf.errors.InternalError(None, None, "cuDNN launch failure"))
    out["oom_invalid_argument"] = b.is_oom(tf.errors.InvalidArgumentError(None, None, "shapes differ"))
    # amp's recorded host read, and the Keras code it cites (the loss scaler's tf.cond on the finite flag)
    import inspect, keras
    amp = tfb.TfBackend()
    amp.build(dataclasses.replace(spec, precision="amp"), case, RankContext())  # built past refuse: a GPU's path
    out["amp_facts"] = {k: str(v) for k, v in amp.facts().items()}
    out["fp32_host_sync"] = b.facts().get("amp_host_sync")
    out["scaler_source"] = inspect.getsource(keras.optimizers.LossScaleOptimizer._common_apply)
    # the fairness TF loop's feed: Keras's train function steps on the one device batch, never a tf.data copy
    import sys
    sys.path.insert(0, __LOOPS__)
    import tf_loop
    images, labels = tf.random.normal((2, 4)), tf.constant([0, 1])
    keras.mixed_precision.set_global_policy("float32")
    tiny = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    tiny.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(True))
    tiny.make_train_function()
    batches = tf_loop.feed(images, labels)
    for _ in range(3):
        tiny.train_function(batches)
    again = next(batches)
    out["tf_loop"] = {"same": again[0] is images and again[1] is labels, "steps": int(tiny.optimizer.iterations),
                      "tf_data": isinstance(batches, tf.data.Iterator)}
    print(json.dumps(out, default=str))
""").replace("__LOOPS__", repr(str(Path(__file__).parents[2] / "benchmarks" / "fairness_loops")))

CONFIG_PROBE = textwrap.dedent("""
    import json
    from dlbench.backends.tf.distributed import tf_config
    from dlbench.spec import PointSpec, preset
    from dlbench.wire import RankContext

    spec = PointSpec(framework="tf", model="resnet50", batch_size=2, protocol=preset("quick"), nodes=2,
                     devices_per_node=2, strategy="multiworker")
    ctx = RankContext(rank=3, world_size=4, local_rank=1, local_world_size=2, node_rank=1, master_addr="h0",
                      master_port=29500, node_hosts=("h0", "h1"))
    out = {"config": tf_config(spec, ctx)}
    try:
        tf_config(spec, RankContext(rank=1, world_size=4, master_port=0))
    except RuntimeError as exc:
        out["no_port"] = str(exc)
    print(json.dumps(out))
""")


# TF's device calls replaced at their boundary (this machine has no GPU): which GPUs each rank makes visible
# and grows, for the machine's GPUs as listed, under the rank context given.
GPU_PROBE = textwrap.dedent("""
    import json, os
    import tensorflow as tf
    from dlbench.backends.base import Unsupported
    from dlbench.backends.tf import backend as tfb
    from dlbench.spec import PointSpec, preset
    from dlbench.wire import RankContext

    calls = []
    listed = []
    tf.config.list_physical_devices = lambda kind=None: list(listed)
    tf.config.set_visible_devices = lambda devices, kind=None: calls.append(("visible", [d.name for d in devices]))
    tf.config.experimental.set_memory_growth = lambda d, on: calls.append(("growth", d.name, on))

    def configure(gpus, strategy, local_rank, local_world, devices_per_node, bound="", slurm=False):
        listed[:] = [tf.config.PhysicalDevice(f"/physical_device:GPU:{i}", "GPU") for i in range(gpus)]
        calls.clear()
        for name in ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_LOCALID"):
            os.environ.pop(name, None)
        if bound:
            os.environ["CUDA_VISIBLE_DEVICES"] = bound
        if slurm:  # Slurm bound one GPU to this task (--gpus-per-task=1)
            os.environ["SLURM_STEP_GPUS"] = bound
        spec = PointSpec(framework="tf", model="resnet50", batch_size=2, protocol=preset("quick"), device="cuda",
                         devices_per_node=devices_per_node, strategy=strategy)
        ctx = RankContext(rank=local_rank, world_size=devices_per_node, local_rank=local_rank,
                          local_world_size=local_world)
        try:
            facts = tfb.TfBackend()._configure(spec, ctx)
        except Unsupported as exc:
            return {"unsupported": str(exc)}
        return {"calls": calls[:], "facts": facts}

    print(json.dumps({
        "rank1_of_2": configure(2, "multiworker", 1, 2, 2),
        "bound": configure(1, "multiworker", 1, 2, 2, bound="1", slurm=True),
        "pinned": configure(1, "multiworker", 1, 2, 2, bound="1"),
        "shared": configure(1, "multiworker", 1, 2, 2),
        "mirrored": configure(2, "mirrored", 0, 1, 2),
        "alone": configure(1, "none", 0, 1, 1),
    }))
""")


def _probe(script: str) -> dict[str, object]:
    """Run a script in the tf environment and parse the JSON on its last output line."""
    proc = subprocess.run(
        [interpreter_or_skip("tf"), "-c", script], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def probe() -> dict[str, object]:
    """The numerics and OOM probe's answer (one TF process for the module)."""
    return _probe(PROBE)


def test_fp32_turns_tf32_off_and_reports_it(probe: dict[str, object]) -> None:
    fp32 = probe["fp32"]
    assert isinstance(fp32, dict)
    assert probe["tf32_default"] is True  # TF's own default, which fp32 must override
    assert fp32["tf32"] is False and fp32["facts"]["tf32_execution"] == "False"
    assert fp32["env"]["math_mode"] == "fp32" and fp32["env"]["tf32_execution"] == "False"
    assert fp32["facts"]["precision_policy"] == "float32" and fp32["facts"]["loss_scale"] == "none"
    assert fp32["loss"] > 0 and fp32["peak"] == "None"  # no allocator peak on the CPU (the worker keeps RSS)


def test_tf32_and_amp_are_refused_on_the_cpu_and_bf16_runs(probe: dict[str, object]) -> None:
    assert "tf32" in str(probe["refuse_tf32"]) and "--precision fp32" in str(probe["refuse_tf32"])
    assert "amp" in str(probe["refuse_amp"]) and "GPUs" in str(probe["refuse_amp"])
    assert probe["refuse_bf16"] is None


def test_what_tf32_amp_and_bf16_apply_is_read_back(probe: dict[str, object]) -> None:
    assert probe["applied_tf32"] == {
        "tf32": True,
        "policy": "float32",
        "math_mode_gpu": "tf32",
        "math_mode_cpu": "fp32",
    }
    assert probe["applied_amp"] == {
        "tf32": False,
        "policy": "mixed_float16",
        "math_mode_gpu": "fp16",
        "math_mode_cpu": "fp16",
    }
    assert probe["applied_bf16"] == {
        "tf32": False,
        "policy": "mixed_bfloat16",
        "math_mode_gpu": "bf16",
        "math_mode_cpu": "bf16",
    }
    assert probe["amp_optimizer"] == "LossScaleOptimizer"


@pytest.mark.parametrize("where", ["tf.function", "xla"])
def test_real_out_of_memory_errors_are_oom_even_wrapped(probe: dict[str, object], where: str) -> None:
    answer = probe[f"oom_{where}"]
    assert answer == {"class": "ResourceExhaustedError", "oom": True, "wrapped": True}


def test_other_tf_errors_are_not_oom(probe: dict[str, object]) -> None:
    assert probe["oom_cubin"] is True  # XLA's kernel loading out of device memory, an InternalError
    assert probe["oom_internal_other"] is False and probe["oom_invalid_argument"] is False


def test_tf_config_comes_from_the_rank_context() -> None:
    answer = _probe(CONFIG_PROBE)
    assert answer["config"] == {
        "cluster": {"worker": ["h0:29501", "h0:29502", "h1:29503", "h1:29504"]},
        "task": {"type": "worker", "index": 3},
    }
    assert "MASTER_PORT" in str(answer["no_port"])


def test_each_rank_sees_its_own_gpu_with_memory_growth() -> None:
    answer = _probe(GPU_PROBE)
    assert answer["rank1_of_2"]["calls"] == [
        ["visible", ["/physical_device:GPU:1"]],
        ["growth", "/physical_device:GPU:1", True],
    ]
    assert answer["rank1_of_2"]["facts"] == {"gpu_memory_growth": True, "visible_gpus": "GPU:1"}
    assert answer["bound"]["calls"] == [
        ["visible", ["/physical_device:GPU:0"]],  # its one bound GPU: ordinal 0
        ["growth", "/physical_device:GPU:0", True],
    ]
    assert "1 visible GPU" in answer["shared"]["unsupported"]  # two ranks would share one GPU
    # the controller's CUDA_VISIBLE_DEVICES=1 reaches both ranks it starts: they would share GPU 1
    assert "CUDA_VISIBLE_DEVICES=1, the same for every rank" in answer["pinned"]["unsupported"]
    assert answer["mirrored"]["calls"] == [
        ["growth", "/physical_device:GPU:0", True],  # one process, every GPU
        ["growth", "/physical_device:GPU:1", True],
    ]
    assert answer["alone"]["facts"]["visible_gpus"] == "GPU:0"


# --- gpu-b: amp's host read; the fairness loop's device-resident batch ---
def test_amp_records_tensorflows_own_host_read(probe: dict[str, object]) -> None:
    facts = probe["amp_facts"]
    assert isinstance(facts, dict) and facts["loss_scale"] == "dynamic"
    assert "reads the overflow flag on the host every step" in facts["amp_host_sync"]
    assert "LossScaleOptimizer._common_apply" in facts["amp_host_sync"]
    assert "ops.cond(" in str(probe["scaler_source"]) and "finite" in str(probe["scaler_source"])  # as cited
    assert probe["fp32_host_sync"] is None  # fp32 has no loss scaler


def test_fairness_tf_loop_feeds_one_device_batch_to_keras_train_function(probe: dict[str, object]) -> None:
    assert probe["tf_loop"] == {"same": True, "steps": 3, "tf_data": False}  # one step a call, never a copied batch
