"""Start-up (#25): `dlbench --version` and `--help` import no heavy library, a sub-command only its own, a point's
controller no SciPy/Alembic/matplotlib/Jinja/py-cpuinfo/NumPy/YAML (#43: the learnable data and the suite format
load where asked), its worker none of them either; the CPU model is read
from /proc/cpuinfo as py-cpuinfo reads it. Timings are benchmarks/startup.py's, not a test's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from dlbench.cli import cli
from dlbench.cli.lazy import short_help
from dlbench.machine.env import proc_cpuinfo_brand

HEAVY = (
    "scipy",
    "sqlalchemy",
    "alembic",
    "matplotlib",
    "jinja2",
    "pandas",
    "pydantic",
    "numpy",
    "cpuinfo",
    "rich",
    "psutil",
    "yaml",
)


def imported_after(code: str, cwd: Path | None = None) -> set[str]:
    """The heavy top-level packages a fresh interpreter has imported after running code."""
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=cwd)
    return set(json.loads(out.stdout.strip().splitlines()[-1])) & set(HEAVY)


def test_version_and_help_import_no_heavy_library() -> None:
    for args in (["--version"], ["--help"]):
        loaded = imported_after(f"from dlbench.cli import main\ntry:\n    main({args!r})\nexcept SystemExit:\n    pass")
        assert loaded == set(), (args, loaded)


def test_help_lists_each_command_as_the_command_itself_would() -> None:
    group = cli
    ctx = click.Context(group)
    for name, (_, summary) in sorted(group.lazy.items()):  # type: ignore[attr-defined]
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        for limit in (40, 65, 120):
            assert short_help(name, summary, limit) == cmd.get_short_help_str(limit), (name, limit)


def test_a_points_controller_and_worker_import_only_what_it_needs(tmp_path: Path) -> None:
    from dlbench.store.store import Store

    store = tmp_path / "s.db"
    Store(store).create_run("x")  # the store exists (making one imports Alembic, which builds its schema)
    run = (
        "from dlbench.cli import main\n"
        f"assert main(['run', '-f', 'fake', '-m', 'resnet50', '--steps', '1', '--warmup', '0', '--repeats', '1', "
        f"'--store', {str(store)!r}]) == 0"
    )
    loaded = imported_after(run, tmp_path)
    assert not loaded & {"scipy", "alembic", "matplotlib", "jinja2", "pandas", "cpuinfo", "numpy", "yaml"}, loaded
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "framework": "fake",
                "model": "resnet50",
                "batch_size": 2,
                "protocol": {"warmup": 0, "steps": 1, "repeats": 1, "statistic": "median"},
            }
        )
    )
    worker = f"from dlbench.worker import main\nassert main([{str(spec)!r}, {str(tmp_path / 'r.json')!r}]) == 0"
    loaded = imported_after(worker, tmp_path)
    assert not loaded & {"scipy", "sqlalchemy", "alembic", "matplotlib", "jinja2", "pandas", "cpuinfo", "yaml"}, loaded


@pytest.mark.parametrize(
    "text, brand",
    [
        (
            "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n",
            "Intel(R) Xeon(R) Platinum 8480+",
        ),
        ("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\n", None),  # ARM: no brand
        ("processor\t: 0\ncpu\t\t: POWER9 (raw), altivec supported\n", "POWER9 (raw), altivec supported"),
    ],
)
def test_the_cpu_brand_is_read_as_py_cpuinfo_reads_proc_cpuinfo(text: str, brand: str | None) -> None:
    assert proc_cpuinfo_brand(text) == brand


def test_the_cpu_model_here_is_py_cpuinfos() -> None:
    path = Path("/proc/cpuinfo")
    if not path.exists():
        pytest.skip("no /proc/cpuinfo on this system: dlbench asks py-cpuinfo itself")
    cpuinfo = pytest.importorskip("cpuinfo")
    assert proc_cpuinfo_brand(path.read_text()) == cpuinfo.get_cpu_info()["brand_raw"]
