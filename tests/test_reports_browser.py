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


def _colour_pixels(html: str, figure_id: str, colour: str) -> int:
    """Pixels of ``colour`` (within 0.1 per channel) in the page's figure ``figure_id``."""
    import base64
    import io
    import re

    import matplotlib.colors as mc
    import matplotlib.image as mpimg
    import numpy as np

    uri = re.search(rf'<img id="{figure_id}" class="figure" src="data:image/png;base64,([^"]+)"', html).group(
        1
    )
    image = mpimg.imread(io.BytesIO(base64.b64decode(uri)))[..., :3]
    return int((np.abs(image - np.array(mc.to_rgb(colour))).max(axis=-1) < 0.1).sum())


@pytest.mark.slow
def test_a_report_of_single_point_curves_fits_1280_px_and_shows_them(tmp_path):
    """Runs evaluated once (the smoke profile's runs): each curve is one point, drawn with a marker and
    its interval (a line of one point is invisible: only the legend had the arm's colour, 46 pixels
    of it, where the marker adds about 140); long arm names and paths do not make the page scroll
    sideways at 1280 px (wide tables scroll in their own box)."""
    from reports.figures import arm_colours

    arms = {
        "ppo_cartpole_zoo_learning_rate-1e-4_value_coef-0.25_discount-0.9": SyntheticArm(
            0.6, {"algo": "ppo"}
        ),
        "ppo_cartpole_zoo": SyntheticArm(0.9, {"algo": "ppo"}),
    }
    exp = write_experiment(tmp_path, "exp", arms, ["CartPole-v1"], [0, 1, 2], n_logs=1, eval_episodes=2)
    page = build_report(exp, reps=100)
    screenshot = tmp_path / "report.png"

    check = check_page(page, screenshot=screenshot, width=1280)

    assert check.errors == [] and check.broken_images == []
    assert check.client_width == 1280 and not check.scrolls_sideways, (check.scroll_width, check.client_width)
    html = page.read_text()
    for arm, colour in arm_colours(list(arms)).items():
        assert _colour_pixels(html, "fig-learning-curves", colour) > 100, arm


@pytest.mark.slow
def test_the_main_jobs_report_fits_1280_px_and_long_arm_names_leave_the_run_table_whole(tmp_path):
    """The report `make reproduce-r2d1` ends with (R2D1's two arms on MinAtar): no table wider than
    the page at 1280 px (the published-comparison table was, by its prose columns, and the per-run
    throughput table by its 13 columns); with the ablation's longest arm name the per-run table still
    fits (a 60-character name in a 10-column table may scroll in its box)."""
    r2d1 = {"algo": "r2d1", "algo_config": {"replay_size_steps": 100_000}}
    games = ["minatar_breakout"]
    main_job = {
        arm: SyntheticArm(1.0, r2d1) for arm in ("rlpyt_r2d1_minatar_published", "r2d1_minatar_corrected")
    }
    exp = write_experiment(tmp_path / "main", "exp", main_job, games, [0, 1, 2], n_logs=2, frameskip=1)
    check = check_page(build_report(exp, reps=100), width=1280)
    assert check.errors == [] and check.tables["minatar-published-table"] == 2
    assert check.clipped == [] and not check.scrolls_sideways

    ablation = {
        arm: SyntheticArm(1.0, r2d1)
        for arm in ("r2d1_minatar_corrected_with_initial_priorities_without_alpha", "r2d1_minatar_corrected")
    }
    exp = write_experiment(tmp_path / "long", "exp", ablation, games, [0, 1, 2], n_logs=2, frameskip=1)
    check = check_page(build_report(exp, reps=100), width=1280)
    assert "throughput-runs-table" not in check.clipped and "replay-runs-table" not in check.clipped
