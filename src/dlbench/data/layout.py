"""The real-data folder layout every backend reads (docs/data-layout.md). Framework-free: numpy at most."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dlbench.cases import Case, TextInput
from dlbench.spec import PointSpec, SpecError

LAYOUT_VERSION = 1
MANIFEST = "dlbench-data.json"
TRAIN_LIST = "train_list.txt"
LABELS = "labels.txt"
SAMPLES = "bert_samples.npz"
IMAGE_SUBDIR = "imagenet"
TEXT_SUBDIR = "text"

# The normalisation every image pipeline applies after scaling pixels to [0, 1].
MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
STD: tuple[float, float, float] = (0.229, 0.224, 0.225)
# Random-resized-crop parameters (area fraction, aspect ratio), as torchvision and the seeds use them.
CROP_SCALE: tuple[float, float] = (0.08, 1.0)
CROP_RATIO: tuple[float, float] = (3 / 4, 4 / 3)
FLIP_PROB = 0.5
SEQ_LEN = 128
MASK_PROB = 0.15
SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
SAMPLE_ARRAYS: tuple[str, ...] = ("input_ids", "token_type_ids", "attention_mask", "mlm_labels", "nsp_labels")


class DataLayoutError(SpecError):
    """A data folder is missing or is not in the layout; the message is one line with the fix."""


@dataclass(frozen=True)
class TrainItem:
    """One line of train_list.txt: an image path (absolute) and its label."""

    path: Path
    label: int


def read_manifest(folder: Path) -> dict[str, object]:
    """The manifest of a complete data folder; DataLayoutError when absent or of an unknown version."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise DataLayoutError(f"{folder} is not a complete dlbench data folder (no {MANIFEST})")
    manifest: dict[str, object] = json.loads(path.read_text())
    if manifest.get("layout_version") != LAYOUT_VERSION:
        raise DataLayoutError(
            f"{path} has layout version {manifest.get('layout_version')!r}; this dlbench "
            f"reads {LAYOUT_VERSION}: make the data again with `dlbench data`"
        )
    return manifest


def image_root(data_dir: str | Path) -> Path:
    """The image folder for a point's data_dir: the folder itself, or its imagenet/ sub-folder."""
    root = Path(data_dir)
    for folder in (root, root / IMAGE_SUBDIR):
        if (folder / TRAIN_LIST).is_file() and (folder / MANIFEST).is_file():
            read_manifest(folder)
            return folder
    raise DataLayoutError(f"no image data in {root}: make it with `dlbench data imagenet --out {root}`")


def text_root(data_dir: str | Path) -> Path:
    """The text folder for a point's data_dir: the folder itself, or its text/ sub-folder."""
    root = Path(data_dir)
    for folder in (root, root / TEXT_SUBDIR):
        if (folder / SAMPLES).is_file() and (folder / MANIFEST).is_file():
            read_manifest(folder)
            return folder
    raise DataLayoutError(f"no BERT samples in {root}: make them with `dlbench data text --out {root}`")


def check_data_dir(spec: PointSpec, case: Case) -> None:
    """Before any worker starts: a real-data point's folder holds the data its case reads (DataLayoutError)."""
    if spec.data != "real" or spec.data_dir is None:
        return
    if not Path(spec.data_dir).is_dir():
        raise DataLayoutError(f"data folder {spec.data_dir} does not exist: make it with `dlbench data`")
    if isinstance(case.input, TextInput):
        text_root(spec.data_dir)
    else:
        image_root(spec.data_dir)


def read_train_list(folder: str | Path) -> list[TrainItem]:
    """Every (image path, label) of an image folder, in file order."""
    root = image_root(folder)
    items = []
    for n, line in enumerate((root / TRAIN_LIST).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        rel, _, label = line.rpartition(" ")
        if not rel or not label.isdigit():
            raise DataLayoutError(f"{root / TRAIN_LIST}:{n}: expected '<path> <label>'; got {line!r}")
        items.append(TrainItem(root / rel, int(label)))
    if not items:
        raise DataLayoutError(f"{root / TRAIN_LIST} lists no image")
    return items
