"""The framework-free parts of every real-data pipeline: the crop box, PIL decoding, BERT arrays, and the
input-wait accounting of trainers fed from an iterator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dlbench.data.augment import bert_arrays, crop_box, decode_crop_flip, enough_samples, numpy_rng
from dlbench.data.imagenet import make_imagenet
from dlbench.data.layout import CROP_RATIO, DataLayoutError, read_train_list
from dlbench.data.synthetic import BERT_KEYS, synthetic_bert
from dlbench.data.text import make_text


def test_crop_box_follows_random_resized_crop() -> None:
    uniform, randint = numpy_rng(np.random.default_rng(0))
    for _ in range(300):
        left, top, right, bottom = crop_box(200, 120, uniform, randint)
        w, h = right - left, bottom - top
        assert 0 <= left < right <= 200 and 0 <= top < bottom <= 120
        assert 0.08 * 200 * 120 * 0.8 <= w * h  # area fraction >= 0.08 (up to rounding)
        assert CROP_RATIO[0] * 0.9 <= w / h <= CROP_RATIO[1] * 1.1
    # no try fits a 1000 x 10 image: centre crop, width round(10 * 4/3)
    assert crop_box(1000, 10, uniform, randint) == (493, 0, 506, 10)


def test_decode_crop_flip_gives_the_side_and_flips(tmp_path: Path) -> None:
    make_imagenet(tmp_path / "img", images=2, classes=1, min_side=40, max_side=60)
    path = read_train_list(tmp_path / "img")[0].path
    whole = (lambda lo, hi: hi if lo == 0.08 else 0.0), (lambda lo, hi: lo)  # full area, aspect 1, no flip
    a = decode_crop_flip(path, 32, whole[0], whole[1], flip_prob=0.0)
    b = decode_crop_flip(path, 32, whole[0], whole[1], flip_prob=1.0)
    assert a.shape == (32, 32, 3) and a.dtype == np.uint8
    assert np.array_equal(a[:, ::-1], b)


def test_bert_arrays_are_cut_and_typed(tmp_path: Path) -> None:
    make_text(tmp_path / "text", samples=16, vocab_size=200)
    arrays = bert_arrays(tmp_path / "text", 32, 5, "int32")
    assert set(arrays) == set(BERT_KEYS)
    assert arrays["input_ids"].shape == (16, 32) and arrays["input_ids"].dtype == np.int32
    assert arrays["nsp_labels"].shape == (16,)
    assert arrays["mlm_positions"].shape == arrays["mlm_ids"].shape == arrays["mlm_weights"].shape == (16, 5)
    # every weighted prediction points inside the cut sequence, at a token the samples masked
    weighted = arrays["mlm_weights"] > 0
    assert weighted.any() and (arrays["mlm_positions"][weighted] < 32).all()
    with pytest.raises(DataLayoutError, match="fewer than the batch size 17"):
        enough_samples(16, 17, str(tmp_path))


def test_synthetic_bert_gathers_round_15_percent_of_positions_at_most_max_predictions() -> None:
    from dlbench.cases import get_case

    text = get_case("bert_base").input
    full = synthetic_bert(text, 4, None, seed=1)
    assert full["mlm_positions"].shape == (4, 20)  # Google's max_predictions_per_seq at 128 tokens
    assert (full["mlm_weights"].sum(axis=1) == 19).all()  # round(0.15 x 128)
    assert (full["mlm_positions"][full["mlm_weights"] > 0] > 0).all()  # never [CLS]
    rows = np.arange(4)[:, None]
    real = full["mlm_weights"] > 0
    assert (full["input_ids"][rows, full["mlm_positions"]][real] == full["mlm_ids"][real]).all()
    short = synthetic_bert(text, 2, 32, seed=1)
    assert short["mlm_positions"].shape == (2, 5) and (short["mlm_weights"].sum(axis=1) == 5).all()
