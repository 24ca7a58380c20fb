"""The learning check every verdict opens with: each arm's level on each env against random play (0)
and the published reference at the same frames, on untrained and trained synthetic runs; a smoke run's
report compares nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.study import run_study
from analysis.study_markdown import study_markdown
from analysis.synthetic import SyntheticArm, write_experiment
from analysis.verdict import ArmLevel, learning_sentence
from reports.build import build_report

GAMES = ["minatar_breakout", "minatar_space_invaders", "minatar_seaquest"]
# MinAtar counts frames as env steps; 250k frames lie inside Young & Tian's read-off points.
RUNS = {"n_steps": 250_000, "frameskip": 1}


def _study(tmp_path, skills: dict[str, float], seeds=5, plan=None):
    arms = {arm: SyntheticArm(skill, {"algo": arm}) for arm, skill in skills.items()}
    exp = write_experiment(tmp_path, "exp", arms, GAMES, list(range(seeds)), **RUNS)
    if plan is not None:
        (exp / "plan.json").write_text(json.dumps(plan))
    return run_study(exp, reps=400)


def test_neither_arm_shown_to_learn_is_the_first_sentence_of_the_verdict(tmp_path):
    study = _study(tmp_path, {"a_published": 0.0, "b_corrected": 0.0})
    first = study.verdict.sentence.split(": ")[0]
    assert first == "Neither arm has been shown to learn at this budget"
    assert study.verdict.sentence.startswith(
        "Neither arm has been shown to learn at this budget: the comparison is between agents not shown "
        "to be trained"
    )
    assert "untrained" not in study.verdict.sentence  # an interval over 0 shows no learning, not its absence
    assert not study.learning.learned.any()
    assert (study.learning.ci_low <= 0).all()  # no env's interval lies above random play
    markdown = study_markdown(study, "cmd", "2026-12-04")
    assert (
        "**Verdict (exploratory).** Neither arm has been shown to learn" in markdown
        and "## Learning check" in markdown
    )
    assert markdown.count("Neither arm has been shown to learn") == 1


@pytest.mark.parametrize("skills", [{"a_published": 0.0, "b_corrected": 0.0}, {"a": 0.0, "b": 0.0, "c": 1.0}])
def test_the_report_states_the_learning_sentence_once(tmp_path, skills):
    """Two arms: the verdict opens with it; more arms: it is the verdict section. The learning check's
    table follows without repeating it."""
    arms = {arm: SyntheticArm(skill, {"algo": arm}) for arm, skill in skills.items()}
    exp = write_experiment(tmp_path, "exp", arms, GAMES, list(range(3)), **RUNS)
    html = build_report(exp, reps=100).read_text()
    lead = (
        "Neither arm has been shown to learn" if len(skills) == 2 else "a and b have not been shown to learn"
    )
    assert html.count(lead) == 1 and '<section id="learning">' in html


def test_one_untrained_arm_is_named_first_and_trained_arms_get_no_warning(tmp_path):
    study = _study(tmp_path, {"a_published": 0.0, "b_corrected": 1.0})
    assert study.verdict.sentence.startswith(
        "a_published has not been shown to learn at this budget: the comparison is with an agent not shown "
        "to be trained"
    )
    assert study.verdict.winner == "b_corrected"
    trained = _study(tmp_path / "t", {"a_published": 0.9, "b_corrected": 1.0})
    assert trained.learning.learned.all()
    assert not trained.verdict.sentence.startswith(("Neither", "a_published has not", "b_corrected has not"))
    assert trained.verdict.sentence == trained.verdict.sentence.lstrip()


def test_the_reference_is_the_published_dqn_at_the_same_frames(tmp_path):
    from analysis.scores import minatar_published_curves, minatar_reference_table, published_at

    study = _study(tmp_path, {"a_published": 1.0, "b_corrected": 1.0})
    curves = minatar_published_curves()
    dqn = curves[curves.algo.str.lower() == "dqn"]
    table = minatar_reference_table()
    rows = study.learning.set_index(["arm", "env"])
    for game in GAMES:
        expected = float(table.normalise(game, published_at(dqn[dqn.env == game], 250_000)["return"]))
        assert rows.reference[("a_published", game)] == pytest.approx(expected)
    assert "Young & Tian" in study.learning_reference


def test_no_interval_with_one_seed_is_not_shown_to_learn():
    sentence = learning_sentence([ArmLevel("a", 0.5, np.nan, np.nan), ArmLevel("b", 0.6, 0.1, 0.9)])
    assert sentence.startswith("a has not been shown to learn at this budget")
    assert "one seed per game: no interval" in sentence
    on_env = learning_sentence(
        [ArmLevel("a", 0.5, 0.2, 0.7, env="x"), ArmLevel("a", 0.5, np.nan, np.nan, env="y")]
    )
    assert (
        on_env.startswith("a has not been shown to learn") and "a on y 0.5 (one seed: no interval)" in on_env
    )
    assert "a on x" not in on_env
    assert learning_sentence([ArmLevel("a", 0.5, 0.2, 0.7)]) is None
    assert learning_sentence([ArmLevel(x, 0, -1, 1) for x in "abc"]).startswith(
        "No arm has been shown to learn"
    )


def test_arms_that_learned_on_other_envs_are_never_called_untrained():
    """Per-env levels: an arm not shown to learn on one env but shown on another has learned; only an
    arm shown on no env is said not to have learned."""
    both = [
        ArmLevel(a, v, lo, hi, env=e)
        for a in "ab"
        for e, v, lo, hi in (("x", 0.5, 0.2, 0.7), ("y", 0, -1, 1))
    ]
    sentence = learning_sentence(both)
    assert sentence.startswith("a and b are not shown to learn on every game: the comparison there is with")
    assert "a on y" in sentence and "b on y" in sentence and "a on x" not in sentence
    assert "Neither arm" not in sentence
    one = learning_sentence([*both[:2], ArmLevel("b", 0, -1, 1, env="x"), both[3]])
    assert one.startswith(
        "b has not been shown to learn at this budget; a is not shown to learn on every game"
    )


def test_evaluations_cut_at_the_harness_cap_are_not_shown_to_learn(tmp_path):
    """The smoke profile's case on Atari: final evaluation episodes stopped at sampler.eval_max_steps
    score on another scale than random play's whole episodes (Pong's cut episodes score half of
    human)."""
    arms = {
        arm: SyntheticArm(1.0, {"algo": arm, "sampler": {"eval_max_steps": 100}})
        for arm in ("a_published", "b_corrected")
    }
    exp = write_experiment(tmp_path, "exp", arms, ["pong", "breakout", "qbert"], list(range(3)), n_logs=5)
    study = run_study(exp, reps=300)
    assert study.verdict.sentence.startswith(
        "Neither arm has been shown to learn at this budget: the comparison is between agents not shown "
        "to be trained"
    )
    assert "stopped at the harness's cap of 100 steps" in study.verdict.sentence
    assert (study.learning.eval_cap == 100).all() and not study.learning.learned.any()
    assert "not on the scale of random play" in study.cut_short


def test_minatar_evaluations_cut_at_the_cap_are_lower_bounds_and_a_level_above_random_stands(tmp_path):
    """MinAtar's games only add reward: a return cut at the cap is at most the whole episode's, so an
    arm whose cut returns already lie above random play has learned; the summary names the cut runs."""
    arms = {
        "a_published": SyntheticArm(1.0, {"algo": "a_published", "sampler": {"eval_max_steps": 100}}),
        "b_corrected": SyntheticArm(1.0, {"algo": "b_corrected"}),
    }
    exp = write_experiment(tmp_path, "exp", arms, GAMES, list(range(3)), **RUNS)
    study = run_study(exp, reps=300)
    assert study.learning.learned.all()
    # Every run of a_published was cut, none of b_corrected's: the column says so, not "–" for both.
    cut = study.learning.set_index("arm")
    assert (cut.runs_cut["a_published"] == 3).all() and (cut.eval_cap["a_published"] == 100).all()
    assert (cut.runs_cut["b_corrected"] == 0).all() and cut.eval_cap["b_corrected"].isna().all()
    assert study.learning_lead is None and "shown to learn" not in study.verdict.sentence
    assert study.cut_short.startswith("9 of 18 runs ended final evaluation episodes at the harness's cap")
    assert "a_published/minatar_breakout/seed0" in study.cut_short and "lower bounds" in study.cut_short
    assert f"Note: {study.cut_short}" in study_markdown(study, "cmd", "today")
    html = build_report(exp, out=tmp_path / "r.html", reps=200).read_text()
    assert "a_published/minatar_breakout/seed0" in html and "lower bounds" in html


def test_an_arm_with_fewer_runs_does_not_cut_the_others_level_to_its_seeds(tmp_path):
    """A study part-way (one arm at 1 seed, the other at 5): the aggregates balance the arms to 1 run
    per game, but each arm's learning check uses every run of its own on each env, so the full arm
    keeps its intervals and is shown to learn."""
    import shutil

    arms = {arm: SyntheticArm(1.0, {"algo": arm}) for arm in ("a", "b")}
    exp = write_experiment(tmp_path, "exp", arms, GAMES, list(range(5)), **RUNS)
    for game in GAMES:
        for seed in range(1, 5):
            shutil.rmtree(exp / "b" / game / f"seed{seed}")
    study = run_study(exp, reps=400)
    assert study.runs_per_game == 1
    levels = study.learning.groupby("arm")
    assert levels.runs.unique().to_dict() == {"a": [5], "b": [1]}
    a, b = (study.learning[study.learning.arm == arm] for arm in "ab")
    assert a.learned.all() and np.isfinite(a.ci_low).all()
    assert not b.learned.any() and np.isnan(b.ci_low).all()
    markdown = study_markdown(study, "cmd", "2026-12-05")
    assert "| arm | env | runs |" in markdown and "| a | minatar_breakout | 5 |" in markdown


def test_a_seed_added_on_another_env_never_changes_an_env_s_learning_check(tmp_path):
    """Acrobot at 3 seeds, then one CartPole seed: balancing the aggregates keeps 1 Acrobot run, but
    Acrobot's learning check still uses its 3, and the 2 runs the aggregates leave out are named beside
    them."""
    import shutil

    arms = {"ppo": SyntheticArm(-0.4, {"algo": "ppo"})}  # Acrobot about -200: 70% of the reference
    envs = ["Acrobot-v1", "CartPole-v1"]
    exp = write_experiment(tmp_path, "exp", arms, envs, [0, 1, 2], n_logs=3, frameskip=1)
    before = run_study(exp, reps=200).learning.set_index("env")
    for seed in (1, 2):
        shutil.rmtree(exp / "ppo" / "CartPole-v1" / f"seed{seed}")
    study = run_study(exp, reps=200)
    after = study.learning.set_index("env")
    assert after.runs["Acrobot-v1"] == 3 and after.learned["Acrobot-v1"]
    assert after.loc["Acrobot-v1", ["mean", "ci_low", "ci_high"]].tolist() == pytest.approx(
        before.loc["Acrobot-v1", ["mean", "ci_low", "ci_high"]].tolist()
    )
    assert after.runs["CartPole-v1"] == 1 and not after.learned["CartPole-v1"]
    assert "ppo on CartPole-v1" in study.learning_lead and "Acrobot" not in study.learning_lead
    assert study.runs_per_game == 1
    aggregates = study_markdown(study, "cmd", "today").split("## Aggregates")[1].split("## ")[0]
    assert "Left out of these aggregates to balance the arms and envs: ppo/Acrobot-v1/seed1, " in aggregates


def test_a_smoke_report_compares_nothing(tmp_path):
    """Two arms on the smoke profile: no winner, no power statement, only "Smoke: no comparison"."""
    from analysis.learning import SMOKE_COMPARISON

    arms = ["a_published", "b_corrected"]
    plan = {"plans": [{"plan": "p", "title": "t", "profile": "smoke", "arms": arms}], "arms": arms}
    study = _study(tmp_path, {"a_published": 0.2, "b_corrected": 1.0}, seeds=3, plan=plan)
    assert study.verdict is None and study.power is None
    page = study_markdown(study, "cmd", "today")
    assert f"**{SMOKE_COMPARISON}**" in page
    assert "is better than" not in page and "**Power.**" not in page and "No verdict" not in page
    html = build_report(study.experiment.path, reps=100).read_text()
    verdict = html[html.index('<section id="verdict">') :].split("</section>")[0]
    assert SMOKE_COMPARISON in verdict and "better" not in verdict and "power" not in verdict


def _capped_one_arm(tmp_path, env: str, skill: float, plan: dict | None = None):
    """One arm on ``env`` whose final evaluations all stopped at a cap of 100 steps (the synthetic
    episodes last 100 + k steps), 3 seeds."""
    arms = {"ppo": SyntheticArm(skill, {"algo": "ppo", "sampler": {"eval_max_steps": 100}})}
    exp = write_experiment(tmp_path, "exp", arms, [env], [0, 1, 2], n_logs=3, frameskip=1)
    if plan is not None:
        (exp / "plan.json").write_text(json.dumps(plan))
    return exp


def _row(html: str, table: str, arm: str) -> str:
    import re

    body = re.search(rf'<table id="{table}">.*?</table>', html, re.S).group(0)
    return next(row for row in re.findall(r"<tr>(.*?)</tr>", body, re.S) if f"<td>{arm}</td>" in row)


def test_cut_returns_of_a_positive_reward_env_are_lower_bounds_and_a_level_above_random_stands(tmp_path):
    """CartPole pays +1 per step: a return cut at the cap is at most the whole episode's, so a cut arm
    far above random play is shown to learn, and its figures carry the lower-bound mark."""
    from analysis.learning import LOWER, cut_bound

    assert cut_bound("CartPole-v1") == LOWER
    exp = _capped_one_arm(tmp_path, "CartPole-v1", 1.0)  # about 500: the reference
    study = run_study(exp, reps=300)
    assert study.learning.learned.all()
    assert study.learning.runs_cut.tolist() == [3] and study.learning.eval_cap.tolist() == [100]
    assert study.learning_lead is None
    assert "ppo/CartPole-v1/seed0" in study.cut_short and "lower bounds" in study.cut_short
    html = build_report(exp, reps=100).read_text()
    # Every run cut: the learning check's column counts them (it showed "–", as for no cut at all).
    assert "<td>3 of 3 at 100 steps</td>" in _row(html, "learning-table", "ppo")
    markdown = study_markdown(study, "cmd", "today")
    assert "| 3 of 3 at 100 steps |" in _md_row(markdown, "Learning check", "ppo")
    for table in ("learning-table", "aggregate-table", "final-table"):
        assert "<td>≥ " in _row(html, table, "ppo"), table
    assert "≥: evaluations cut at the harness&#39;s cap" in html and "≤:" not in html
    _assert_study_page_marks(study, "≥")


def _md_row(markdown: str, section: str, arm: str) -> str:
    """The first row of ``arm`` in the table under the study page's ``## section``."""
    part = markdown[markdown.index(f"## {section}") :]
    return next(line for line in part.splitlines() if line.startswith(f"| {arm} |"))


def _assert_study_page_marks(study, mark: str) -> None:
    """The study page marks the cut arm's figures as the report does and explains the mark once per
    table (learning check, aggregates, per game), and only that mark."""
    markdown = study_markdown(study, "cmd", "today")
    for section in ("Learning check", "Aggregates", "Per game"):
        assert f"| {mark} " in _md_row(markdown, section, "ppo"), section
    assert markdown.count(f"{mark}: evaluations cut at the harness's cap") == 3
    assert not ({"≥", "≤", "~"} - {mark}) & {line[:1] for line in markdown.splitlines()}


def test_cut_returns_of_a_negative_reward_env_are_upper_bounds_and_not_shown_to_learn(tmp_path):
    """Acrobot pays -1 per step: a return cut at the cap overstates the whole episode's (-200 where
    the whole one may be -500), so the arm is not shown to learn however high its interval, the one-arm
    verdict says so without a comparison, and every figure carries the upper-bound mark."""
    from analysis.learning import UPPER, cut_bound

    assert cut_bound("Acrobot-v1") == UPPER and cut_bound("MountainCar-v0") == UPPER
    exp = _capped_one_arm(tmp_path, "Acrobot-v1", -0.4)  # about -200: 70% of the reference
    study = run_study(exp, reps=300)
    (level,) = study.learning.itertuples()
    assert level.ci_low > 0 and not level.learned and level.eval_cap == 100
    assert study.learning_lead.startswith("ppo has not been shown to learn at this budget")
    assert "comparison" not in study.learning_lead
    assert "upper bounds" in study.cut_short
    html = build_report(exp, reps=100).read_text()
    for table in ("learning-table", "aggregate-table", "final-table"):
        assert "<td>≤ " in _row(html, table, "ppo"), table
    assert "aggregate-table" in html and "≤: evaluations cut" in html and "≥:" not in html
    assert "From evaluations cut at the harness&#39;s cap: ppo (≤)" in html  # the figures' captions
    _assert_study_page_marks(study, "≤")
    aggregates = _md_row(study_markdown(study, "cmd", "today"), "Aggregates", "ppo")
    assert aggregates.rstrip(" |").split(" | ")[-1].startswith("≥ ")  # the gap of an upper bound: lower


def test_minatar_and_atari_cuts_and_the_smoke_sentence(tmp_path):
    """MinAtar only adds reward (lower bound); Atari's rewards take both signs (unknown, ~); a smoke
    run's verdict opens by saying the profile says nothing about learning."""
    from analysis.learning import LOWER, SMOKE_SENTENCE, UNKNOWN, cut_bound, gap_bound

    assert cut_bound("minatar_breakout") == LOWER and cut_bound("pong") == UNKNOWN
    assert cut_bound("HalfCheetah-v5") == UNKNOWN and gap_bound(LOWER) == "upper"
    plan = {"plans": [{"plan": "ppo", "title": "t", "profile": "smoke", "arms": ["ppo"]}], "arms": ["ppo"]}
    exp = _capped_one_arm(tmp_path, "pong", 1.0, plan)
    html = build_report(exp, reps=100).read_text()
    assert "<td>~ " in _row(html, "aggregate-table", "ppo")
    verdict = html[html.index('<section id="verdict">') :]
    assert verdict.index(SMOKE_SENTENCE.replace("'", "&#39;")) < verdict.index("ppo has not been shown")
    study = run_study(exp, reps=100)
    _assert_study_page_marks(study, "~")
    page = study_markdown(study, "cmd", "today")
    assert page.index(f"**{SMOKE_SENTENCE}**") < page.index("ppo has not been shown")


def test_an_evaluation_ending_at_the_envs_own_time_limit_is_not_cut(tmp_path):
    """The cap equals the env's own limit (a classic-control smoke run: Acrobot's 500 steps, here
    max_episode_steps = 100): episodes of that length ended where the env ends them, and carry no mark."""
    from analysis.learning import capped_runs, env_time_limit

    assert env_time_limit({"kind": "gym", "id": "Acrobot-v1"}) == 500
    assert env_time_limit({"kind": "atari", "id": "pong"}) == 27_000
    assert env_time_limit({"kind": "minatar", "id": "minatar_breakout"}) is None
    env = {"id": "Acrobot-v1", "kind": "gym", "max_episode_steps": 100}
    arms = {"ppo": SyntheticArm(-0.4, {"algo": "ppo", "env": env, "sampler": {"eval_max_steps": 100}})}
    exp = write_experiment(tmp_path, "exp", arms, ["Acrobot-v1"], [0, 1, 2], n_logs=3, frameskip=1)
    for config_path in exp.glob("ppo/Acrobot-v1/seed*/config.json"):  # write_experiment sets env.id only
        config = json.loads(config_path.read_text())
        config["env"] = env
        config_path.write_text(json.dumps(config))
    study = run_study(exp, reps=200)
    assert capped_runs(study.experiment, study.scores) == {} and study.cut_short is None
    assert study.learning.learned.all()
