"""A point's AMP host-sync fact is shown in the report and in the run notes."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from dlbench.report.document import build_report
from dlbench.report.groups import build_sections
from dlbench.report.html import render_html
from dlbench.report.markdown import write_markdown
from dlbench.report.table import points_table
from dlbench.store.store import Store


def _point(framework: str, precision: str, extra: dict[str, object]) -> object:
    # the report tests' factory: real statistics over synthetic steps
    from tests.support.reports import make_point

    p = make_point(framework, device="cuda", extra=extra, identity={"device": "cuda", "device_model": "NVIDIA H100"})
    return dataclasses.replace(p, spec=dataclasses.replace(p.spec, precision=precision))


def test_amp_host_sync_fact_is_shown_in_report_and_run_notes(tmp_path: Path) -> None:
    why = "the loss scaler reads the overflow flag on the host every step (TensorFlow's own: ...)"
    points = [_point("tf", "amp", {"amp_host_sync": why}), _point("torch", "amp", {})]
    store = Store(tmp_path / "s.db")
    run = store.create_run("dlbench run (gpu-b)")
    for p in points:
        store.add_point(run, p)  # type: ignore[arg-type]
    stored = store.points()
    [amp] = build_sections(stored)
    marked = {col.framework: cell.remark for (_, col), cell in amp.cells.items()}
    assert marked == {"tf": "a", "torch": None}  # the tf amp cell only, never torch's
    assert [(r.mark, r.text) for r in amp.remarks] == [("a", f"TensorFlow/Keras amp: {why}")]
    report = build_report(store.runs(), stored)
    page = render_html(report)
    assert '<sup class="remark">[a]</sup>' in page and f"[a] TensorFlow/Keras amp: {why}" in page.replace("&#39;", "'")
    md = tmp_path / "r.md"
    write_markdown(report, md)
    text = md.read_text()
    assert re.search(r"\*\*[\d.,]+\*\* ± [\d.,]+ \[a\]<br>", text)  # the tf amp cell, marked
    assert text.count(" [a]<br>") == 1 and "- [a] TensorFlow/Keras amp: the loss scaler reads" in text
    caption = str(points_table([p.result for p in stored]).caption)  # what `dlbench run` prints under its table
    assert f"tf amp: {why}" in caption and "torch amp" not in caption
