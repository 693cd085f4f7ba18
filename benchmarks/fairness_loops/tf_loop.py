"""A bare TensorFlow loop: keras.applications.ResNet50 (random weights), compiled with SGD momentum 0.9 and
trained by Keras's own train function (the one Model.fit runs: Model.train_step under tf.function, XLA with
--compile), fed one synthetic batch that stays on the device, as dlbench's is (fit's tf.data path would copy
it from the host every step); no dlbench import."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import keras
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).parent))
from common import measure, parse_args


def feed(images: tf.Tensor, labels: tf.Tensor) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
    """The same device-resident batch every step: a Python iterator, on which Keras's train function runs one
    step per call (a tf.data iterator would make fit's host-to-device copy each step)."""
    return itertools.repeat((images, labels))


def main() -> None:
    """Warm up and time Keras's train function over the measured steps, on the device-resident batch."""
    args = parse_args(__doc__)
    tf.config.experimental.enable_tensor_float_32_execution(args.precision == "tf32")
    if args.precision in ("amp", "bf16"):
        keras.mixed_precision.set_global_policy("mixed_float16" if args.precision == "amp" else "mixed_bfloat16")
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    device = "/GPU:0" if args.device == "cuda" and gpus else "/CPU:0"
    with tf.device(device):
        model = keras.applications.ResNet50(weights=None, input_shape=(args.input_size, args.input_size, 3))
        images = tf.random.normal((args.batch_size, args.input_size, args.input_size, 3))
        labels = tf.random.uniform((args.batch_size,), maxval=1000, dtype=tf.int32)
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=False),
        jit_compile=args.compile,
    )
    model.make_train_function()
    batches = feed(images, labels)

    def step() -> None:
        with tf.device(device):
            model.train_function(batches)

    measure(
        step,
        tf.test.experimental.sync_devices,
        args,
        "keras.applications.ResNet50 + Keras's train function" + (" (XLA)" if args.compile else ""),
    )


if __name__ == "__main__":
    main()
