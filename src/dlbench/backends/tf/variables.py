"""tf_cnn_benchmarks' variable managers in TF 2: one process drives N devices, and where the parameters live,
where gradients meet and how updates come back is explicit device placement inside one traced train step.

- ``ps-cpu``: one copy of the parameters on the host CPU; every device reads it, computes its gradients, and
  the gradients are summed and applied on the host (tf_cnn's ``parameter_server`` with
  ``local_parameter_device=cpu``).
- ``ps-gpu``: one copy, each variable on the least-loaded compute device by size at creation (tf_cnn's
  ``ParamServerDeviceSetter``); a variable's gradients are summed and applied on its device.
- ``replicated-copy``: a copy per device; gradient i is summed on device i mod N, then copied to every replica,
  which applies it to its own copy (tf_cnn's ``replicated`` without NCCL, ``local_parameter_device=gpu``).
- ``replicated-pscpu``: a copy per device; every gradient is summed on the host CPU and copied back (tf_cnn's
  ``replicated`` with ``local_parameter_device=cpu``).
- ``replicated-nccl``: a copy per device; NCCL all-sums every gradient (``nccl_ops.all_sum``). GPUs only: on CPU
  devices ``MirroredStrategy`` would silently fall back to ``ReductionToOneDevice``, so dlbench refuses it.
- ``independent``: a copy per device, no exchange at all: each replica trains alone (the upper bound of scaling;
  its replicas are expected to differ).

The replica's forward and backward pass is traced once (``keras.Model.stateless_call`` over the values of a
copy) and called on each device: N call sites of one function, so tracing costs one replica, not N. Variables
are read where they live and TF copies them to the device that computes, as tf_cnn's explicit copies did.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

from dlbench.backends.base import AllocatorPeak, fixed
from dlbench.backends.tf.data import synthetic_batch
from dlbench.backends.tf.models import train_loss
from dlbench.backends.tf.step import LossOnHost, gpu_peak, make_optimizer
from dlbench.cases import Case
from dlbench.spec import PointSpec

Batch = dict[str, tf.Tensor]
STRATEGIES: tuple[str, ...] = (
    "ps-cpu",
    "ps-gpu",
    "replicated-nccl",
    "replicated-copy",
    "replicated-pscpu",
    "independent",
)
REPLICATED: tuple[str, ...] = ("replicated-nccl", "replicated-copy", "replicated-pscpu", "independent")
MECHANISM: dict[str, str] = {
    "ps-cpu": "parameters on {host}; each device reads them, gradients summed (tf.add_n) and applied on {host}",
    "ps-gpu": "parameters spread over the compute devices by size (least-loaded first); each variable's gradients "
    "summed (tf.add_n) and applied on its device",
    "replicated-nccl": "a copy per device; NCCL all-sum of every gradient (nccl_ops.all_sum)",
    "replicated-copy": "a copy per device; gradient i summed (tf.add_n) on device i mod N, copied to every replica",
    "replicated-pscpu": "a copy per device; every gradient summed (tf.add_n) on {host}, copied to every replica",
    "independent": "a copy per device; no gradient exchange (each replica trains alone)",
}


@dataclass(frozen=True)
class Devices:
    """The compute devices, one per replica, and the host CPU device that holds or sums for the ps-cpu modes."""

    compute: tuple[str, ...]
    host: str


def logical_cpus(n: int) -> Devices:
    """On the CPU: N logical compute devices /CPU:0../CPU:N-1 and one more, /CPU:N, as the host (configured by
    `split_cpu(n + 1)` before TF's runtime starts)."""
    return Devices(tuple(f"/CPU:{i}" for i in range(n)), f"/CPU:{n}")


def gpus(n: int) -> Devices:
    """On GPUs: the first N visible GPUs, and the host CPU."""
    return Devices(tuple(f"/GPU:{i}" for i in range(n)), "/CPU:0")


def split_cpu(n: int) -> None:
    """Split the one physical CPU into n logical devices (each sharing the same cores); before the runtime starts."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)])


class LeastLoaded:
    """tf_cnn_benchmarks' ParamServerDeviceSetter: each new variable goes to the device holding the fewest
    elements so far (ties to the lowest index)."""

    def __init__(self, devices: int) -> None:
        self.loads = [0] * devices

    def pick(self, size: int) -> int:
        """The device index for a variable of `size` elements, counted in."""
        d = min(range(len(self.loads)), key=lambda i: (self.loads[i], i))
        self.loads[d] += size
        return d


def _spreading(devices: tuple[str, ...]) -> Callable[..., tf.Variable]:
    """A variable creator placing each new variable on the least-loaded device by size, as it is created."""
    chooser = LeastLoaded(len(devices))

    def creator(next_creator: Callable[..., tf.Variable], **kwargs: object) -> tf.Variable:
        initial = kwargs.get("initial_value")
        value = initial() if callable(initial) else initial
        d = chooser.pick(int(np.prod(tf.convert_to_tensor(value).shape)))
        with tf.device(devices[d]):
            return next_creator(**{**kwargs, "initial_value": value})

    return creator


def build_placed(strategy: str, devices: Devices, build: Callable[[], keras.Model]) -> keras.Model:
    """Build the Keras model with its variables where the strategy keeps its (first) copy."""
    if strategy == "ps-gpu":
        with tf.variable_creator_scope(_spreading(devices.compute)):
            return build()
    with tf.device(devices.host if strategy == "ps-cpu" else devices.compute[0]):
        return build()


@dataclass
class Copy:
    """One copy of the parameters: the trainable and other (batch-norm statistics, seeds) variables, and one
    optimizer per device the copy's variables live on (its update runs there)."""

    trainable: list[keras.Variable]
    other: list[keras.Variable]
    optimizers: Placed

    def checksum(self) -> float:
        """A position-weighted float64 sum of the trainable weights (as the multi-process checks use)."""
        return float(
            sum((i + 1) * np.sum(keras.ops.convert_to_numpy(v), dtype=np.float64) for i, v in enumerate(self.trainable))
        )


def _device_of(v: keras.Variable) -> str:
    return str(v.value.device)


def _copy_of(model: keras.Model, device: str | None) -> tuple[list[keras.Variable], list[keras.Variable]]:
    """The model's variables (device None), or new variables with the same values on `device`."""
    if device is None:
        return list(model.trainable_variables), list(model.non_trainable_variables)

    def fresh(v: keras.Variable, trainable: bool) -> keras.Variable:
        # A read value, not the variable: Keras would wrap a tf.Variable initializer as is (one shared variable).
        return keras.Variable(tf.identity(v.value), dtype=v.dtype, trainable=trainable, name=v.name)

    with tf.device(device):
        return (
            [fresh(v, True) for v in model.trainable_variables],
            [fresh(v, False) for v in model.non_trainable_variables],
        )


Placed = list[tuple[str, list[int], keras.optimizers.Optimizer]]  # (device, variable indices, their optimizer)


def _optimizers(case: Case, global_batch: int, trainable: list[keras.Variable]) -> Placed:
    """One optimizer per device holding some of the variables, built (slots created) on that device."""
    by_device: dict[str, list[int]] = {}
    for i, v in enumerate(trainable):
        by_device.setdefault(_device_of(v), []).append(i)
    out = []
    for device, index in by_device.items():
        with tf.device(device):
            opt = make_optimizer(case, global_batch, loss_scale=False)
            opt.build([trainable[i] for i in index])
        out.append((device, index, opt))
    return out


class _Stateless:
    """The model called on given variable values (``stateless_call``), remembering the updated other variables;
    what train_loss calls as its model."""

    def __init__(self, model: keras.Model, trainable: list[tf.Tensor], other: list[tf.Tensor]) -> None:
        self.model, self.trainable, self.other = model, trainable, other
        self.updated: list[tf.Tensor] = list(other)

    def __call__(self, inputs: object, training: bool = True) -> object:
        out, self.updated = self.model.stateless_call(self.trainable, self.other, inputs, training=training)
        return out


class VariableMgrTrainer(LossOnHost):
    """N replicas in one traced step, the parameters placed and the gradients exchanged as `strategy` says.

    `batches` holds each replica's batch (on its device); each replica's loss is its batch's mean, and gradients
    are of loss / N, so a synchronous exchange sums to the gradient of the global batch's mean loss.
    """

    def __init__(
        self,
        case: Case,
        model: keras.Model,
        strategy: str,
        devices: Devices,
        batches: list[Batch],
        global_batch: int,
        jit_compile: bool = False,
    ) -> None:
        super().__init__(fixed(batches))
        self.case, self.model, self.strategy, self.devices = case, model, strategy, devices
        self.n = len(devices.compute)
        replicated = strategy in REPLICATED
        copies = [_copy_of(model, None if i == 0 else devices.compute[i]) for i in range(self.n if replicated else 1)]
        self.copies = [Copy(t, o, _optimizers(case, global_batch, t)) for t, o in copies]
        scale = 1.0 if strategy == "independent" else 1.0 / self.n
        self._grads = tf.function(
            self._replica_grads(scale),
            autograph=False,
            jit_compile=jit_compile,
            experimental_attributes={"_noinline": True},
        )
        self._step = tf.function(self._train_step, autograph=False)

    def _replica_grads(self, scale: float) -> Callable[..., tuple[tf.Tensor, list[tf.Tensor], list[tf.Tensor]]]:
        def grads(
            trainable: list[tf.Tensor], other: list[tf.Tensor], batch: Batch
        ) -> tuple[tf.Tensor, list[tf.Tensor], list[tf.Tensor]]:
            with tf.GradientTape() as tape:
                tape.watch(trainable)
                model = _Stateless(self.model, trainable, other)
                loss = train_loss(self.case, model, batch)
                scaled = loss * scale
            return loss, tape.gradient(scaled, trainable), model.updated

        return grads

    def _train_step(self, batches: list[Batch]) -> tf.Tensor:
        losses, grads = [], []
        for i, device in enumerate(self.devices.compute):
            copy = self.copies[i if len(self.copies) > 1 else 0]
            with tf.device(device):  # read the copy where it lives, copied here by TF
                loss, g, updated = self._grads(
                    [tf.identity(v.value) for v in copy.trainable],
                    [tf.identity(v.value) for v in copy.other],
                    batches[i],
                )
            if len(self.copies) > 1 or i == 0:  # batch-norm statistics: each replica's own; one copy: device 0's
                for v, new in zip(copy.other, updated):
                    with tf.device(_device_of(v)):
                        v.assign(new)
            losses.append(loss)
            grads.append(g)
        for copy, update in zip(self.copies, self._exchange(grads)):
            for device, index, opt in copy.optimizers:
                with tf.device(device):
                    opt.apply([tf.identity(update[j]) for j in index], [copy.trainable[j] for j in index])
        with tf.device(self.devices.host):
            return tf.add_n(losses) / self.n

    def _exchange(self, grads: list[list[tf.Tensor]]) -> list[list[tf.Tensor]]:
        """Each copy's gradients after the exchange: the sums, placed as the strategy says (or each its own)."""
        n, count = self.n, len(grads[0])
        if self.strategy == "independent":
            return grads
        if self.strategy == "replicated-nccl":
            # GPUs only; refused on the CPU before this runs
            from tensorflow.python.ops import nccl_ops

            per_var = [nccl_ops.all_sum([g[j] for g in grads]) for j in range(count)]
            return [[per_var[j][i] for j in range(count)] for i in range(n)]
        summed = []
        for j in range(count):
            if self.strategy in ("ps-cpu", "replicated-pscpu"):
                where = self.devices.host
            elif self.strategy == "ps-gpu":
                where = _device_of(self.copies[0].trainable[j])
            else:  # replicated-copy
                where = self.devices.compute[j % n]
            with tf.device(where):
                summed.append(tf.add_n([g[j] for g in grads]))
        return [summed] * len(self.copies)

    def train_step(self, batch: list[Batch]) -> None:
        self._last = self._step(batch)
        self._host = None

    def replica_checksums(self) -> list[float]:
        """One checksum per copy of the parameters (one for the ps modes, which keep a single copy)."""
        return [c.checksum() for c in self.copies]

    def placement(self) -> dict[str, int]:
        """Where the (first copy's) trainable variables live: device -> number of variables."""
        out: dict[str, int] = {}
        for v in self.copies[0].trainable:
            name = _device_of(v).rsplit("device:", 1)[-1]
            out[name] = out.get(name, 0) + 1
        return out

    def summed_on(self) -> dict[str, int]:
        """Where the traced step sums gradients (AddN ops by device), read back from the graph TF built."""
        graph = self._step.get_concrete_function(next(self.batches)).graph
        out: dict[str, int] = {}
        for op in graph.get_operations():
            if op.type == "AddN" and op.inputs and len(op.inputs) == self.n and op.inputs[0].shape.rank:
                name = op.device.rsplit("device:", 1)[-1] or "unplaced"
                out[name] = out.get(name, 0) + 1
        return out

    def allocator_peak(self) -> AllocatorPeak | None:
        """The first GPU's allocator peak (None on the CPU)."""
        return gpu_peak(self.devices.compute[0])


def replica_batches(spec: PointSpec, case: Case, devices: Devices) -> list[Batch]:
    """Each replica's fixed synthetic batch on its device, seeded spec.seed + i (replica 0: the 1-device batch)."""
    return [
        synthetic_batch(case, spec.batch_size, d, spec.input_size, spec.seed + i) for i, d in enumerate(devices.compute)
    ]


def facts(strategy: str, devices: Devices, trainer: VariableMgrTrainer) -> Mapping[str, object]:
    """The mechanism the point ran, as placed and as traced: for the result's facts."""
    return {
        "tf_strategy": f"variable manager {strategy} (one process, custom training loop)",
        "communication": MECHANISM[strategy].format(host=devices.host),
        "compute_devices": ",".join(devices.compute),
        "host_device": devices.host,
        "replicas": len(devices.compute),
        "parameter_copies": len(trainer.copies),
        "variables_on": trainer.placement(),
        "gradient_sums_on": trainer.summed_on(),
    }
