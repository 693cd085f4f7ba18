"""`dlbench data`: real JPEGs in the ImageNet layout, and BERT MLM + NSP samples, as docs/data-layout.md says."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlbench.data.imagenet import ensure_imagenet, make_imagenet
from dlbench.data.layout import DataLayoutError, image_root, read_manifest, read_train_list, text_root
from dlbench.data.text import CLS, MASK, PAD, SEP, make_samples, make_text, split_sentences

CliResult = tuple[int, str, str]

CORPUS = "\n\n".join(
    f"The {animal} number {i} runs across the field. It stops near the river and drinks some water. "
    f"Then the {animal} sleeps under a tall tree until the morning comes. Birds sing above the {animal}."
    for i in range(40)
    for animal in ("horse", "zebra", "camel", "otter")
)


def test_imagenet_layout_with_real_jpegs(tmp_path: Path) -> None:
    out = tmp_path / "img"
    manifest = make_imagenet(out, images=12, classes=3, min_side=40, max_side=60)
    assert manifest["kind"] == "imagenet" and manifest["layout_version"] == 1
    wnids = (out / "labels.txt").read_text().split()
    assert len(wnids) == 3 and all(w.startswith("n") and len(w) == 9 for w in wnids)
    lines = (out / "train_list.txt").read_text().splitlines()
    assert len(lines) == 12
    for line in lines:
        rel, label = line.split(" ")
        assert rel.startswith(f"train/{wnids[int(label)]}/") and rel.endswith(".JPEG")
        with Image.open(out / rel) as img:
            assert img.format == "JPEG" and img.mode == "RGB" and 40 <= min(img.size) <= max(img.size) <= 60
    items = read_train_list(out)
    assert sorted(i.label for i in items) == [0] * 4 + [1] * 4 + [2] * 4
    assert image_root(out) == out


def test_imagenet_is_deterministic_per_seed(tmp_path: Path) -> None:
    a = make_imagenet(tmp_path / "a", images=4, classes=2, min_side=32, max_side=40, seed=3)
    b = make_imagenet(tmp_path / "b", images=4, classes=2, min_side=32, max_side=40, seed=3)
    assert a["bytes"] == b["bytes"]
    assert (tmp_path / "a" / "train_list.txt").read_text() == (tmp_path / "b" / "train_list.txt").read_text()


def test_existing_folder_is_not_overwritten_without_force(tmp_path: Path) -> None:
    out = tmp_path / "img"
    make_imagenet(out, images=2, classes=1, min_side=32, max_side=32)
    with pytest.raises(DataLayoutError, match="pass --force"):
        make_imagenet(out, images=2, classes=1, min_side=32, max_side=32)
    make_imagenet(out, images=3, classes=1, min_side=32, max_side=32, force=True)
    assert read_manifest(out)["images"] == 3
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".img-")]  # no staging left behind


def test_ensure_reuses_a_matching_folder(tmp_path: Path) -> None:
    out = tmp_path / "imagenet"
    make_imagenet(out, images=4, classes=2, min_side=32, max_side=32)
    stamp = (out / "dlbench-data.json").stat().st_mtime_ns
    ensure_imagenet(out, images=4, classes=2)
    assert (out / "dlbench-data.json").stat().st_mtime_ns == stamp
    assert image_root(tmp_path) == out  # a parent holding imagenet/ resolves to it


def test_missing_or_incomplete_data_is_one_line_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(DataLayoutError, match="dlbench data imagenet --out"):
        image_root(tmp_path)
    with pytest.raises(DataLayoutError, match="dlbench data text --out"):
        text_root(tmp_path)
    (tmp_path / "train_list.txt").write_text("x 0\n")
    (tmp_path / "dlbench-data.json").write_text(json.dumps({"layout_version": 99}))
    with pytest.raises(DataLayoutError, match="layout version 99"):
        image_root(tmp_path)


def test_split_sentences() -> None:
    assert split_sentences("One two three. Four five six!  Seven\neight nine? ok") == [
        "One two three.",
        "Four five six!",
        "Seven eight nine? ok",
    ]


def test_text_samples_are_bert_pretraining_samples(tmp_path: Path) -> None:
    src = tmp_path / "corpus.txt"
    src.write_text(CORPUS)
    out = tmp_path / "text"
    manifest = make_text(out, samples=64, files=[src], vocab_size=400)
    assert manifest["sources"] == [str(src)] and manifest["seq_len"] == 128
    vocab = (out / "vocab.txt").read_text().splitlines()
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(vocab) == manifest["vocab_size"] <= 400
    with np.load(out / "bert_samples.npz") as npz:
        a = {k: npz[k] for k in npz.files}
    assert a["input_ids"].shape == a["mlm_labels"].shape == (64, 128) and a["nsp_labels"].shape == (64,)
    assert a["input_ids"].max() < len(vocab) and a["input_ids"][:, 0].tolist() == [CLS] * 64
    real = a["attention_mask"].astype(bool)
    assert (a["input_ids"][~real] == PAD).all()
    masked = a["mlm_labels"] != -100
    assert not (masked & ~real).any()
    eligible = real.sum() - 3 * 64  # [CLS] and two [SEP] per sample are never masked
    assert 0.12 < masked.sum() / eligible < 0.18
    assert (a["input_ids"][masked] == MASK).mean() > 0.6  # 80% [MASK], the rest random or kept
    assert set(a["nsp_labels"].tolist()) == {0, 1}
    for row in range(64):
        n = real[row].sum()
        seps = np.flatnonzero(a["input_ids"][row, :n] == SEP)
        assert seps[-1] == n - 1
        types = a["token_type_ids"][row]
        assert (types[seps[0] + 1 : n] == 1).all() and (types[: seps[0] + 1] == 0).all()


def test_samples_need_two_sentence_documents() -> None:
    with pytest.raises(DataLayoutError, match="at least two sentences"):
        make_samples([[[7, 8, 9]]], 4, 100, seed=0)


def test_data_cli(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    code, out, err = cli(
        "data",
        "imagenet",
        "--images",
        "4",
        "--classes",
        "2",
        "--min-side",
        "32",
        "--max-side",
        "40",
        "--out",
        str(tmp_path / "img"),
    )
    assert code == 0, err
    assert "4 JPEGs in 2 classes" in out
    code, _, err = cli("data", "imagenet", "--images", "4", "--classes", "2", "--out", str(tmp_path / "img"))
    assert code == 2 and "pass --force" in err and len(err.strip().splitlines()) == 1
    src = tmp_path / "c.txt"
    src.write_text(CORPUS)
    code, out, err = cli(
        "data", "text", str(src), "--samples", "8", "--vocab-size", "300", "--out", str(tmp_path / "t")
    )
    assert code == 0, err
    assert "8 samples" in out
    code, _, err = cli("data", "imagenet", "--images", "2", "--classes", "3", "--out", str(tmp_path / "x"))
    assert code == 2 and "at least as many images" in err
