"""A bare TensorFlow loop: keras.applications.ResNet50 (random weights) trained with Keras `fit` on one synthetic
batch repeated, SGD with momentum 0.9; no dlbench import. Timing brackets `fit` over the measured steps."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import tensorflow as tf

sys.path.insert(0, str(Path(__file__).parent))
from common import parse_args  # noqa: E402


def main() -> None:
    """Warm up with one fit, then time a second fit over the measured steps (Keras syncs at its end)."""
    args = parse_args(__doc__)
    tf.config.experimental.enable_tensor_float_32_execution(args.precision == "tf32")
    if args.precision in ("amp", "bf16"):
        tf.keras.mixed_precision.set_global_policy("mixed_float16" if args.precision == "amp" else "mixed_bfloat16")
    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)
    model = tf.keras.applications.ResNet50(weights=None, input_shape=(args.input_size, args.input_size, 3))
    opt = tf.keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
    model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=False),
                  jit_compile=False)
    images = tf.random.normal((args.batch_size, args.input_size, args.input_size, 3))
    labels = tf.random.uniform((args.batch_size,), maxval=1000, dtype=tf.int32)
    data = tf.data.Dataset.from_tensors((images, labels)).repeat()
    model.fit(data, epochs=1, steps_per_epoch=max(1, args.warmup), verbose=0)
    start = time.perf_counter()
    model.fit(data, epochs=1, steps_per_epoch=args.steps, verbose=0)
    elapsed = time.perf_counter() - start
    print(json.dumps({"samples_per_s": args.batch_size * args.steps / elapsed,
                      "canonical": "keras.applications.ResNet50 + Model.fit"}))


if __name__ == "__main__":
    main()
