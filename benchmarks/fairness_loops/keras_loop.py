"""A bare Keras 3 loop on the backend KERAS_BACKEND names (keras_jax_loop.py, keras_tf_loop.py and
keras_torch_loop.py set it): keras.applications.ResNet50 (random weights) compiled with SGD momentum 0.9 and
trained by Keras's own ``train_on_batch`` (jit_compile as dlbench's keras framework sets it: Keras' "auto", True with
--compile), on one synthetic numpy batch; no dlbench import."""

from __future__ import annotations

import sys
from pathlib import Path

import keras
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import measure, parse_args


def main() -> None:
    """Warm up and time train_on_batch over the measured steps (it returns the loss on the host: synchronised)."""
    args = parse_args(__doc__)
    rng = np.random.default_rng(0)
    images = rng.standard_normal((args.batch_size, args.input_size, args.input_size, 3)).astype("float32")
    labels = rng.integers(0, 1000, (args.batch_size,)).astype("int32")
    model = keras.applications.ResNet50(weights=None, input_shape=(args.input_size, args.input_size, 3))
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=False),
        jit_compile=True if args.compile else "auto",
    )
    measure(
        lambda: model.train_on_batch(images, labels),
        lambda: None,
        args,
        f"keras.applications.ResNet50 + train_on_batch on {keras.backend.backend()} (jit_compile {model.jit_compile})",
    )


if __name__ == "__main__":
    main()
