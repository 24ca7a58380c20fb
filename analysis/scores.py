"""Reference score tables and score normalisation.

Human-normalised score (Mnih et al. 2015, "Methods: evaluation procedure"; the convention of
every Atari-57 aggregate since):

    hns = (score - random) / (human - random)

as a fraction (1.0 = human level); reports print it as a percentage. The two named tables differ
only in Video Pinball's random score (see ``data/SOURCES.md``): ``"r2d2"`` uses 0.0, as the
MuZero/Agent57 table and the R2D2 / Ape-X aggregates do; ``"dqn_zoo"`` uses 16256.9.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np
import pandas as pd

HUMAN_RANDOM_FILE = "atari57_human_random.csv"
VARIANTS_FILE = "atari57_human_random_variants.csv"
R2D2_SCORES_FILE = "r2d2_atari57_scores.csv"

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
    """R2D2 Table 4: columns ``game, r2d2_score, r2d2_hns_percent, source``."""
    return read_data_csv(R2D2_SCORES_FILE)[["game", "r2d2_score", "r2d2_hns_percent", "source"]]


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
