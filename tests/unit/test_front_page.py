"""The README is a short front page over the manual: its links and CONTRIBUTING's resolve, and it links every page.

`mkdocs build --strict` (in .ci/run) checks the links inside docs/; these files live outside it, so this test
checks theirs: every relative link names a file that exists, and every #anchor into a Markdown file names one of
its headings.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FRONT = ["README.md", "CONTRIBUTING.md", "src/dlbench/backends/README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor as mkdocs (Python-Markdown's toc) and GitHub both make it for these pages."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (fenced code skipped)."""
    out: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def links(path: Path) -> list[str]:
    """The relative links of a Markdown file (web addresses left out)."""
    return [t for t in LINK.findall(path.read_text(encoding="utf-8")) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("name", FRONT)
def test_relative_links_resolve(name: str) -> None:
    page = ROOT / name
    broken = []
    for target in links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{name}: {broken}"


def nav_pages(nav: list[object]) -> list[str]:
    """Every page named in mkdocs.yml's nav, sections flattened."""
    out: list[str] = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            out += nav_pages(value) if isinstance(value, list) else [str(value)]
    return out


def test_readme_links_every_manual_page() -> None:
    nav = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    linked = {target.partition("#")[0] for target in links(ROOT / "README.md")}
    missing = [page for page in nav if page != "index.md" and f"docs/{page}" not in linked]
    assert nav and not missing, f"README.md does not link these manual pages: {missing}"


def test_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 160, "the README is the front page: move detail into a page under docs/"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert 'pytest -n 2 -m "not matrix"' in text and 'pytest -n 2 -m "not matrix"' in ci  # the test command CI runs
    assert "pip install -e '.[torch]'\ndlbench run\n" in text  # the two commands that set up and run


def test_the_manual_home_lists_every_page() -> None:
    """docs/index.md's table of pages omitted the convergence, Llama, MoE, reproduce and GPU pages (#42)."""
    nav = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    linked = {target.partition("#")[0] for target in links(ROOT / "docs" / "index.md")}
    missing = [page for page in nav if page != "index.md" and page not in linked]
    assert nav and not missing, f"docs/index.md does not list these manual pages: {missing}"


def test_the_front_page_says_where_results_go_and_how_long_the_tests_take() -> None:
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "`./dlbench-results/results.db`" in text and "`$DLBENCH_STORE` picks another" in text
    assert "`$DLBENCH_HOME`, default `~/.dlbench`, holds environments and caches, no results" in text
    assert re.search(r'pytest -n 2 -m "not matrix" # about \d+ minutes', text)


def test_run_says_where_its_results_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Callable[..., tuple[int, str, str]]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DLBENCH_STORE", raising=False)
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.001")
    args = ("run", "-f", "fake", "-m", "resnet50", "-b", "2", "--warmup", "0", "--steps", "1", "--repeats", "1")
    code, out, err = cli(*args, "--threads", "1")
    assert code == 0, err
    said = " ".join(out.split())
    assert f"Results: {tmp_path / 'dlbench-results' / 'results.db'} (run " in said
    assert "--store or $DLBENCH_STORE picks another store" in said
