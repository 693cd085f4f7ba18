"""What every framework's real-data tests share: a tiny data folder (JPEGs and BERT samples), real points
through the CLI with the checks every backend must pass, and the too-few-samples error."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

from dlbench.data.imagenet import make_imagenet
from dlbench.data.text import make_text
from dlbench.store.store import Store

CliResult = tuple[int, str, str]
CORPUS = "\n\n".join(
    f"Sentence one about item {i} is here. Sentence two follows item {i} closely. A third one "
    f"ends the story of item {i}."
    for i in range(200)
)
# (model, input size, extra options): an image model and BERT, each at a tiny size
IMAGE_AND_BERT: tuple[tuple[str, str, tuple[str, ...]], ...] = (("resnet50", "32", ()), ("bert_base", "16", ()))


def make_real_data(folder: Path) -> Path:
    """folder/imagenet (12 JPEGs, 3 classes) and folder/text (8 MLM + NSP samples); returns folder."""
    make_imagenet(folder / "imagenet", images=12, classes=3, min_side=48, max_side=96)
    corpus = folder / "c.txt"
    corpus.write_text(CORPUS)
    make_text(folder / "text", samples=8, files=[corpus], vocab_size=300)
    return folder


def check_real_points(
    cli: Callable[..., CliResult],
    point: Sequence[str],
    folder: Path,
    loader: str,
    runs: Sequence[tuple[str, str, tuple[str, ...]]] = IMAGE_AND_BERT,
) -> None:
    """Each run on folder's real data: stored ok, marked real, a finite loss, an input-wait share in [0, 1),
    and the loader recorded (its description starts with `loader`)."""
    db = folder / "s.db"
    for model, size, extra in runs:
        code, _, err = cli(
            "run",
            *point,
            "-m",
            model,
            "--input-size",
            size,
            *extra,
            "--data",
            "real",
            "--data-dir",
            str(folder),
            "--store",
            str(db),
        )
        assert code == 0, err
    points = Store(db).points()
    assert len(points) == len(runs)
    for p in points:
        r = p.result
        assert r.status == "ok" and r.spec.data == "real" and r.metrics is not None, r.error
        assert math.isfinite(r.metrics.final_loss or math.nan) and 0 <= r.metrics.input_wait_share < 1
        assert str(r.extra["loader"]).startswith(loader), r.extra.get("loader")


def check_too_few_samples(cli: Callable[..., CliResult], point: Sequence[str], folder: Path) -> None:
    """One image for a batch of 2: a recorded error naming the cause, exit code 1."""
    make_imagenet(folder / "imagenet", images=1, classes=1, min_side=48, max_side=64)
    db = folder / "s.db"
    code, _, _ = cli(
        "run",
        *point,
        "-m",
        "resnet50",
        "--input-size",
        "32",
        "--data",
        "real",
        "--data-dir",
        str(folder),
        "--store",
        str(db),
    )
    [p] = [s.result for s in Store(db).points()]
    assert code == 1 and p.status == "error"
    assert "fewer than the batch size 2" in (p.error or "")
