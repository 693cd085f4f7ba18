"""TensorFlow real-data input (docs/data-layout.md): a tf.data pipeline with parallel decoding and prefetch.

Images: ``decode_and_crop_jpeg`` of a random-resized-crop box (``sample_distorted_bounding_box`` with the
layout's area and aspect ranges, 10 tries, as tf_cnn_benchmarks does; when every try fails TF keeps the
whole image, where torchvision takes a ratio-clamped centre crop), bilinear resize, random flip, normalise.
BERT: the samples of bert_samples.npz. Each epoch is reshuffled and drops its last partial batch. The
trainer takes the next batch at each step and counts the time spent waiting for it in measured steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import keras
import tensorflow as tf

from dlbench.backends.base import InputFed
from dlbench.backends.tf.step import TfTrainer
from dlbench.cases import Case, ImageInput
from dlbench.data.augment import bert_arrays, enough_samples
from dlbench.data.layout import (
    CROP_RATIO,
    CROP_SCALE,
    MEAN,
    STD,
    image_root,
    read_train_list,
)
from dlbench.spec import PointSpec

Batch = dict[str, tf.Tensor]


def _finish(ds: tf.data.Dataset, n: int, spec: PointSpec, device: str) -> Iterator[Batch]:
    """Batch (dropping each epoch's partial batch), repeat, prefetch (onto the GPU there) and iterate."""
    enough_samples(n, spec.batch_size, spec.data_dir)
    ds = ds.batch(spec.batch_size, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)
    if device.startswith("/GPU"):
        ds = ds.apply(tf.data.experimental.prefetch_to_device(device))
    return iter(ds)


def _load_image(side: int) -> Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]:
    """A tf.data map function: (path, label) -> augmented, normalised side x side x 3 float32 image, label."""
    mean = tf.constant(MEAN, tf.float32)
    std = tf.constant(STD, tf.float32)
    whole = tf.constant([0.0, 0.0, 1.0, 1.0], tf.float32, shape=[1, 1, 4])

    def load(path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        data = tf.io.read_file(path)
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            tf.io.extract_jpeg_shape(data), bounding_boxes=whole, min_object_covered=CROP_SCALE[0],
            aspect_ratio_range=CROP_RATIO, area_range=CROP_SCALE, max_attempts=10,
            use_image_if_no_bounding_boxes=True)
        top, left, _ = tf.unstack(begin)
        height, width, _ = tf.unstack(size)
        image = tf.image.decode_and_crop_jpeg(data, tf.stack([top, left, height, width]), channels=3)
        image = tf.image.random_flip_left_right(tf.image.resize(image, [side, side], method="bilinear"))
        return (image / 255.0 - mean) / std, label

    return load


def image_batches(spec: PointSpec, case: Case, device: str, seed: int) -> Iterator[Batch]:
    """Endless normalised NHWC image batches, epoch after epoch."""
    assert isinstance(case.input, ImageInput)
    items = read_train_list(image_root(spec.data_dir or ""))
    paths = tf.constant([str(i.path) for i in items])
    labels = tf.constant([i.label for i in items], tf.int32)
    ds = tf.data.Dataset.from_tensor_slices((paths, labels)).shuffle(len(items), seed=seed,
                                                                     reshuffle_each_iteration=True)
    ds = ds.map(_load_image(spec.input_size or case.input.size),
                num_parallel_calls=spec.loader_workers or None, deterministic=False)
    ds = ds.map(lambda x, y: {"images": x, "labels": y})
    return _finish(ds, len(items), spec, device)


def text_batches(spec: PointSpec, device: str, seed: int) -> Iterator[Batch]:
    """Endless BERT batches (MLM + NSP) as int32, cut to the first input_size columns, epoch after epoch."""
    arrays = bert_arrays(spec.data_dir or "", spec.input_size, "int32")
    n = len(arrays["nsp_labels"])
    ds = tf.data.Dataset.from_tensor_slices(arrays).shuffle(n, seed=seed, reshuffle_each_iteration=True)
    return _finish(ds, n, spec, device)


class LoaderTrainer(InputFed, TfTrainer):
    """A TfTrainer whose batch comes from a tf.data iterator at every step (wait counted by InputFed)."""

    def __init__(self, source: Iterator[Batch], warmup: int, steps: int, case: Case, model: keras.Model,
                 device: str, jit_compile: bool, loss_scale: bool, global_batch: int) -> None:
        first = self.feed(source, warmup, steps)
        super().__init__(case, model, first, device, jit_compile, loss_scale, global_batch)

    def step(self) -> None:
        self.batch = self.next_input()
        super().step()


def build_trainer(spec: PointSpec, case: Case, model: keras.Model, device: str, loss_scale: bool) -> LoaderTrainer:
    """A trainer fed by the case's real-data tf.data pipeline."""
    if isinstance(case.input, ImageInput):
        source = image_batches(spec, case, device, spec.seed)
    else:
        source = text_batches(spec, device, spec.seed)
    p = spec.protocol
    return LoaderTrainer(source, p.warmup, p.steps, case, model, device, spec.compile, loss_scale,
                         spec.global_batch)
