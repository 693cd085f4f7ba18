"""Make docs/report-energy.png: excerpts of a report page of FIXTURE points (not measurements) in headless Chromium
(the other sections and charts hidden by a style added to the page), showing the throughput-against-energy chart, a
contended point and the Special cases section with every
configuration. The points come from the unit tests' fixture helpers (tests/support/reports.py's make_point:
synthetic step times through dlbench's own statistics); energy and contention are set on them the way the
controller records them (machine/telemetry.py). This machine has no RAPL counters, so no measured energy exists
to show: the page says it is made of fixtures in its title.

    python scripts/report_screenshot.py [-o docs/report-energy.png]    (needs /usr/bin/chromium)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dlbench.machine.telemetry import Contention, Energy, Telemetry, with_telemetry  # noqa: E402
from dlbench.records import PointResult  # noqa: E402
from dlbench.report.document import build_report  # noqa: E402
from dlbench.report.html import render_html  # noqa: E402
from tests.support.reports import make_point  # noqa: E402
from tests.unit.report.test_report_configs import max_facts, params, stored  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
SHOWN = "resnet50-fp32-synthetic-cpu"  # the section with the energy chart; the Special cases section is shown too
# The excerpt: the header, the ResNet-50 section with only its energy chart, and the Special cases section.
EXCERPT = (
    f"<style>main > section:not(#{SHOWN}):not(#special) {{ display: none !important; }} "
    f"#{SHOWN} figure:not(#{SHOWN}-energy) {{ display: none !important; }}</style></head>"
)


def metered(r: PointResult, watts: float, others: float = 0.02) -> PointResult:
    """The point with RAPL energy at `watts` over its measured windows, and others' CPU share `others`."""
    assert r.metrics is not None
    window = sum(rep.wall_s for rep in r.ranks[0].repeats)
    samples = r.spec.global_batch * sum(len(rep.step_times) for rep in r.ranks[0].repeats)
    tele = Telemetry(
        contention=Contention(others_share=others, cpus=2, window_s=window, load_avg=(0.4, 0.3, 0.2)),
        energy=Energy(
            joules=watts * window, source="rapl", window_s=window, samples=samples, devices=1, price_per_hour=0.5
        ),
    )
    return with_telemetry(r, tele)


def fixture_points() -> list[PointResult]:
    pts = []
    for fw, step, watts in (("torch", 0.40, 61.0), ("tf", 0.46, 58.0), ("jax", 0.43, 64.0)):
        for batch, scale in ((8, 1.0), (16, 1.9)):
            pts.append(metered(make_point(fw, batch=batch, step_s=step * scale, seed=batch), watts * (1 + batch / 80)))
    pts.append(metered(make_point("paddle", batch=8, step_s=0.55), 66.0, others=0.41))  # a contended point
    for vocab, s in ((3_200_000, 0.020), (4_000_000, 0.021), (6_400_000, 0.024)):
        for fw, k in (("torch", 1.0), ("tf", 1.3)):
            pts.append(params(make_point(fw, model="wide_deep", batch=512, step_s=s * k), vocab=vocab))
    pts.append(
        params(
            make_point("torch", model="face", batch=4, per_node=2, extra={"max_param": max_facts(45_000)}),
            classes=45_000,
        )
    )
    pts.append(
        params(
            make_point(
                "torch", model="face", batch=4, per_node=2, step_s=0.011, extra={"max_param": max_facts(98_000)}
            ),
            classes=98_000,
            model_parallel=1,
        )
    )
    return pts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "docs" / "report-energy.png")
    ap.add_argument("--height", type=int, default=3300)
    args = ap.parse_args()
    doc = build_report(
        [], stored(fixture_points()), title="fixture points, not measurements: energy, contention, special cases"
    )
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(render_html(doc).replace("</head>", EXCERPT, 1))
        subprocess.run(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={tmp}/profile",
                f"--window-size=1400,{args.height}",
                f"--screenshot={args.out.resolve()}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=180,
        )
    print(args.out)


if __name__ == "__main__":
    main()
