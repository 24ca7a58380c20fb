"""Whether each arm learned: its level against random play and against a published reference at the
same frames, the check every verdict opens with (``analysis.verdict.learning_sentence``).

On every comparable scale random play is 0 (``analysis.curves``: human-, DQN- and reference-normalised
scores subtract random play). The reference, per env, on the same scale:

* MinAtar: Young & Tian's (2019) DQN learning curve read at the frames the runs reached
  (``analysis.scores.published_at``, never extrapolated: NaN outside the read-off points);
* Atari-57: R2D2's Table 4 score, from about 10B frames (a ratio far below 1 may only mean a
  smaller budget; the note says so);
* gymnasium envs: the published reference score of the bounds table, 1 by construction (the zoo's or
  CleanRL's trained agents, ``analysis/data/gym_reference_scores.csv``).

``learning_table`` gives per arm and env its mean over that env's complete runs with the 95% t
interval (``env_levels``), whether that interval lies above random play, and the reference there: a
run added or missing on one env never changes the check on another (balancing across envs is for the
aggregates, which list the runs it leaves out).

Evaluation episodes cut at the harness's cap (``capped_runs``: ``sampler.eval_max_steps``, e.g. the
smoke profile's 200 steps, reached before the env's own end) are read by the sign of the env's rewards
(``cut_bound``): where every reward is >= 0 (CartPole, MinAtar) a cut return is a lower bound of the
whole episode's, so a level shown above random play stands; where every reward is <= 0 (Acrobot,
MountainCar, Pendulum) it is an upper bound and overstates the level (a cut Acrobot episode of an
untrained agent scores -200 where the whole one scores -500); elsewhere (Atari's Pong: -1 per point
lost; a cut Pong episode of an untrained agent scores about half of human, measured on `make
reproduce-r2d1 PROFILE=smoke` runs) it is on no known side. An arm with cut runs whose returns are not
lower bounds is not shown to learn whatever its interval (``arm_caps``), and every figure from cut
runs carries ``CUT_MARKS``' mark where it is shown (``cut_bounds``, ``arm_cut_bounds``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import verdict
from analysis.curves import EVAL_SOURCE, Scores
from analysis.intervals import mean_interval
from analysis.runs import KEYS, Experiment
from analysis.scores import (
    atari_game,
    human_random_table,
    is_minatar,
    minatar_published_curves,
    minatar_reference_table,
    published_at,
    r2d2_published_scores,
)

# ``runs_cut``: the runs whose final evaluations stopped at the cap (``capped_runs``), whatever side
# their returns lie on; ``eval_cap``: that cap (NaN when no run was cut).
LEARNING_COLUMNS = [
    "arm", "env", "runs", "mean", "ci_low", "ci_high", "runs_cut", "eval_cap", "learned", "reference",
    "share_of_reference",
]  # fmt: skip


def capped_runs(exp: Experiment, scores: Scores) -> dict[tuple[str, str, int], int]:
    """``{(arm, env, seed): cap}`` of the runs whose final evaluation episodes stopped at the harness's
    cap (``sampler.eval_max_steps``, e.g. the smoke profile's 200 steps) below the env's own time
    limit (``env_time_limit``; an episode at a cap equal to it ended where the env ends it):
    their returns are cut short, on another scale than random play and the reference, which ran whole
    episodes."""
    if (
        exp.eval.empty
        or not {"length", "env_steps"} <= set(exp.eval)
        or EVAL_SOURCE not in set(scores.final.source)
    ):
        return {}
    last = exp.eval.merge(scores.final[KEYS + ["env_steps"]], on=KEYS + ["env_steps"])
    capped = {}
    for run, g in last.groupby(KEYS):
        config = exp.configs.get(run, {})
        cap = config.get("sampler", {}).get("eval_max_steps")
        limit = env_time_limit(config.get("env", {}))
        if isinstance(cap, int) and (limit is None or cap < limit) and (g.length >= cap).any():
            capped[run] = cap
    return capped


def env_time_limit(env: dict) -> int | None:
    """The env's own episode limit in env steps, from a run's config.json ``env``: its
    ``max_episode_steps``, else for Atari ``max_episode_frames`` / ``frameskip`` (the defaults of
    ``algorithms.envs.config.EnvConfig`` where absent), else gymnasium's registered time limit; None
    when there is none (an episode that reaches the cap there was cut by it)."""
    if env.get("max_episode_steps"):
        return int(env["max_episode_steps"])
    kind, env_id = env.get("kind", "atari"), env.get("id")
    if kind == "atari":
        return int(env.get("max_episode_frames", 108_000)) // int(env.get("frameskip", 4))
    if kind != "gym" or not env_id:
        return None
    import gymnasium

    try:
        return gymnasium.spec(env_id).max_episode_steps
    except gymnasium.error.Error:  # an id this gymnasium does not register
        return None


# What a return cut at the cap is, given the sign of the env's rewards (``cut_bound``).
LOWER, UPPER, UNKNOWN = "lower", "upper", "unknown"
# The mark a cut figure carries, and what it means (the report's legend).
CUT_MARKS = {LOWER: "≥", UPPER: "≤", UNKNOWN: "~"}
CUT_MEANINGS = {
    LOWER: "evaluations cut at the harness's cap; the env's rewards are >= 0, so whole episodes score at "
    "least this (a lower bound)",
    UPPER: "evaluations cut at the harness's cap; the env's rewards are <= 0, so whole episodes score at "
    "most this (an upper bound: it overstates the level)",
    UNKNOWN: "evaluations cut at the harness's cap; the env's rewards take both signs, so whole episodes "
    "may score more or less than this",
}
# The sign of each env's rewards, as the env's source defines them (gymnasium 1.x no longer declares a
# reward range, so it cannot be derived from the env): gymnasium/envs/classic_control/cartpole.py
# ("a reward of +1 is given for every step taken"), acrobot.py (-1 per step until the goal, 0 there),
# mountain_car.py (-1 per step), pendulum.py (-(theta^2 + 0.1 theta_dt^2 + 0.001 torque^2)).
# MountainCarContinuous (+100 at the goal less an action cost), Box2D, MuJoCo and Atari rewards take
# both signs: unknown, the default.
REWARD_BOUNDS = {
    "CartPole-v0": LOWER,
    "CartPole-v1": LOWER,
    "Acrobot-v1": UPPER,
    "MountainCar-v0": UPPER,
    "Pendulum-v1": UPPER,
}


def cut_bound(env: str) -> str:
    """What an evaluation return of ``env`` cut at the cap is of the whole episode's: ``LOWER`` where
    the rewards are >= 0 (``REWARD_BOUNDS``; MinAtar's games only ever add reward, each game's ``act``
    adds 1 per event, ``r+=1``, in minatar/environments/*.py), ``UPPER`` where they are <= 0,
    ``UNKNOWN`` otherwise."""
    if is_minatar(env):
        return LOWER
    return REWARD_BOUNDS.get(env, UNKNOWN)


def cut_returns_are_lower_bounds(env: str) -> bool:
    """Whether an evaluation episode of ``env`` cut at the cap returns at most what the whole episode
    would (``cut_bound``)."""
    return cut_bound(env) == LOWER


def cut_bounds(exp: Experiment, scores: Scores) -> dict[tuple[str, str], str]:
    """``{(arm, env): cut_bound(env)}`` of the arms and envs with a run cut at the cap
    (``capped_runs``): their figures carry ``CUT_MARKS``' mark."""
    return {(arm, env): cut_bound(env) for arm, env, _ in capped_runs(exp, scores)}


def arm_cut_bounds(bounds: dict[tuple[str, str], str]) -> dict[str, str]:
    """Arm -> what its figures over envs (aggregates, profiles, the learning check) are, from
    ``cut_bounds``: ``LOWER`` (``UPPER``) when every cut env's returns are lower (upper) bounds, since
    the IQM, mean and median grow with each run's score; ``UNKNOWN`` when they mix."""
    by_arm: dict[str, set[str]] = {}
    for (arm, _), bound in bounds.items():
        by_arm.setdefault(arm, set()).add(bound)
    return {arm: found.pop() if len(found) == 1 else UNKNOWN for arm, found in by_arm.items()}


def marked(text: str, bound: str | None) -> str:
    """``text`` with the mark of ``bound`` in front (unchanged for an uncut figure, ``None``)."""
    return text if bound is None else f"{CUT_MARKS[bound]} {text}"


def cut_legend(bounds) -> list[str]:
    """One sentence per cut mark among ``bounds`` (``CUT_MARKS``): what it means (the report's and the
    study page's legend)."""
    return [f"{CUT_MARKS[b]}: {CUT_MEANINGS[b]}." for b in CUT_MARKS if b in set(bounds)]


def metric_bound(metric: str, bound: str | None) -> str | None:
    """The bound of an aggregate ``metric`` (``analysis.aggregate.METRICS``) over scores cut with
    ``bound``: the optimality gap's is ``gap_bound``'s, the others' ``bound`` itself."""
    return gap_bound(bound) if metric == "Optimality gap" else bound


def gap_bound(bound: str | None) -> str | None:
    """The bound of an optimality gap (1 - score, clipped) computed from scores cut with ``bound``: a
    lower bound of the score is an upper bound of its gap, and the other way round."""
    return {LOWER: UPPER, UPPER: LOWER}.get(bound, bound)


def cut_short_note(exp: Experiment, scores: Scores) -> str | None:
    """What a summary says of the runs whose final evaluations stopped at the harness's cap (None:
    none did): how many, at which cap, and what their returns are of whole episodes'."""
    capped = capped_runs(exp, scores)
    if not capped:
        return None
    caps = ", ".join(str(c) for c in sorted(set(capped.values())))
    said = (
        f"{len(capped)} of {len(scores.final)} runs ended final evaluation episodes at the harness's cap "
        f"(sampler.eval_max_steps = {caps} steps) before the env's own end"
    )
    parts = []
    for bound, what in (
        (LOWER, "their returns are lower bounds of whole episodes' (the env's rewards are >= 0), so an "
         "arm's level stands as a lower bound"),
        (UPPER, "their returns are upper bounds of whole episodes' (the env's rewards are <= 0): they "
         "overstate the level, so such an arm is not shown to learn"),
        (UNKNOWN, "their returns are cut short, not on the scale of random play and the reference, which "
         "played whole episodes (the env's rewards take both signs)"),
    ):  # fmt: skip
        runs = [f"{arm}/{env}/seed{seed}" for arm, env, seed in sorted(capped) if cut_bound(env) == bound]
        if runs:
            parts.append(f"{', '.join(runs)} ({CUT_MARKS[bound]} in the tables): {what}")
    return f"{said}: " + "; ".join(parts) + "."


def env_caps(exp: Experiment, scores: Scores) -> dict[tuple[str, str], int]:
    """``(arm, env)`` -> the cap its capped runs' evaluations stopped at (``capped_runs``), from the runs
    whose cut returns are not lower bounds (``cut_bound``): such an arm is not shown to learn there."""
    capped = sorted(capped_runs(exp, scores).items())
    return {(arm, env): cap for (arm, env, _), cap in capped if not cut_returns_are_lower_bounds(env)}


def arm_caps(exp: Experiment, scores: Scores) -> dict[str, int]:
    """Arm -> a cap of ``env_caps`` on any of its envs: its IQM over games is not on random play's
    scale."""
    return {arm: cap for (arm, _), cap in env_caps(exp, scores).items()}


def reference_levels(scores: Scores, table: str = "r2d2") -> tuple[dict[str, float], str]:
    """``({env: normalised reference}, what the reference is)`` for the envs of ``scores.final`` (NaN
    where nothing was published there); empty for the min-max fallback."""
    final = scores.final
    frames = final.groupby("env").frames.median()
    if scores.reference == "dqn":
        curves = minatar_published_curves()
        curves = curves[curves.algo.str.lower() == "dqn"]
        minatar = minatar_reference_table()
        levels = {
            env: float(minatar.normalise(env, published_at(curves[curves.env == env], f)["return"]))
            for env, f in frames.items()
        }
        return levels, "Young & Tian's (2019) DQN at the same frames (read off the paper's curves)"
    if scores.reference == "human":
        published = r2d2_published_scores().set_index("game").r2d2_score
        hr = human_random_table(table)
        levels = {}
        for env in frames.index:
            game = atari_game(env)
            known = game in published.index
            levels[env] = float(hr.normalise(game, published[game])) if known else np.nan
        return levels, "R2D2's Table 4 score (about 10B frames, not these frames)"
    if scores.reference == "reference" and scores.bounds is not None:
        return {
            env: 1.0 for env in frames.index
        }, f"the published reference score ({scores.bounds.path.name})"
    return {}, "none (scores normalised within the experiment)"


def env_levels(final: pd.DataFrame, caps: dict[tuple[str, str], int] | None = None) -> list[verdict.ArmLevel]:
    """Each arm's level on each env from that env's complete runs alone (``final``: arm, env, seed,
    normalised): the mean normalised final score with its 95% t interval
    (``analysis.intervals.mean_interval``), so that runs added or dropped on another env never change
    it; ``caps``: ``env_caps``."""
    caps = caps or {}
    out = []
    for (arm, env), runs in final.groupby(["arm", "env"], sort=True):
        values = runs.normalised.to_numpy(float)
        lo, hi = mean_interval(values)
        cap = caps.get((arm, env))
        out.append(verdict.ArmLevel(arm, float(values.mean()), float(lo), float(hi), cap, env))
    return out


def learning_table(
    scores: Scores, levels: list[verdict.ArmLevel], capped: dict[tuple[str, str, int], int]
) -> tuple[pd.DataFrame, str]:
    """``(LEARNING_COLUMNS per arm and env, what the reference is)`` for ``env_levels``' ``levels``,
    each beside the reference on its env and its share of it; ``capped``: ``capped_runs``."""
    references, what = reference_levels(scores)
    counts = scores.final.groupby(["arm", "env"]).size()
    rows = []
    for level in levels:
        reference = references.get(level.env, np.nan)
        share = level.value / reference if np.isfinite(reference) and reference > 0 else np.nan
        caps = [cap for (arm, env, _), cap in capped.items() if (arm, env) == (level.arm, level.env)]
        rows.append([level.arm, level.env, int(counts[(level.arm, level.env)]), level.value, level.ci_low,
                     level.ci_high, len(caps), max(caps, default=np.nan), level.learned, reference,
                     share])  # fmt: skip
    return pd.DataFrame(rows, columns=LEARNING_COLUMNS), what


def cut_text(runs_cut: int, runs: int, cap: float) -> str:
    """A learning table row's cut evaluations as a report and a study page show them: "3 of 3 at 200
    steps", or "none"."""
    return f"{runs_cut} of {runs} at {int(cap)} steps" if runs_cut else "none"


# The shipped profile that tests the pipeline, not the algorithm (repro/configs/profiles/smoke.toml).
SMOKE_PROFILE = "smoke"
SMOKE_SENTENCE = (
    "Smoke profile: says nothing about learning (a few thousand env steps per job test the pipeline, not "
    "the algorithm; repro/configs/profiles/smoke.toml)."
)
# What a smoke report says in place of a comparison: no winner, no power statement.
SMOKE_COMPARISON = "Smoke: no comparison."


def smoke_sentence(plan: dict | None) -> str | None:
    """``SMOKE_SENTENCE`` when a plan of the experiment's record (``repro/record.py``) ran the smoke
    profile; None otherwise."""
    entries = (plan or {}).get("plans")
    if isinstance(entries, list) and any(
        isinstance(e, dict) and e.get("profile") == SMOKE_PROFILE for e in entries
    ):
        return SMOKE_SENTENCE
    return None
