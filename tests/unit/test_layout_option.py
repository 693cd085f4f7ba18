"""A new layout option touches at most three files (#43): its field in parallel.Layout, its spelling in the suite's
schema, and the backend that runs it. This test adds one (`overlap`) to a copy of the package by editing only the
first two, and finds it everywhere a layout option goes: `dlbench run --overlap`, the point a request builds, its
key (only while set, so stored keys keep), the stored form and back, and a suite's `layout: {overlap: 2}`, which
makes the same point."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).parents[2] / "src" / "dlbench"

FIELD = """    overlap: int = _option(1, "Overlap N buckets' communication with compute (a demonstration option).")
"""
SCHEMA = "    overlap: PositiveInt = 1  # a demonstration option\n"

PROBE = r"""
import dataclasses, json, sys
import yaml
from dlbench.cli.run import run
from dlbench.cli.run_request import run_request
from dlbench.points import points
from dlbench.spec import PointSpec
from dlbench.suite import parse_suite
from dlbench.suite.expand import expand
from dlbench.store.store import Store
from tests.support.stores import result

args = ["-f", "fake", "-m", "alexnet", "--device", "cpu", "--scale", "1n2c", "--overlap", "2"]
params = run.make_context("run", args).params
request, _ = run_request({k: v for k, v in params.items() if k not in ("fmt", "columns", "wide")}, "dlbench run")
[spec] = points(request.axes, request.shared)
plain = PointSpec("fake", "alexnet", 2, spec.protocol)
suite = parse_suite(yaml.safe_dump({"name": "s", "device": "cpu", "layout": {"overlap": 2},
    "axes": {"framework": "fake", "model": "alexnet", "scale": "1n2c"}}), "s.yaml")
[planned] = expand(suite, "cpu")
store = Store(sys.argv[1])
run_id = store.create_run("x")
store.add_point(run_id, dataclasses.replace(result(), spec=spec))
print(json.dumps({
    "overlap": spec.layout.overlap,
    "in_key": '"overlap": 2' in spec.key(),
    "plain_key_has_it": "overlap" in plain.key(),
    "round_trip": PointSpec.from_json(spec.to_json()) == spec,
    "suite_same": planned.spec == spec,
    "stored": store.points([run_id])[0].result.spec.layout.overlap,
}))
"""


def _copy_with_option(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    shutil.copytree(SRC, root / "dlbench", ignore=shutil.ignore_patterns("__pycache__"))
    parallel = root / "dlbench" / "parallel.py"
    text = parallel.read_text()
    anchor = "\n    @property\n    def devices(self)"
    parallel.write_text(text.replace(anchor, "\n" + FIELD.rstrip("\n") + "\n" + anchor, 1))
    schema = root / "dlbench" / "suite" / "schema.py"
    text = schema.read_text()
    anchor = "    bucket_mb: PositiveInt | None = None"
    line_end = text.index("\n", text.index(anchor)) + 1
    schema.write_text(text[:line_end] + SCHEMA + text[line_end:])
    return root


def test_a_new_layout_option_is_a_field_and_its_suite_spelling(tmp_path: Path) -> None:
    root = _copy_with_option(tmp_path)
    changed = sorted(
        str(p.relative_to(root / "dlbench"))
        for p in (root / "dlbench").rglob("*")
        if p.is_file() and p.read_bytes() != (SRC / p.relative_to(root / "dlbench")).read_bytes()
    )
    assert changed == ["parallel.py", "suite/schema.py"]  # the backend that runs it would be the third
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{SRC.parents[1]}", "COLUMNS": "200"}
    helped = subprocess.run(
        [sys.executable, "-m", "dlbench", "run", "--help"], env=env, capture_output=True, text=True, check=True
    )
    assert "--overlap" in helped.stdout and "demonstration option" in helped.stdout
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "s.db")], env=env, capture_output=True, text=True, check=False
    )
    assert probe.returncode == 0, probe.stderr
    facts = json.loads(probe.stdout.strip().splitlines()[-1])
    assert facts == {
        "overlap": 2,
        "in_key": True,
        "plain_key_has_it": False,
        "round_trip": True,
        "suite_same": True,
        "stored": 2,
    }
