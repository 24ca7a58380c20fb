"""Reference score tables and score normalisation.

Atari-57: human-normalised score (Mnih et al. 2015, "Methods: evaluation procedure"; the convention of
every Atari-57 aggregate since):

    hns = (score - random) / (human - random)

as a fraction (1.0 = human level); reports print it as a percentage. The two named tables differ
only in Video Pinball's random score (see ``data/SOURCES.md``): ``"r2d2"`` uses 0.0, as the
MuZero/Agent57 table and the R2D2 / Ape-X aggregates do; ``"dqn_zoo"`` uses 16256.9.

MinAtar (env ids ``minatar_<game>``): DQN-normalised score

    dqn_normalised = (score - random) / (dqn_5m - random)

1.0 = Young & Tian's DQN after 5 million frames (Young & Tian 2019, arXiv:1903.03176, Sec. 4 and
their learning-curve figures). No human scores exist for MinAtar: the paper publishes no human
baseline, and Atari's human scores do not carry over to the 10x10 games, so the reference is the
strongest published agent at the paper's own budget, the role the human score plays for Atari-57.
The table (``data/minatar_reference_scores.csv``) keeps the figure-reading range of each DQN value
(``dqn_5m_low``, ``dqn_5m_high``) and the source of every number.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from algorithms.configs import MINATAR_PREFIX, ConfigError
from protocol.limits import Limit, check_limit, gib
from protocol.stats import RESAMPLE_BYTES

HUMAN_RANDOM_FILE = "atari57_human_random.csv"
VARIANTS_FILE = "atari57_human_random_variants.csv"
R2D2_SCORES_FILE = "r2d2_atari57_scores.csv"
DATA_DIR = Path(str(resources.files("analysis").joinpath("data")))
# Read at call time, so a test can point them at a fixture table.
MINATAR_REFERENCE_PATH = DATA_DIR / "minatar_reference_scores.csv"
MINATAR_CURVES_PATH = DATA_DIR / "minatar_published_curves.csv"
MINATAR_REFERENCE_COLUMNS = (
    "env", "random", "random_source", "dqn_5m", "dqn_5m_low", "dqn_5m_high", "dqn_5m_source", "frames",
)  # fmt: skip
MINATAR_CURVES_COLUMNS = (
    "env",
    "algo",
    "frames",
    "return",
    "return_low",
    "return_high",
    "source",
    "protocol",
)

# R2D2 Table 1 aggregates over the 57 games (percent of human).
R2D2_PUBLISHED_MEDIAN_HNS_PERCENT = 1920.6
R2D2_PUBLISHED_MEAN_HNS_PERCENT = 4024.9


def read_data_csv(name: str) -> pd.DataFrame:
    """A CSV shipped in ``analysis/data``."""
    with resources.files("analysis").joinpath("data", name).open("rb") as f:
        return pd.read_csv(f)


@dataclass(frozen=True)
class HumanRandomTable:
    """Per-game random and human scores, indexed by ALE snake_case game name."""

    name: str
    description: str
    scores: pd.DataFrame  # index: game; columns: random, human

    def normalise(self, game: str, score: np.ndarray | float) -> np.ndarray:
        """Human-normalised score (fraction, 1.0 = human) of raw ``score`` on ``game``."""
        if game not in self.scores.index:
            raise KeyError(f"game {game!r} is not in the Atari-57 table {self.name!r}")
        random, human = self.scores.loc[game, ["random", "human"]]
        return (np.asarray(score, dtype=float) - random) / (human - random)


# Fewer resamples give percentile intervals whose ends move with the seed of the bootstrap.
MIN_REPS = 100
REPS_LIMIT = Limit(
    "--reps",
    50_000,
    "rliable's default number of bootstrap resamples",
    lambda reps: f"its resamples would take {gib(RESAMPLE_BYTES * reps)} for each run of the experiment",
)


def check_reps(reps: int) -> None:
    """``ConfigError`` (one line) unless ``MIN_REPS <= reps <= REPS_LIMIT.most``: the check of
    ``--reps`` of every command that scores an experiment, before it reads anything."""
    if reps < MIN_REPS:
        raise ConfigError(f"--reps must be at least {MIN_REPS}, got {reps}")
    check_limit(REPS_LIMIT, reps)


def add_scoring_options(parser: argparse.ArgumentParser) -> None:
    """The options of every command that scores an experiment (``python -m analysis study``,
    ``python -m reports build``): bootstrap resamples (``check_reps``) and the Atari-57 human/random
    table."""
    parser.add_argument(
        "--reps", type=int, default=2000, help="bootstrap resamples per interval (default 2000)"
    )
    parser.add_argument(
        "--table",
        choices=("r2d2", "dqn_zoo"),
        default="r2d2",
        help="Atari-57 human/random table; they differ in Video Pinball's random score (0.0 vs 16256.9)",
    )


@cache
def human_random_table(name: str = "r2d2") -> HumanRandomTable:
    """The Atari-57 human/random table ``name``: ``"r2d2"`` (Video Pinball random 0.0) or ``"dqn_zoo"``."""
    base = read_data_csv(HUMAN_RANDOM_FILE).set_index("game")
    if name == "dqn_zoo":
        return HumanRandomTable(
            name, "dqn_zoo atari_data.py (Video Pinball random 16256.9)", base[["random", "human"]]
        )
    if name == "r2d2":
        variants = read_data_csv(VARIANTS_FILE)
        vp = variants[(variants.game == "video_pinball") & (variants.field == "random")]
        scores = base[["random", "human"]].copy()
        scores.loc["video_pinball", "random"] = float(vp.alternative_value.iloc[0])
        return HumanRandomTable(
            name,
            "dqn_zoo atari_data.py with Video Pinball random 0.0 "
            "(MuZero/Agent57 table; R2D2 and Ape-X aggregates)",
            scores,
        )
    raise ValueError(f"unknown human/random table {name!r}; known: 'r2d2', 'dqn_zoo'")


@cache
def r2d2_published_scores() -> pd.DataFrame:
    """R2D2 Table 4: columns ``game, r2d2_score, r2d2_hns_percent, source, protocol``."""
    return read_data_csv(R2D2_SCORES_FILE)[["game", "r2d2_score", "r2d2_hns_percent", "source", "protocol"]]


_ALE_ID = re.compile(r"^(?:ALE/)?(?P<name>[A-Za-z0-9_]+?)(?:NoFrameskip)?(?:-v\d+)?$")


def atari_game(env: str) -> str | None:
    """The Atari-57 snake_case name of an env label (``pong``, ``Pong``, ``ALE/ChopperCommand-v5``),
    or None when ``env`` is not one of the 57 games (``CartPole-v1``)."""
    match = _ALE_ID.match(env)
    if match is None:
        return None
    name = match.group("name")
    if "_" not in name:
        name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    name = name.lower()
    return name if name in human_random_table("dqn_zoo").scores.index else None


def is_minatar(env: str) -> bool:
    """Whether ``env`` is a MinAtar game id (``minatar_breakout``)."""
    return env.startswith(MINATAR_PREFIX)


def _read_checked(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    table = pd.read_csv(path)
    absent = [c for c in columns if c not in table]
    if absent:
        raise ValueError(f"{path}: missing columns {absent}; expected {list(columns)}")
    return table


@dataclass(frozen=True)
class DqnRandomTable:
    """Per-game random and DQN-at-5M-frames scores of MinAtar, indexed by env id
    (columns of ``MINATAR_REFERENCE_COLUMNS`` but ``env``)."""

    path: Path
    scores: pd.DataFrame

    @property
    def description(self) -> str:
        return f"random and Young & Tian 2019's DQN at 5M frames from {self.path.name}"

    def normalise(self, env: str, score: np.ndarray | float) -> np.ndarray:
        """DQN-normalised score (fraction, 1.0 = DQN at 5M frames) of raw ``score`` on MinAtar ``env``."""
        if env not in self.scores.index:
            raise KeyError(f"env {env!r} is not in the MinAtar reference table {self.path}")
        random, dqn = self.scores.loc[env, ["random", "dqn_5m"]]
        return (np.asarray(score, dtype=float) - random) / (dqn - random)


def minatar_reference_table(path: Path | str | None = None) -> DqnRandomTable:
    """The MinAtar random / DQN-at-5M table (default ``MINATAR_REFERENCE_PATH``).

    Raises ``FileNotFoundError`` when the file is absent and ``ValueError`` when it lacks a column or a
    game's DQN score equals its random score (no scale to normalise by)."""
    path = Path(path) if path is not None else MINATAR_REFERENCE_PATH
    table = _read_checked(path, MINATAR_REFERENCE_COLUMNS).set_index("env")
    flat = table.index[table.dqn_5m == table.random].tolist()
    if flat:
        raise ValueError(f"{path}: dqn_5m equals random for {flat}: no normalisation scale")
    return DqnRandomTable(path, table[list(MINATAR_REFERENCE_COLUMNS[1:])])


def minatar_published_curves(path: Path | str | None = None) -> pd.DataFrame:
    """Published MinAtar learning curves read off the papers' figures (default ``MINATAR_CURVES_PATH``):
    ``env, algo, frames, return, return_low, return_high, source, protocol``, sorted by env, algo, frames.

    Raises ``ValueError`` when a column is missing or an (env, algo) curve repeats a frame count."""
    path = Path(path) if path is not None else MINATAR_CURVES_PATH
    table = _read_checked(path, MINATAR_CURVES_COLUMNS)[list(MINATAR_CURVES_COLUMNS)]
    repeated = table[table.duplicated(["env", "algo", "frames"])][["env", "algo", "frames"]]
    if len(repeated):
        raise ValueError(f"{path}: repeated (env, algo, frames) rows: {repeated.values.tolist()}")
    return table.sort_values(["env", "algo", "frames"]).reset_index(drop=True)


def published_at(curve: pd.DataFrame, frames: float) -> dict[str, float]:
    """One published curve (rows of one env and algo) read at ``frames``: ``return``, ``return_low``,
    ``return_high`` linearly interpolated between the two read-off points around it, and the
    ``source`` of those points. NaN outside the read-off range: the curve is never extrapolated."""
    curve = curve.sort_values("frames")
    x = curve.frames.to_numpy(float)
    inside = len(x) > 0 and x[0] <= frames <= x[-1]
    out = {
        column: float(np.interp(frames, x, curve[column].to_numpy(float))) if inside else float("nan")
        for column in ("return", "return_low", "return_high")
    }
    if not inside:
        span = f"{x[0]:,.0f} to {x[-1]:,.0f}" if len(x) else "none"
        return {**out, "source": f"no published point around {frames:,.0f} frames (read-off range: {span})"}
    right = int(np.searchsorted(x, frames))  # first point at or after ``frames``
    used = curve.iloc[[right] if x[right] == frames else [right - 1, right]]
    out["source"] = "; ".join(dict.fromkeys(used.source.astype(str)))
    return out


# Gymnasium envs (classic control, Box2D, MuJoCo): random play measured here and a published reference
# score per env (``data/gym_reference_scores.csv``; ``analysis/random_scores.py`` measures the random
# column): reference-normalised score = (score - random) / (reference - random), 1.0 = the reference.
GYM_REFERENCE_PATH = DATA_DIR / "gym_reference_scores.csv"
GYM_REFERENCE_COLUMNS = (
    "env", "random", "random_std", "random_episodes", "random_source", "reference", "reference_source",
)  # fmt: skip


@dataclass(frozen=True)
class Bounds:
    """Per-env score bounds: ``low`` (random play) maps to 0 and ``high`` (the reference) to 1.
    ``scores`` is indexed by env with columns ``low, high, low_source, high_source``; ``path`` is the
    file they came from and ``description`` says what they are, for the report."""

    path: Path
    description: str
    scores: pd.DataFrame

    def normalise(self, env: str, score: np.ndarray | float) -> np.ndarray:
        low, high = self.scores.loc[env, ["low", "high"]]
        return (np.asarray(score, dtype=float) - low) / (high - low)

    def covers(self, envs: list[str]) -> list[str]:
        """The envs of ``envs`` these bounds lack."""
        return [e for e in envs if e not in self.scores.index]


def _checked_bounds(path: Path, description: str, table: pd.DataFrame) -> Bounds:
    if table.index.duplicated().any():
        raise ValueError(f"{path}: env {table.index[table.index.duplicated()][0]!r} appears twice")
    bad = table.index[~(np.isfinite(table.low) & np.isfinite(table.high)) | (table.low >= table.high)]
    if len(bad):
        row = table.loc[bad[0]]
        raise ValueError(f"{path}: env {bad[0]!r}: needs finite bounds low < high, got {row.low}, {row.high}")
    return Bounds(path, description, table)


def gym_reference_bounds(path: Path | str | None = None) -> Bounds:
    """The shipped gymnasium table as ``Bounds`` (random play -> 0, the published reference -> 1)."""
    path = Path(path) if path is not None else GYM_REFERENCE_PATH
    table = _read_checked(path, GYM_REFERENCE_COLUMNS).set_index("env")
    scores = pd.DataFrame(
        {
            "low": pd.to_numeric(table.random, errors="coerce"),
            "high": pd.to_numeric(table.reference, errors="coerce"),
            "low_source": table.random_source.astype(str),
            "high_source": table.reference_source.astype(str),
        }
    )
    return _checked_bounds(
        path, f"random play and a published reference score per env from {path.name}", scores
    )


BOUNDS_FILE_KEYS = ("env", "score_min", "score_max")


def read_bounds(path: Path | str) -> Bounds:
    """Score bounds from a file (``reports build --bounds FILE``): a CSV with columns ``env, score_min,
    score_max`` (optionally ``source``), a TOML file of ``[[env]]`` or ``[[task]]`` tables with the same
    keys (``score_source`` for the source; a regression suite's task format), or a table in the
    shipped gymnasium format (``random``, ``reference``). A missing or unreadable file, a missing
    column or key, or bounds that are not finite with min < max raise ``ValueError`` naming the file."""
    import tomllib

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"bounds file {path} does not exist")
    if path.suffix == ".toml":
        try:
            data = tomllib.loads(path.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not a TOML file: {e}") from None
        entries = data.get("env", data.get("task"))
        if not isinstance(entries, list) or not entries:
            raise ValueError(
                f"{path}: expected [[env]] (or [[task]]) tables with {', '.join(BOUNDS_FILE_KEYS)}"
            )
        for i, entry in enumerate(entries):
            absent = [k for k in BOUNDS_FILE_KEYS if k not in entry]
            if absent:
                raise ValueError(f"{path}: entry {i + 1} lacks {absent}")
        table = pd.DataFrame(
            {
                "env": [e["env"] for e in entries],
                "low": [float(e["score_min"]) for e in entries],
                "high": [float(e["score_max"]) for e in entries],
                "source": [str(e.get("score_source", path.name)) for e in entries],
            }
        ).drop_duplicates()
    else:
        try:
            raw = pd.read_csv(path)
        except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as e:
            raise ValueError(f"{path}: not a CSV file: {e}") from None
        if set(GYM_REFERENCE_COLUMNS) <= set(raw.columns):
            return gym_reference_bounds(path)
        absent = [c for c in BOUNDS_FILE_KEYS if c not in raw.columns]
        if absent:
            raise ValueError(f"{path}: missing columns {absent}; expected {list(BOUNDS_FILE_KEYS)}[, source]")
        table = pd.DataFrame(
            {
                "env": raw.env.astype(str),
                "low": pd.to_numeric(raw.score_min, errors="coerce"),
                "high": pd.to_numeric(raw.score_max, errors="coerce"),
                "source": raw["source"].astype(str) if "source" in raw else path.name,
            }
        )
    table = table.set_index("env").rename(columns={"source": "low_source"})
    table["high_source"] = table.low_source
    return _checked_bounds(path, f"score bounds per env from {path}", table)
