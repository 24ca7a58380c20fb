"""The report in a real headless browser (Debian's chromium over the DevTools pipe): it loads with no
console errors, every figure renders at a non-zero size, and the tables have the expected rows."""

import json

import pytest

from analysis.synthetic import SyntheticArm, write_experiment
from reports.browser import check_page, find_chromium
from reports.build import build_report

pytestmark = pytest.mark.skipif(
    find_chromium() is None, reason="chromium not installed (CI installs it: apt-get install chromium)"
)


@pytest.mark.slow
def test_report_renders_in_chromium(tmp_path):
    arms = {
        "a": SyntheticArm(1.2, {"algo": "dqn", "lr": 1e-4}),
        "b": SyntheticArm(0.6, {"algo": "dqn", "lr": 5e-4}),
    }
    exp = write_experiment(
        tmp_path, "exp", arms, ["pong", "breakout", "qbert"], [0, 1], n_logs=4, eval_episodes=2
    )
    (exp / "b/qbert/seed1/status.json").write_text(json.dumps({"state": "failed", "error": "killed"}))
    page = build_report(exp, reps=100)
    screenshot = tmp_path / "report.png"

    check = check_page(page, screenshot=screenshot)

    assert check.errors == []
    assert len(check.images) == 7 and check.broken_images == []
    assert all(img["naturalWidth"] > 100 and img["height"] > 50 for img in check.images)
    # The results first, opening with the two-arm verdict; what ran and its settings after
    # them; the problems last.
    assert check.sections[0] == "verdict" and check.sections[-1] == "problems"
    assert check.sections.index("aggregates") < check.sections.index("what-ran")
    # b lost a qbert seed, so every arm keeps 1 seed per game in the aggregates; the rest is listed
    assert check.tables["aggregate-table"] == 2
    assert check.tables["published-table"] == 6
    assert check.tables["skipped-table"] == 1
    assert check.tables["left-out-table"] == 5  # 11 complete runs, 2 arms x 3 games x 1 seed kept
    assert check.tables["missing-table"] == 0
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 50_000


def test_console_errors_and_broken_images_are_reported(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img id="missing" src="nope.png">'
        '<table id="t"><tbody><tr><td>1</td></tr></tbody></table>'
        "<script>console.error('boom'); undefinedFunction();</script></body></html>"
    )
    check = check_page(page)
    assert check.broken_images == ["missing"]
    assert check.tables == {"t": 1}
    assert any("boom" in e for e in check.errors)
    assert any("undefinedFunction" in e for e in check.errors)
