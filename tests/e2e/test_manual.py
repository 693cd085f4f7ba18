"""The manual's commands, run (issue 42 item 6): every `dlbench` command in a code block of docs/*.md is classified
here, and each runs as the page shows it, on a store of two fake-backend runs:

- `run`: executed in-process (the cheap ones as written; a measuring one with the fake backend where only the
  output's shape matters, a data set at a tiny size), and, where the page shows its output, the output's shape
  (its tables' headers and the labels its lines start with, in order) and exit code compared with the page's;
- `accept`: executed up to the moment it would start measuring (every check, refusal and bound on the way), the
  measurement itself stubbed: a page that shows a command dlbench refuses (`--precision amp` on a CPU, four
  ranks on two cores without `--force`) fails here;
- `skip`: what cannot run on a CPU test machine, with the reason (a GPU, Slurm or other hosts, installing
  frameworks from PyPI).

A command added to the manual fails `test_every_command_of_the_manual_is_classified` until it has a line below;
a framework whose environment is absent here skips its commands, saying so."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dlbench.cli import main
from dlbench.envs.interpreters import state
from dlbench.spec import split_release
from tests.support.manual import Shown, headers, in_order, labels, shown_commands

RUN_ID = re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{8}\b")
OPTIONAL_LABELS = {"energy not measured"}  # a machine with RAPL counters prints its energy instead


@dataclass(frozen=True)
class Mode:
    """How a command of the manual runs here."""

    kind: str  # "run", "accept" or "skip"
    why: str = ""  # for skip: why it cannot run here; otherwise what was changed to keep it cheap
    exits: tuple[int, ...] = (0,)
    fake: bool = False  # measure with the fake backend (only the output's shape is compared)
    swap: dict[str, str] = field(default_factory=dict)  # tiny sizes for a data set
    needs: tuple[tuple[str, ...], ...] = ()  # commands to run first (their run ids replace the page's, in order)


RUN, ACCEPT = Mode("run"), Mode("accept")
GPU = Mode("skip", "a GPU command: the CPU test machine refuses it (amp, --device cuda, a GPU suite)")
SLURM = Mode("skip", "needs a Slurm cluster: tests/cluster/test_slurm.py runs it on an emulated one")
HOSTS = Mode("skip", "needs the network namespaces of tests/cluster/test_netns.py (other hosts)")
SETUP = Mode("skip", "installs frameworks from PyPI: tests/unit/launch/test_envs.py covers setup offline")
FAKE_RUN = Mode("run", "with the fake backend: the page's shape, not its figures", fake=True)
TEAM = (("store", "push", "--all", "--to", "team.db"),)
TINY_DATA = ("data", "imagenet", "--images", "16", "--classes", "2", "--min-side", "40", "--max-side", "48")
FAKE_PAIR = (
    ("DLBENCH_FAKE=sleep:0.05", "run", "-f", "fake", "-m", "resnet50", "-b", "2", "--steps", "4", "--repeats", "1"),
    ("DLBENCH_FAKE=sleep:0.025", "run", "-f", "fake", "-m", "resnet50", "-b", "2", "--steps", "4", "--repeats", "1"),
)

MODES: dict[str, Mode] = {
    "cases.md: dlbench run -m wide_deep --param vocab=3.2M,6.4M": ACCEPT,
    "cases.md: dlbench run -m wide_deep --param vocab=1M --param sparse=0": ACCEPT,
    "cases.md: dlbench run -m wide_deep --param vocab=max --memory-limit 20GiB": ACCEPT,
    "cases.md: dlbench sweep wide-deep-cpu -f torch,tf,jax,paddle": ACCEPT,
    "cases.md: dlbench sweep wide-deep": GPU,
    "cases.md: dlbench run $F --param classes=max": ACCEPT,
    "cases.md: dlbench run $F --param classes=max --param model_parallel=1": Mode(
        "accept", "its output is a search of 18 probes (minutes): accepted, not compared"
    ),
    "cases.md: dlbench run $F --param classes=max --param model_parallel=1 --param sample=10": ACCEPT,
    "convergence.md: dlbench run -f torch,tf,paddle -m resnet50 --input-size 32 -b 32 --converge": ACCEPT,
    "convergence.md: dlbench reference convergence": RUN,
    "convergence.md: dlbench reference measure-convergence -m gpt --param hidden=128 --param layers=2 --param heads=4 "
    "--param seq=32 --param vocab=64 -b 32 --threads 1 --out rcp": ACCEPT,
    "frameworks.md: dlbench setup jax tf paddle": SETUP,
    "frameworks.md: dlbench setup jax --python 3.12": SETUP,
    "frameworks.md: dlbench setup keras_jax keras_tf keras_torch": SETUP,
    "frameworks.md: dlbench setup torch --existing /opt/conda/bin/python": SETUP,
    "frameworks.md: dlbench list": RUN,
    "frameworks.md: dlbench run --framework all --model resnet50": ACCEPT,
    "llm.md: dlbench run -f torch -m llama_tiny": ACCEPT,
    "llm.md: dlbench run -f torch -m llama_tiny --scale 1n2c --fsdp": ACCEPT,
    "llm.md: dlbench run -f torch -m llama_tiny --scale 1n4c --tensor-parallel 2 --fsdp --force": ACCEPT,
    "llm.md: dlbench run -f torch -m llama_tiny --scale 1n4c --pipeline-parallel 2 --tensor-parallel 2 "
    "--micro-batches 4 --force": ACCEPT,
    "llm.md: dlbench run -f jax -m llama_tiny --scale 1n2c --fsdp": ACCEPT,
    "llm.md: dlbench run -f jax -m llama_tiny --scale 1n2c --tensor-parallel 2": ACCEPT,
    "llm.md: dlbench run -f paddle -m llama_tiny,moe_tiny --scale 1n2c --strategy sharding": ACCEPT,
    "llm.md: dlbench run -f paddle -m llama_tiny --scale 1n2c": ACCEPT,
    "measuring.md: dlbench run": ACCEPT,
    "measuring.md: dlbench run -m resnet50,wide_deep --input-size 64 --repeats 1": FAKE_RUN,
    "measuring.md: dlbench run --framework torch --model resnet50,vgg16 --batch-size 32 --precision amp --compile "
    "--preset dlperf --device cuda": GPU,
    "measuring.md: dlbench run --model bert_base --steps 20 --repeats 5 --timeout 600": ACCEPT,
    "measuring.md: dlbench list": RUN,
    "measuring.md: dlbench env": RUN,
    "measuring.md: dlbench env --device cuda": Mode("run", "exits 2 naming the cause on a CPU machine", exits=(0, 2)),
    "measuring.md: dlbench results": RUN,
    "measuring.md: dlbench results RUN_ID --format json": RUN,
    "measuring.md: dlbench results --format csv": RUN,
    "measuring.md: dlbench results --wide": RUN,
    "memory.md: dlbench run -f torch -m mixtral_8x7b -b 1": Mode("run", "refused before anything starts", exits=(2,)),
    "memory.md: dlbench run --dry-run -m llama3_8b -p bf16 --fsdp --recompute --scale 1n8g --device cuda": RUN,
    "mlperf.md: dlbench run -f torch,jax -m dlrm_tiny": ACCEPT,
    "mlperf.md: dlbench run -f torch,jax -m llama_tiny --lora 8": ACCEPT,
    "mlperf.md: dlbench run -m dlrm_tiny --converge": ACCEPT,
    "mlperf.md: dlbench run -m dlrm_tiny --param dist=0,1": ACCEPT,
    "mlperf.md: dlbench run -m dlrm_tiny --scale 1n2c --param sharding=1": ACCEPT,
    "mlperf.md: dlbench run -m llama_tiny --lora 8 --converge": ACCEPT,
    "mlperf.md: dlbench run -m llama_tiny --lora 8 --param lora_targets=2": ACCEPT,
    "mlperf.md: dlbench run -m llama_tiny --lora 8 --scale 1n2c --fsdp": ACCEPT,
    "dit.md: dlbench run -f torch -m dit_tiny": ACCEPT,
    "dit.md: dlbench run -f torch -m dit_tiny --recompute": ACCEPT,
    "dit.md: dlbench run -f torch -m dit_tiny --scale 1n2c": ACCEPT,
    "dit.md: dlbench run -f torch -m dit_tiny --scale 1n2c --fsdp": ACCEPT,
    "moe.md: dlbench run -f torch -m deepseek_tiny --param bias_rate=0,10 --param aux=0 --warmup 0 --steps 300 --repeats 1": (
        ACCEPT
    ),
    "moe.md: dlbench run -f torch -m moe_tiny": ACCEPT,
    "moe.md: dlbench run -f torch -m moe_tiny --param capacity=125": ACCEPT,
    "moe.md: dlbench run -f torch -m moe_tiny --scale 1n2c --expert-parallel 2": ACCEPT,
    "moe.md: dlbench run -f torch -m moe_tiny --scale 1n4c --expert-parallel 2 --force": ACCEPT,
    "moe.md: dlbench sweep moe-cpu --force": ACCEPT,
    "reports.md: dlbench report": RUN,
    "reports.md: dlbench report RUN_A RUN_B -o sweep.html": RUN,
    "reports.md: dlbench report --all --format md -o report.md": RUN,
    "reports.md: dlbench reference list": RUN,
    "reports.md: dlbench reference show dlperf_v1 --model resnet50 --precision amp": RUN,
    "reports.md: dlbench compare RUN_A RUN_B --fail-above 5%": Mode("run", exits=(0, 1, 3, 6)),
    "versions.md: dlbench setup jax==0.10.1 jax==0.10.2": SETUP,
    "versions.md: dlbench run -f jax==0.10.1,jax==0.10.2 -m resnet50 --input-size 32": ACCEPT,
    "versions.md: dlbench compare --by version": Mode(
        "run", "the seeded runs hold one release of the fake backend: nothing to compare (exit 5)", exits=(5,)
    ),
    "versions.md: dlbench bisect -f jax --versions 0.10.1..0.10.2 -m resnet50 --input-size 32": ACCEPT,
    "versions.md: dlbench bisect -f fake -m resnet50 --versions 1.0,1.1,1.2,1.3,1.4": ACCEPT,
    "reports.md: dlbench rerun RUN_ID": ACCEPT,
    "reports.md: dlbench results RUN_ID --format csv": RUN,
    "reports.md: dlbench run -f fake -m resnet50 -b 2 --steps 4 --repeats 1 --input-size 32": RUN,
    "reports.md: dlbench compare 20261129-074452-3670d6bb 20261129-074500-8dc4e1c9 --fail-above 5%": Mode(
        "run", "3 on a quiet machine, 6 where a side was contended", exits=(3, 6), needs=FAKE_PAIR
    ),
    "reproducing.md: dlbench reproduce 1a2b3c4d": RUN,
    "reproducing.md: dlbench reproduce 20261127-0705": RUN,
    "reproducing.md: dlbench reproduce 1a2b3c4d --env-file requirements.txt": RUN,
    "reproducing.md: dlbench reproduce 1a2b3c4d --run": ACCEPT,
    "reproducing.md: dlbench reproduce 1a2b3c4d --run --force": ACCEPT,
    "same-model.md: dlbench check same-model -m resnet50 -f torch,jax,tf,paddle": ACCEPT,
    "same-model.md: dlbench check same-model -m resnet50 -f torch,jax,tf,paddle,oneflow,megengine": ACCEPT,
    "same-model.md: dlbench check same-model -m bert_base": ACCEPT,
    "same-model.md: dlbench check same-model -m wide_deep --param vocab=1000": ACCEPT,
    "scaling.md: dlbench run -f torch -m resnet50 --scale 1n2c": ACCEPT,
    "scaling.md: dlbench run -f torch -m resnet50 --scale 1n4c --strategy allreduce --force": ACCEPT,
    "scaling.md: dlbench run -f torch -m resnet50 --scale 2n8c --launcher slurm": SLURM,
    "scaling.md: dlbench run -f jax,tf,paddle -m resnet50 --scale 1n2c": ACCEPT,
    "scaling.md: dlbench run -f torch -m resnet50 --device cuda --scale 2n8c --launcher slurm --preset dlperf": GPU,
    "scaling.md: dlbench results": RUN,
    "scaling.md: dlbench run -f torch -m resnet50 --scale 2n1c --launcher torchrun --hosts dlbench-h1,dlbench-h2 "
    "--reach 'nsenter --net=/run/netns/{host}' --master-addr 10.200.0.1": HOSTS,
    "scaling.md: dlbench run -f torch -m resnet50 --scale 2n1c --launcher slurm": SLURM,
    "scaling.md: dlbench run -f torch -m resnet50 --scale 1n2c --launcher mpirun": Mode(
        "skip", "needs Open MPI's mpirun: tests/cluster/test_mpi.py runs it where it is installed"
    ),
    "scaling.md: dlbench run -f torch -m gpt --param layers=2 --param hidden=256 --scale 1n4c --tensor-parallel 2 "
    "--pipeline-parallel 2 --micro-batches 4 --force": ACCEPT,
    "scaling.md: dlbench sweep dlperf-gpt-cpu --force": ACCEPT,
    "scaling.md: dlbench sweep dlperf-gpt --launcher slurm": SLURM,
    "scaling.md: dlbench sweep dlperf-gpt -f torch --launcher slurm --only scale=1n1c,1n8c": SLURM,
    "scaling.md: dlbench sweep dlperf-gpt -f torch --launcher slurm": SLURM,
    "scaling.md: dlbench report --format md": RUN,
    "store.md: dlbench run -f torch,jax -m resnet50": ACCEPT,
    "store.md: dlbench store push --all --to $TEAM": Mode("run", "$TEAM: a store file here, not PostgreSQL"),
    "store.md: dlbench history -m resnet50 -f torch,jax --since 30d --store $TEAM": Mode(
        "run", "$TEAM: a store file here; its fake points are no torch or jax point", exits=(2,), needs=TEAM
    ),
    "store.md: dlbench report --all --store $TEAM -o team.html": Mode("run", "$TEAM: a store file", needs=TEAM),
    "store.md: dlbench store pull --all --from $TEAM": Mode("run", "$TEAM: a store file", needs=TEAM),
    "sweeps.md: dlbench sweep --list": RUN,
    "sweeps.md: dlbench sweep caict-cpu --dry-run": RUN,
    "sweeps.md: dlbench sweep caict-cpu --only framework=torch": ACCEPT,
    "sweeps.md: dlbench sweep --resume RUN_ID": Mode(
        "skip", "needs a stopped sweep: tests/e2e/test_sweep.py stops one and resumes it"
    ),
    "sweeps.md: dlbench data imagenet --images 1024 --classes 10 --out data/imagenet": Mode(
        "run", "16 images, not 1,024", swap={"1024": "16", "10": "2"}
    ),
    "sweeps.md: dlbench data text --samples 1024 --out data/text": Mode(
        "skip",
        "reads every docstring of the standard library (half a minute): tests/unit/data/test_data.py makes "
        "text from a given corpus",
    ),
    "sweeps.md: dlbench run -m resnet50 --data real --data-dir data/imagenet": Mode(
        "accept", "on 16 images", needs=((*TINY_DATA, "--out", "data/imagenet"),)
    ),
}

SHOWN = shown_commands()


class Accepted(Exception):
    """The command passed every check and was about to measure."""


@dataclass(frozen=True)
class Seeded:
    """A store of two fake-backend runs, A then B, and what the manual's placeholders stand for."""

    store: Path
    a: str
    b: str
    uid: str


def _ids(text: str) -> list[str]:
    return list(dict.fromkeys(RUN_ID.findall(text)))


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    """Two real fake-backend runs (one worker each), made once for the module."""
    store = tmp_path_factory.mktemp("manual") / "results.db"
    with pytest.MonkeyPatch.context() as m:
        m.setenv("DLBENCH_FAKE", "sleep:0.001")
        m.delenv("DLBENCH_STORE", raising=False)
        for _ in range(2):
            argv = ["run", "-f", "fake", "-m", "resnet50", "-b", "2", "--warmup", "0", "--steps", "2"]
            assert main([*argv, "--repeats", "3", "--threads", "1", "--store", str(store)]) == 0
    from dlbench.store.store import Store

    points = Store(store, readonly=True).points()
    a, b = sorted({p.run_id for p in points})
    yield Seeded(store, a, b, next(p.uid for p in points if p.run_id == a)[:8])


@pytest.fixture
def here(
    tmp_path: Path, seeded: Seeded, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[..., tuple[int, str, str]]]:
    """A fresh folder holding a copy of the seeded store where `dlbench` looks by default; runs the CLI there."""
    (tmp_path / "dlbench-results").mkdir()
    src, dst = sqlite3.connect(seeded.store), sqlite3.connect(tmp_path / "dlbench-results" / "results.db")
    src.backup(dst)  # a copy with what the write-ahead log still holds
    src.close()
    dst.close()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DLBENCH_STORE", raising=False)
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.001")

    def cli(argv: list[str], env: tuple[tuple[str, str], ...] = ()) -> tuple[int, str, str]:
        with monkeypatch.context() as m:
            for k, v in env:
                m.setenv(k, v)
            code = main(argv)
        out = capsys.readouterr()
        return code, out.out, out.err

    yield cli


def _stub_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way a command starts measuring raises Accepted (it passed its checks)."""

    def accepted(*args: object, **kwargs: object) -> None:
        raise Accepted

    for target in (
        "dlbench.cli.run.execute_run",
        "dlbench.cli.sweep.execute_sweep",
        "dlbench.runapi.again._measure",  # rerun and reproduce --run, past their gate
        "dlbench.cli.bisect.execute_bisect",  # bisect, past its gate (its ends checked)
        "dlbench.runapi.converge.measure_references",  # reference measure-convergence, past its gate
        "dlbench.samemodel._run_framework",  # check same-model, past the case's tensors and input size
    ):
        monkeypatch.setattr(target, accepted)


def _prepare(argv: tuple[str, ...]) -> tuple[tuple[tuple[str, str], ...], list[str]]:
    env = tuple(tuple(a.split("=", 1)) for a in argv if re.match(r"^[A-Z_]+=", a))
    return env, [a for a in argv if not re.match(r"^[A-Z_]+=", a)]  # type: ignore[return-value]


def _frameworks(argv: list[str]) -> list[str]:
    """The frameworks a command names with -f / --framework ('all' and the fake one left out)."""
    named = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-f", "--framework")]
    return [fw for value in named for fw in value.split(",") if split_release(fw)[0] not in ("all", "fake")]


def test_every_command_of_the_manual_is_classified() -> None:
    keys = {s.key for s in SHOWN}
    unclassified = sorted(keys - set(MODES))
    assert not unclassified, "classify these commands of the manual in MODES: " + "; ".join(unclassified)
    stale = sorted(set(MODES) - keys)
    assert not stale, "no longer in the manual: " + "; ".join(stale)
    assert len(SHOWN) >= 70  # the parser still finds the manual's commands


@pytest.mark.parametrize("shown", SHOWN, ids=[f"{i:02d}-{s.page}" for i, s in enumerate(SHOWN)])
def test_the_manual_command_runs_as_its_page_says(
    shown: Shown,
    seeded: Seeded,
    here: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mode = MODES.get(shown.key)
    if mode is None:
        pytest.fail(f"not classified (see test_every_command_of_the_manual_is_classified): {shown.key}")
    if mode.kind == "skip":
        pytest.skip(mode.why)
    made: list[str] = []
    for need in mode.needs:
        env, argv = _prepare(need)
        code, out, err = here(argv, env)
        assert code == 0, (need, err)
        made += _ids(out)[:1]
    replace = {"RUN_ID": seeded.a, "RUN_A": seeded.a, "RUN_B": seeded.b, "1a2b3c4d": seeded.uid}
    replace |= {"20261127-0705": seeded.a[:15], "$TEAM": "team.db", **mode.swap}
    page_ids = RUN_ID.findall(shown.command)
    assert len(page_ids) <= len(made), "the page names runs its block did not make"
    replace |= dict(zip(page_ids, made))
    argv = shown.argv(replace)
    absent = [fw for fw in _frameworks(argv) if not state(*split_release(fw)).installed]
    if absent:
        pytest.skip(f"names {', '.join(absent)}, not installed here (`dlbench setup` makes them)")
    if mode.fake:
        argv += ["-f", "fake"]
    if mode.kind == "accept":
        _stub_measuring(monkeypatch)
        try:
            code, out, err = here(argv, shown.env)
        except Accepted:
            return
        if code == 2 and "dlbench setup" in err:
            pytest.skip(f"a framework it names is not installed here: {err.strip()[:200]}")
        pytest.fail(f"refused or ended before measuring (exit {code}): {err.strip()[-600:]}")
    code, out, err = here(argv, shown.env)
    if code == 2 and "dlbench setup" in err:
        pytest.skip(f"a framework it names is not installed here: {err.strip()[:200]}")
    expected = (shown.exit_code,) if shown.exit_code is not None and shown.exit_code not in mode.exits else mode.exits
    assert code in expected, (code, err[-1000:])
    if shown.output is None:
        return
    printed = (out + err).splitlines()
    assert headers(printed) == headers(shown.output), (headers(printed), headers(shown.output), out)
    wanted = [x for x in labels(shown.output) if x not in OPTIONAL_LABELS]
    assert in_order(wanted, labels(printed)), (wanted, labels(printed), out + err)
