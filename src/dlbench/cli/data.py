"""`dlbench data imagenet|text`: make the real data that real-data points read (docs/data-layout.md)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

from dlbench.cli.numbers import AsciiIntRange


@click.group("data")
def data() -> None:
    """Make real data locally (nothing is downloaded): ImageNet-layout JPEGs, BERT samples."""


@data.command("imagenet")
@click.option("--images", type=AsciiIntRange(min=1), default=1024, show_default=True, help="Number of JPEGs.")
@click.option("--classes", type=AsciiIntRange(min=1), default=10, show_default=True, help="Number of classes.")
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Folder to write.")
@click.option("--seed", type=AsciiIntRange(), default=0, show_default=True)
@click.option("--min-side", type=AsciiIntRange(min=16), default=200, show_default=True, help="Smallest image side.")
@click.option("--max-side", type=AsciiIntRange(min=16), default=500, show_default=True, help="Largest image side.")
@click.option("--force", is_flag=True, help="Replace the folder if it exists.")
def imagenet(images: int, classes: int, out: str, seed: int, min_side: int, max_side: int, force: bool) -> None:
    """train/<wnid>/*.JPEG, labels.txt and train_list.txt ('train/<wnid>/x.JPEG <label>', as Paddle's report)."""
    from dlbench.data.imagenet import check_args, make_imagenet

    check_args(Path(out), images, classes, min_side, max_side, force)
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    ) as ui:
        task = ui.add_task("JPEGs", total=images)
        manifest = make_imagenet(
            Path(out),
            images,
            classes,
            seed=seed,
            min_side=min_side,
            max_side=max_side,
            force=force,
            tick=lambda n: ui.advance(task, n),
        )
    click.echo(
        f"{out}: {manifest['images']} JPEGs in {manifest['classes']} classes, {int(manifest['bytes']) / 2**20:.1f} MiB"  # type: ignore[call-overload]
    )


@data.command("text")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Folder to write.")
@click.option(
    "--samples", type=AsciiIntRange(min=1), default=1024, show_default=True, help="MLM + NSP samples (sequence 128)."
)
@click.option(
    "--vocab-size",
    type=AsciiIntRange(min=16),
    default=30522,
    show_default=True,
    help="Largest WordPiece vocabulary (smaller corpora give fewer tokens).",
)
@click.option(
    "--max-sentences",
    type=AsciiIntRange(min=10),
    default=10_000,
    show_default=True,
    help="With no FILES: sentences taken from the standard library's docstrings.",
)
@click.option("--seed", type=AsciiIntRange(), default=0, show_default=True)
@click.option("--force", is_flag=True, help="Replace the folder if it exists.")
def text(
    files: tuple[str, ...], out: str, samples: int, vocab_size: int, max_sentences: int, seed: int, force: bool
) -> None:
    """A corpus from FILES (default: Python's own docstrings), a WordPiece vocabulary, BERT samples (.npz)."""
    from dlbench.data.text import make_text

    manifest = make_text(
        Path(out),
        samples,
        [Path(f) for f in files],
        vocab_size=vocab_size,
        seed=seed,
        max_sentences=max_sentences,
        force=force,
    )
    sources = manifest["sources"]
    named = ", ".join(map(str, sources)) if isinstance(sources, list) else str(sources)
    click.echo(
        f"{out}: {manifest['samples']} samples, vocabulary {manifest['vocab_size']}, corpus of "
        f"{manifest['sentences']} sentences from {named}"
    )
