"""TensorFlow input: synthetic batches made once on the device (as tf_cnn_benchmarks does), and real data
(docs/data-layout.md) through a tf.data pipeline with parallel decoding and prefetch. Never timed here: the
protocol times ``next_batch()``. Images are NHWC, integers int32.

Real images: ``decode_and_crop_jpeg`` of a random-resized-crop box (``sample_distorted_bounding_box`` with the
layout's area and aspect ranges, 10 tries, as tf_cnn_benchmarks does; when every try fails TF keeps the
whole image, where torchvision takes a ratio-clamped centre crop), bilinear resize, random flip, normalise.
Real BERT: the samples of bert_samples.npz, masked-LM labels gathered as in the synthetic batch. Each epoch is
reshuffled and drops its last partial batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import tensorflow as tf

from dlbench.backends.base import Unsupported, fixed
from dlbench.cases import Case, CtrInput, ImageInput, TextInput
from dlbench.cases.gpt import sequence_length
from dlbench.data.augment import bert_arrays, enough_samples
from dlbench.data.layout import CROP_RATIO, CROP_SCALE, MEAN, STD, image_root, read_train_list
from dlbench.data.learnable import learnable_batches
from dlbench.data.synthetic import max_predictions, synthetic_bert, synthetic_ctr, synthetic_gpt, synthetic_images
from dlbench.spec import PointSpec, SpecError

Batch = dict[str, tf.Tensor]


def _on_device(arrays: dict[str, np.ndarray], device: str) -> Batch:
    """Numpy arrays as tensors on `device`, integers as int32 (TF's index type on every device)."""
    with tf.device(device):
        return {
            k: tf.identity(tf.convert_to_tensor(v.astype(np.int32) if v.dtype.kind in "iu" else v))
            for k, v in arrays.items()
        }


def synthetic_batch(case: Case, batch: int, device: str, input_size: int | None = None, seed: int = 0) -> Batch:
    """One fixed batch for the case (dlbench.data.synthetic) on `device` ("/CPU:0", "/GPU:0"); input_size
    shrinks the image side or the sequence length for quick tests."""
    if isinstance(case.input, ImageInput):
        return _on_device(synthetic_images(case.input, batch, input_size, seed, channels_last=True), device)
    if isinstance(case.input, CtrInput):
        return _on_device(synthetic_ctr(case.input, batch, case.param("vocab"), seed), device)
    assert isinstance(case.input, TextInput)
    if case.task == "causal_lm":  # a sequence longer than the decoder's context is the point's refusal
        try:
            seq = sequence_length(case, input_size)
        except SpecError as exc:
            raise Unsupported(str(exc)) from None
        return _on_device(synthetic_gpt(case.input, batch, seq, seed), device)
    return _on_device(synthetic_bert(case.input, batch, input_size, seed), device)


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
            tf.io.extract_jpeg_shape(data),
            bounding_boxes=whole,
            min_object_covered=CROP_SCALE[0],
            aspect_ratio_range=CROP_RATIO,
            area_range=CROP_SCALE,
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
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
    ds = tf.data.Dataset.from_tensor_slices((paths, labels)).shuffle(
        len(items), seed=seed, reshuffle_each_iteration=True
    )
    ds = ds.map(
        _load_image(spec.input_size or case.input.size),
        num_parallel_calls=spec.loader_workers or None,
        deterministic=False,
    )
    ds = ds.map(lambda x, y: {"images": x, "labels": y})
    return _finish(ds, len(items), spec, device)


def text_batches(spec: PointSpec, case: Case, device: str, seed: int) -> Iterator[Batch]:
    """Endless BERT batches (MLM gathered + NSP) as int32, cut to the first input_size columns, epoch after
    epoch."""
    assert isinstance(case.input, TextInput)
    arrays = bert_arrays(spec.data_dir or "", spec.input_size, max_predictions(case.input, spec.input_size), "int32")
    n = len(arrays["nsp_labels"])
    ds = tf.data.Dataset.from_tensor_slices(arrays).shuffle(n, seed=seed, reshuffle_each_iteration=True)
    return _finish(ds, n, spec, device)


def batches(spec: PointSpec, case: Case, device: str, seed: int) -> Iterator[Batch]:
    """The point's input: --converge's learnable stream (a new batch each step, this rank's `seed` its order, as
    torch's), the real-data pipeline's batches, or the fixed synthetic batch."""
    if spec.converge:
        images = isinstance(case.input, ImageInput)  # NHWC, as TF's image models take them
        stream = learnable_batches(case, spec.batch_size, spec.input_size, seed, channels_last=images)
        return (_on_device(arrays, device) for arrays in stream)
    if spec.data == "real" and (isinstance(case.input, CtrInput) or case.task == "causal_lm"):
        raise Unsupported(f"real data for {case.name} is not read yet (no Criteo layout): use synthetic data")
    if spec.data == "real":
        pipeline = image_batches if isinstance(case.input, ImageInput) else text_batches
        return pipeline(spec, case, device, seed)
    return fixed(synthetic_batch(case, spec.batch_size, device, spec.input_size, seed))


def describe(spec: PointSpec) -> str:
    """How the input is fed, for the point's facts ("loader")."""
    if spec.converge:
        return "learnable: a new batch drawn on the host every step (--converge)"
    real = f"tf.data, {spec.loader_workers or 1} parallel decode calls, prefetch"
    return real if spec.data == "real" else "synthetic: one batch made on the device"
