"""`dlbench data imagenet`: an ImageNet-layout folder of real JPEGs, made with Pillow, deterministic per seed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from dlbench.data.folders import check_out, matching, staging, write_manifest
from dlbench.data.layout import LABELS, TRAIN_LIST, DataLayoutError

Tick = Callable[[int], None]


def _wnids(classes: int, rng: np.random.Generator) -> list[str]:
    """Made-up ImageNet-style synset ids (n + 8 digits), unique and sorted."""
    ids: set[str] = set()
    while len(ids) < classes:
        ids.add(f"n{int(rng.integers(1_000_000, 99_999_999)):08d}")
    return sorted(ids)


def draw_image(rng: np.random.Generator, label: int, min_side: int, max_side: int) -> Image.Image:
    """One RGB picture: a colour gradient, a few shapes whose hue depends on the label, a little noise."""
    w, h = (int(v) for v in rng.integers(min_side, max_side + 1, size=2))
    top, bottom = rng.integers(0, 256, size=(2, 3))
    ramp = np.linspace(0.0, 1.0, h)[:, None, None]
    pixels = (top[None, None, :] * (1 - ramp) + bottom[None, None, :] * ramp) * np.ones((1, w, 1))
    img = Image.fromarray(pixels.astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    base = np.array([(label * 97) % 256, (label * 57) % 256, (label * 151) % 256])
    for _ in range(int(rng.integers(3, 9))):
        x0, x1 = sorted(int(v) for v in rng.integers(0, w, size=2))
        y0, y1 = sorted(int(v) for v in rng.integers(0, h, size=2))
        colour = tuple(int(c) for c in (base + rng.integers(-40, 41, size=3)) % 256)
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1 + 1, y1 + 1), fill=colour)
    img = img.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.5, 2.0))))
    noise = rng.normal(0.0, 8.0, size=(h, w, 3))
    return Image.fromarray(np.clip(np.asarray(img, dtype=np.float64) + noise, 0, 255).astype(np.uint8), "RGB")


def check_args(out: Path, images: int, classes: int, min_side: int, max_side: int, force: bool) -> None:
    """Refuse settings that cannot make a folder, before anything is written."""
    check_out(Path(out), force)
    if images < 1 or classes < 1:
        raise DataLayoutError(f"need at least one image and one class; got {images} images, {classes} classes")
    if classes > images:
        raise DataLayoutError(f"{classes} classes need at least as many images; got {images}")
    if not 16 <= min_side <= max_side:
        raise DataLayoutError(f"image sides must satisfy 16 <= min side <= max side; got {min_side}..{max_side}")


def make_imagenet(
    out: Path,
    images: int,
    classes: int,
    seed: int = 0,
    min_side: int = 200,
    max_side: int = 500,
    quality: int = 90,
    force: bool = False,
    tick: Tick | None = None,
) -> dict[str, object]:
    """Write train/<wnid>/*.JPEG, labels.txt, train_list.txt and the manifest into out; returns the manifest."""
    check_args(out, images, classes, min_side, max_side, force)
    rng = np.random.default_rng(seed)
    wnids = _wnids(classes, rng)
    total = 0
    with staging(out, force) as tmp:
        (tmp / LABELS).write_text("".join(f"{w}\n" for w in wnids))
        lines = []
        for k in range(images):
            label = k % classes
            rel = Path("train") / wnids[label] / f"{wnids[label]}_{k // classes}.JPEG"
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            draw_image(rng, label, min_side, max_side).save(tmp / rel, "JPEG", quality=quality)
            total += (tmp / rel).stat().st_size
            lines.append(f"{rel.as_posix()} {label}\n")
            if tick:
                tick(1)
        order = rng.permutation(len(lines))
        (tmp / TRAIN_LIST).write_text("".join(lines[i] for i in order))
        manifest = write_manifest(
            tmp,
            {
                "kind": "imagenet",
                "images": images,
                "classes": classes,
                "seed": seed,
                "min_side": min_side,
                "max_side": max_side,
                "quality": quality,
                "bytes": total,
            },
        )
    return manifest


def ensure_imagenet(out: Path, images: int, classes: int, seed: int = 0) -> Path:
    """out, made only if it is not already a complete folder with these settings (sweeps use this)."""
    if not matching(out, {"kind": "imagenet", "images": images, "classes": classes, "seed": seed}):
        make_imagenet(out, images, classes, seed=seed, force=True)
    return out
