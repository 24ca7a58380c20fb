"""What a run ends with (``python -m analysis ending runs/<experiment>``; ``repro run`` prints it
after its jobs, before the report command):

* one line per arm and env: the mean final evaluation return with its 95% bootstrap interval over
  seeds (the experiment's score, ``analysis.curves``) and the mean last training return (over the
  last episodes, ``analysis.published.last_training_returns``) with its interval beside it;
* the verdict of two arms (``analysis.verdict``), or with one arm or a sweep the learning check;
* where the experiment compares two arms, at the profile, on the env of a difference a
  pre-registered run confirmed (``data/confirmed_differences.csv``), its own difference beside that
  one, read as a replication: the same direction? inside the confirmed interval? with its own Welch
  t interval (the confirmed endpoint's test).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from analysis import aggregate
from analysis.curves import EVAL_SOURCE
from analysis.intervals import mean_interval
from analysis.learning import smoke_sentence
from analysis.published import last_training_returns
from analysis.scores import DATA_DIR
from analysis.study import Study
from protocol.plan_args import parse_seeds, seeds_text
from protocol.stats import CI_SIZE

CONFIRMED_PATH = DATA_DIR / "confirmed_differences.csv"
CONFIRMED_COLUMNS = (
    "env", "profile", "baseline", "candidate", "difference", "ci_low", "ci_high", "interval", "p_holm",
    "seeds", "runs_per_arm", "experiment", "source",
)  # fmt: skip


def _num(x: float) -> str:
    return f"{x:.2f}"


def _signed(x: float) -> str:
    return f"{x:+.2f}"


def confirmed_differences(path=None) -> pd.DataFrame:
    """The confirmed differences table (``CONFIRMED_COLUMNS``); ``ValueError`` naming the file and the
    columns it lacks."""
    path = CONFIRMED_PATH if path is None else path
    table = pd.read_csv(path)
    missing = [c for c in CONFIRMED_COLUMNS if c not in table]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}")
    return table


def score_lines(study: Study) -> list[str]:
    """One line per arm and env: mean final score [95% CI over seeds] and mean last training return."""
    final = study.scores.final
    if final.empty:
        return ["no complete run yet: no score"]
    what = "final evaluation" if (final.source == EVAL_SOURCE).all() else "final training return"
    summary = aggregate.per_game_summary(final)
    training = last_training_returns(study.experiment)
    lines = []
    for row in summary.itertuples():
        runs = f"{row.n_runs} seed{'s' if row.n_runs != 1 else ''}"
        interval = f" [{_num(row.ci_low)}, {_num(row.ci_high)}]" if row.n_runs > 1 else ""
        line = f"{row.arm} on {row.env}: {what} {_num(row.score)}{interval}"
        mine = training[(training.arm == row.arm) & (training.env == row.env)].sort_values("seed")
        if what == "final evaluation" and len(mine):
            line += f", training {_num(mine.score.mean())}{_interval(mine.score.to_numpy(float))}"
        lines.append(f"{line} ({runs}, {human_frames(row.frames)} frames)")
    return lines


def _interval(values: np.ndarray) -> str:
    """`` [low, high]``: the 95% t interval of the mean over seeds (``analysis.intervals``, as every
    per-arm interval); nothing for one seed."""
    if len(values) < 2:
        return ""
    low, high = mean_interval(values)
    return f" [{_num(float(low))}, {_num(float(high))}]"


def human_frames(frames: float) -> str:
    return f"{frames / 1e6:.3g}M" if frames >= 1e6 else f"{frames / 1e3:.3g}k"


def verdict_line(study: Study) -> str:
    """The two-arm verdict's sentence, else the learning check; led by the smoke profile's caveat."""
    if study.verdict is not None:
        text = study.verdict.sentence
    elif study.learning_lead:
        text = study.learning_lead
    elif len(study.learning):
        text = "Learning check: every arm's IQM interval lies above random play (0)."
    else:
        text = "Learning check: none (no fixed scale for these envs' scores)."
    lead = smoke_sentence(study.experiment.plan)
    return f"{lead} {text}" if lead else text


def _profiles(plan: dict | None) -> set[str]:
    return {str(e.get("profile")) for e in (plan or {}).get("plans", []) if isinstance(e, dict)}


def _device(study: Study) -> str:
    config = study.experiment.config
    devices = set(config.loc[config.key == "runner.device", "value"]) if len(config) else set()
    return "a GPU" if any(str(d).startswith("cuda") for d in devices) else "a CPU"


def replication_lines(study: Study, confirmed: pd.DataFrame) -> list[str]:
    """Per confirmed difference this experiment also measures (same arms, env and profile): its own
    candidate-minus-baseline difference of mean final returns with a Welch t 95% interval, beside the
    confirmed one, and whether the two agree in direction and whether its point lies inside the
    confirmed interval. Seeds shared with the confirmatory run make it a rerun, said so."""
    final = study.scores.final
    profiles = _profiles(study.experiment.plan)
    lines = []
    for ref in confirmed.itertuples():
        if ref.profile not in profiles:
            continue
        here = final[final.env == ref.env]
        a = here[here.arm == ref.baseline].sort_values("seed")
        b = here[here.arm == ref.candidate].sort_values("seed")
        if len(a) < 2 or len(b) < 2:
            continue
        difference = float(b.score.mean() - a.score.mean())
        test = stats.ttest_ind(b.score.to_numpy(float), a.score.to_numpy(float), equal_var=False)
        low, high = test.confidence_interval(CI_SIZE)
        seeds = sorted(set(a.seed) | set(b.seed))
        shared = set(seeds) & set(parse_seeds(str(ref.seeds)))
        kind = "a rerun on seeds of the confirmatory run" if shared else f"a replication on {_device(study)}"
        same = np.sign(difference) == np.sign(ref.difference)
        inside = ref.ci_low <= difference <= ref.ci_high
        lines.append(
            f"{kind} (seeds {seeds_text(seeds)}, {len(b)} vs {len(a)} runs): {ref.candidate} minus "
            f"{ref.baseline} on {ref.env} is {_signed(difference)} [{_signed(low)}, {_signed(high)}] "
            f"returns (Welch t {CI_SIZE:.0%} interval)"
        )
        theirs = f"{_signed(ref.difference)} [{_signed(ref.ci_low)}, {_signed(ref.ci_high)}]"
        lines.append(
            f"  the confirmatory run: {theirs} ({ref.interval}; seeds {ref.seeds}, Holm p {ref.p_holm:g}; "
            f"{ref.source.split(',')[0]}): "
            f"{'same direction' if same else 'the opposite direction'}, "
            f"{'inside' if inside else 'outside'} its interval"
        )
    return lines


def ending_lines(study: Study, confirmed: pd.DataFrame | None = None) -> list[str]:
    """The scores, the verdict or learning check, and any replication lines, in that order."""
    confirmed = confirmed_differences() if confirmed is None else confirmed
    return score_lines(study) + [verdict_line(study)] + replication_lines(study, confirmed)
