"""The torch real-data pipeline (PIL decode, random-resized-crop, flip, DataLoader workers), the input-bound
flag on a deliberately slow loader, and a real CPU max-batch search under a memory limit."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed in this environment: pip install -e '.[torch]'")

from dlbench.analysis.maxbatch import probe_bound  # noqa: E402
from dlbench.backends.torch.data import ImageList, batches  # noqa: E402
from dlbench.backends.torch.step import TorchTrainer  # noqa: E402
from dlbench.cases import get_case  # noqa: E402
from dlbench.data.imagenet import make_imagenet  # noqa: E402
from dlbench.data.layout import read_train_list  # noqa: E402
from dlbench.data.text import make_text  # noqa: E402
from dlbench.launch.registry import Launchers  # noqa: E402
from dlbench.numerics import resolve_precision  # noqa: E402
from dlbench.protocol.runner import measure  # noqa: E402
from dlbench.protocol.stats import INPUT_BOUND_SHARE, summarize  # noqa: E402
from dlbench.records import RankRaw  # noqa: E402
from dlbench.runapi.maxbatch import search  # noqa: E402
from dlbench.spec import PointSpec, Protocol  # noqa: E402
from dlbench.store.store import Store  # noqa: E402

pytestmark = pytest.mark.framework("torch")
CliResult = tuple[int, str, str]
CORPUS = "\n\n".join(
    f"Sentence one about item {i} is here. Sentence two follows item {i} closely. A third one "
    f"ends the story of item {i}."
    for i in range(200)
)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "imagenet"
    make_imagenet(out, images=12, classes=3, min_side=48, max_side=96)
    return out


def test_image_items_are_decoded_and_cropped(images: Path) -> None:
    ds = ImageList(read_train_list(images), side=40)
    x, label = ds[0]
    assert x.shape == (3, 40, 40) and x.dtype == torch.uint8 and 0 <= label < 3
    assert x.float().std() > 1  # a picture, not a constant


def real_spec(model: str, data_dir: Path, **kw: object) -> PointSpec:
    base: dict[str, object] = dict(
        framework="torch",
        model=model,
        batch_size=2,
        data="real",
        data_dir=str(data_dir),
        protocol=Protocol(1, 2, 1, "mean"),
        input_size=32,
        threads=1,
        timeout_s=600.0,
    )
    return PointSpec(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.slow
def test_real_data_points_run_in_the_worker(images: Path, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    src = tmp_path / "c.txt"
    src.write_text(CORPUS)
    make_text(tmp_path / "text", samples=8, files=[src], vocab_size=300)
    db = tmp_path / "s.db"
    code, _, err = cli(
        "run",
        "-f",
        "torch",
        "-m",
        "resnet50",
        "-b",
        "2",
        "--input-size",
        "32",
        "--data",
        "real",
        "--data-dir",
        str(images),
        "--warmup",
        "1",
        "--steps",
        "2",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--store",
        str(db),
    )
    assert code == 0, err
    code, _, err = cli(
        "run",
        "-f",
        "torch",
        "-m",
        "bert_base",
        "-b",
        "2",
        "--input-size",
        "16",
        "--data",
        "real",
        "--data-dir",
        str(tmp_path),
        "--warmup",
        "1",
        "--steps",
        "2",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--store",
        str(db),
    )
    assert code == 0, err
    for p in Store(db).points():
        r = p.result
        assert r.status == "ok" and r.spec.data == "real" and r.metrics is not None
        assert math.isfinite(r.metrics.final_loss or math.nan) and 0 <= r.metrics.input_wait_share < 1


def slow(delay: float) -> Iterator[dict[str, torch.Tensor]]:
    """A loader that takes `delay` seconds to produce each (fixed) batch."""
    batch = {"images": torch.randn(2, 3, 16, 16), "labels": torch.tensor([1, 2])}
    while True:
        time.sleep(delay)
        yield batch


def test_slow_loader_is_input_bound() -> None:
    torch.set_num_threads(1)
    case = get_case("alexnet")
    nn = torch.nn  # a step of some milliseconds, so that an instant loader costs a negligible share
    model = nn.Sequential(
        nn.Flatten(), nn.Linear(3 * 16 * 16, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 1000)
    )
    spec = PointSpec(framework="torch", model="alexnet", batch_size=2, protocol=Protocol(1, 4, 2, "mean"))
    for delay, bound in ((0.1, True), (0.0, False)):
        trainer = TorchTrainer(
            case, model, slow(delay), torch.device("cpu"), resolve_precision("fp32", "cpu"), False, global_batch=2
        )
        measured = measure(trainer, spec.protocol)
        metrics = summarize(spec, (RankRaw(rank=0, repeats=measured.repeats, input_wait_s=measured.input_wait_s),))
        assert metrics.input_bound is bound, metrics.input_wait_share
        if bound:
            assert metrics.input_wait_share > INPUT_BOUND_SHARE
            # 2 repeats x 4 measured steps; the 2 warm-up waits are not counted
            assert 8 * delay <= measured.input_wait_s < 9.5 * delay


def test_too_few_samples_for_the_batch_is_a_clear_error(images: Path) -> None:
    spec = real_spec("alexnet", images, batch_size=64, loader_workers=0)
    with pytest.raises(Exception, match="fewer than the batch size 64"):
        next(batches(spec, get_case("alexnet"), torch.device("cpu"), seed=0))


@pytest.mark.slow
def test_cpu_max_batch_search_under_a_memory_limit(tmp_path: Path) -> None:
    """ResNet-50 at 64x64 under an 850 MiB budget: weights and optimizer take ~620 MiB, ~10 MiB per sample."""
    base = PointSpec(
        framework="torch",
        model="resnet50",
        batch_size=1,
        protocol=Protocol(1, 1, 1, "mean"),
        input_size=64,
        threads=1,
        timeout_s=600.0,
    )
    limit = 850 * 2**20
    store = Store(tmp_path / "s.db")
    found = search(store, base, 1, 32, warmup=1, steps=1, memory_limit=limit, launchers=Launchers())
    best = found.max_batch
    runs = [(p.value, p.status, (p.error or "")[:120]) for p in (*found.probes, *found.checks)]
    assert best is not None and 1 < best < 31, (found.note, runs)
    # Exact and reproduced, or said to sit within run-to-run memory noise (seen here: batch 24 ran out of memory,
    # then trained when run again, ~10 MiB per sample at 850 MiB). Either way the max trained on every run of
    # it, twice at least, and the batch above ran out of memory at least once.
    assert found.exact or "within run-to-run noise" in found.note, found.note
    assert len(found.probes) <= probe_bound(1, 32) + len(found.guesses)  # a guess of the estimate's: one probe more
    at_max = [p for p in (*found.probes, *found.checks) if p.value == best]
    assert len(at_max) >= 2 and all(
        p.fits and p.peak_memory_bytes is not None and p.peak_memory_bytes <= limit for p in at_max
    )
    assert any(p.value == best + 1 and p.too_big for p in (*found.probes, *found.checks))
    failed = [p for p in found.probes if not p.fits]
    assert failed and all(p.status == "oom" for p in failed)
