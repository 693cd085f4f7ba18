"""TensorFlow/Keras backend: the case's Keras model, a synthetic NHWC batch made on the device, a TfTrainer.

Mapping of dlbench's options: precision fp32 -> Keras policy "float32"; amp -> "mixed_float16" with a dynamic
LossScaleOptimizer on a GPU, "mixed_bfloat16" on the CPU; bf16 -> "mixed_bfloat16". --compile -> XLA
(``tf.function(jit_compile=True)``). Layout is always NHWC, TF's native one, so --channels-last changes
nothing and every result records ``layout: NHWC``. Threads come from --threads (the worker also exports it as
OMP_NUM_THREADS) and set both TF thread pools. --data real reads `dlbench data` folders through tf.data
(``real_data.py``). Several devices go through tf.distribute (``distributed.py``: MultiWorkerMirroredStrategy, one
worker process per device; or MirroredStrategy over one process's GPUs).
"""

from __future__ import annotations

import gc
import os

import keras
import numpy as np
import tensorflow as tf

from dlbench.backends.base import Backend, Trainer
from dlbench.backends.tf import distributed
from dlbench.backends.tf.bert import build_bert
from dlbench.backends.tf.data import synthetic_batch
from dlbench.backends.tf.models import CNN_BUILDERS
from dlbench.backends.tf.step import TfTrainer
from dlbench.cases import Case, ImageInput, get_case
from dlbench.spec import PointSpec


def build_model(case: Case, input_size: int | None = None) -> keras.Model:
    """A freshly initialised Keras model for the case, under the current global precision policy."""
    if case.task == "bert_pretraining":
        return build_bert()
    assert isinstance(case.input, ImageInput)
    return CNN_BUILDERS[case.name](input_size or case.input.size, case.input.classes)


def count_trainable(model: keras.Model) -> int:
    """Number of trainable parameters; a variable used twice (BERT's tied decoder) is one variable."""
    return int(sum(np.prod(v.shape) for v in model.trainable_variables))


def policy_name(precision: str, on_gpu: bool) -> str:
    """The Keras mixed-precision policy for a dlbench precision on this device."""
    if precision == "fp32":
        return "float32"
    if precision == "amp" and on_gpu:
        return "mixed_float16"
    return "mixed_bfloat16"


def _gpus() -> list[tf.config.PhysicalDevice]:
    return list(tf.config.list_physical_devices("GPU"))


class TfBackend(Backend):
    """How TensorFlow/Keras trains a case."""

    name = "tf"

    def __init__(self) -> None:
        self._configured = False
        self._facts: dict[str, object] = {}

    def _configure(self, spec: PointSpec) -> None:
        """Threads and visible devices: must happen before TF's runtime starts, so once and first."""
        if self._configured:
            return
        self._configured = True
        threads = spec.threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
        try:
            if threads:
                tf.config.threading.set_intra_op_parallelism_threads(threads)
                tf.config.threading.set_inter_op_parallelism_threads(distributed.inter_op_threads(spec, threads))
            if spec.device == "cpu":
                tf.config.set_visible_devices([], "GPU")
            else:  # grow on demand, so that the peak we report is what the step needed
                if distributed.strategy_name(spec) == "multiworker" and _gpus():  # one GPU per worker process
                    tf.config.set_visible_devices(_gpus()[int(os.environ.get("LOCAL_RANK", "0")) % len(_gpus())],
                                                  "GPU")
                for gpu in _gpus():
                    tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # the runtime had already started (several builds in one process, e.g. checks)
            pass

    def environment(self, spec: PointSpec) -> dict[str, str]:
        self._configure(spec)
        env = {"framework_version": tf.__version__, "keras_version": keras.__version__,
               "tf_intra_op_threads": str(tf.config.threading.get_intra_op_parallelism_threads()),
               "tf_inter_op_threads": str(tf.config.threading.get_inter_op_parallelism_threads())}
        gpus = _gpus()
        if spec.device == "cuda" and gpus:
            details = tf.config.experimental.get_device_details(gpus[0])
            env["device_model"] = str(details.get("device_name", ""))
            build = tf.sysconfig.get_build_info()
            env["cuda"] = str(build.get("cuda_version", ""))
            env["cudnn"] = str(build.get("cudnn_version", ""))
        if distributed.strategy_name(spec) != "none":
            env["strategy_run"] = distributed.strategy_name(spec)
        return env

    def case_support(self, case: Case) -> str | None:
        if case.optimizer.weight_decay:
            return "the tf backend does not map torch-style (L2) weight decay yet"
        return None

    def refuse(self, spec: PointSpec) -> str | None:
        if spec.device == "cuda" and not _gpus():
            return "TensorFlow here sees no GPU (tensorflow-cpu, or no CUDA device): use --device cpu"
        if spec.channels_last and not isinstance(get_case(spec.model).input, ImageInput):
            return "channels-last applies to image models only"
        return distributed.refuse(spec, len(_gpus()))

    def build(self, spec: PointSpec, case: Case) -> Trainer:
        self._configure(spec)
        strategy = distributed.make_strategy(spec, len(_gpus()))  # first: before anything starts TF's context
        on_gpu = spec.device == "cuda"
        device = "/GPU:0" if on_gpu else "/CPU:0"
        policy = policy_name(spec.precision, on_gpu)
        keras.utils.set_random_seed(spec.seed)
        keras.mixed_precision.set_global_policy(policy)
        with strategy.scope() if strategy else tf.device(device):  # variables mirrored on every replica
            model = build_model(case, spec.input_size)
        loss_scale = policy == "mixed_float16"
        self._facts = {"compiled": "xla" if spec.compile else "none", "layout": "NHWC",
                       "precision_policy": policy, "loss_scale": "dynamic" if loss_scale else "none",
                       "keras_version": keras.__version__}
        if strategy is not None:
            self._facts.update(distributed.facts(spec, strategy))
            return distributed.TfDistTrainer(spec, case, strategy, model, loss_scale)
        if spec.data == "real":  # files made by `dlbench data` (docs/data-layout.md), through tf.data
            from dlbench.backends.tf import real_data

            self._facts["loader"] = f"tf.data, {spec.loader_workers or 1} parallel decode calls, prefetch"
            return real_data.build_trainer(spec, case, model, device, loss_scale)
        batch = synthetic_batch(case, spec.batch_size, device, spec.input_size, spec.seed)
        return TfTrainer(case, model, batch, device, jit_compile=spec.compile, loss_scale=loss_scale,
                         global_batch=spec.global_batch)

    def count_params(self, case: Case) -> int:
        keras.mixed_precision.set_global_policy("float32")
        with tf.device("/CPU:0"):
            n = count_trainable(build_model(case))
        keras.backend.clear_session()
        gc.collect()
        return n

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, (MemoryError, tf.errors.ResourceExhaustedError))

    def finish(self) -> dict[str, object]:
        return dict(self._facts)
