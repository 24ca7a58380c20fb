"""Typed environment configuration: what game or task, which backend, which Atari protocol.

The Atari defaults are the protocol of Mnih et al. 2015 (Nature DQN, "Methods: preprocessing"),
which R2D2 (Kapturowski et al. 2019, Appendix, Table 3 "Atari pre-processing") keeps: 4 frames
per action with a max over the last two, 84x84 grayscale, a stack of 4, up to 30 no-op starts,
episodes capped at 108,000 frames (30 minutes of play). Sticky actions (Machado et al. 2018) are
explicit: R2D2 used none (0.0), gymnasium's ``ALE/*-v5`` default is 0.25, so the field has no
silent default from either library.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, fields
from typing import Literal

from algorithms.configs import MINATAR_PREFIX

EnvKind = Literal["atari", "gym", "minatar"]
EnvBackend = Literal["native", "gymnasium"]

ENV_KINDS: tuple[str, ...] = ("atari", "gym", "minatar")
# Fields a gymnasium id ignores: setting one of them for a gymnasium id is an error, not a no-op.
ATARI_ONLY_FIELDS: tuple[str, ...] = (
    "frameskip",
    "frame_size",
    "frame_stack",
    "noop_max",
    "repeat_action_probability",
    "full_action_space",
    "fire_reset",
    "episodic_life",
    "max_episode_frames",
    "num_threads",
)
BACKENDS: tuple[str, ...] = ("native", "gymnasium")
# The fields a MinAtar game takes (algorithms/envs/minatar.py); the rest must keep their defaults.
MINATAR_FIELDS: tuple[str, ...] = (
    "id",
    "kind",
    "repeat_action_probability",
    "full_action_space",
    "difficulty_ramping",
    "max_episode_steps",
    "clip_rewards",
)


@dataclass(frozen=True)
class EnvConfig:
    """One environment setting. Validated when built: a bad field raises a one-line ``ValueError``.

    ``id``: an ALE game in snake_case (``"pong"``, ``"chopper_command"``) when ``kind="atari"``;
    any registered gymnasium id (``"CartPole-v1"``, ``"HalfCheetah-v5"``) when ``kind="gym"``;
    a MinAtar game (``"minatar_breakout"``, ...: ``algorithms.envs.minatar.MINATAR_GAMES``) when
    ``kind="minatar"``, which takes only ``MINATAR_FIELDS``: ``repeat_action_probability`` is MinAtar's
    sticky-action probability (0.1 in Young & Tian 2019), ``full_action_space`` all 6 actions (as
    published) or the game's minimal set, ``max_episode_steps`` an optional training time limit.

    ``backend`` (Atari only): ``"native"`` is ale-py's threaded C++ ``AtariVectorEnv`` (the fast
    path); ``"gymnasium"`` steps one ``ALE/<Game>-v5`` env per batch entry in a Python loop with the
    same preprocessing written in numpy (the reference path). Non-Atari ids always use gymnasium.
    """

    id: str
    kind: EnvKind = "atari"
    backend: EnvBackend = "native"

    # --- Atari protocol (Mnih et al. 2015; R2D2 Table 3) ----------------------------------------
    frameskip: int = 4  # emulator frames per env step; the observation is the max of the last two
    frame_size: int = 84  # square grayscale frames, area-resampled from 210x160
    frame_stack: int = 4
    noop_max: int = 30  # uniform 0..noop_max-1 no-op frames after each reset (ale-py's rule); 0 = none
    repeat_action_probability: float = 0.0  # sticky actions; R2D2: 0.0, Machado et al. 2018: 0.25
    full_action_space: bool = False  # False: the game's minimal action set
    fire_reset: bool = False  # press FIRE at reset, counted as one of the no-ops (ale-py's rule)
    clip_rewards: bool = False  # learner reward clipped to [-1, 1]; the raw one kept in env_info
    # Life loss is always reported as env_info.life_loss; with episodic_life it also sets
    # `terminated` (the game itself continues, Mnih et al. 2015's training trick). R2D2: off.
    episodic_life: bool = False
    max_episode_frames: int = 108_000  # truncation (not termination) after this many frames of play
    num_threads: int = 0  # native backend worker threads; 0 lets ale-py choose

    # --- gymnasium ids and MinAtar -------------------------------------------------------------------
    max_episode_steps: int | None = None  # TimeLimit override; None keeps the id's registered limit
    mask_velocity: bool = False  # partially observed variant: see algorithms/envs/pomdp.py
    difficulty_ramping: bool = True  # MinAtar only: games speed up over an episode (the package default)

    def __post_init__(self) -> None:
        if self.kind not in ENV_KINDS:
            raise ValueError(f"EnvConfig.kind must be one of {ENV_KINDS}, got {self.kind!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"EnvConfig.backend must be one of {BACKENDS}, got {self.backend!r}")
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"EnvConfig.id must be a non-empty string, got {self.id!r}")
        if self.kind == "minatar":
            _check_minatar_game(self.id)
            for f in fields(self):
                if f.name not in MINATAR_FIELDS and getattr(self, f.name) != f.default:
                    raise ValueError(f"EnvConfig.{f.name} does not apply to MinAtar games ({self.id!r})")
        elif self.kind == "atari":
            _check_atari_game(self.id)
            if self.mask_velocity:
                raise ValueError("EnvConfig.mask_velocity applies to gymnasium ids, not Atari games")
            if self.max_episode_steps is not None:
                raise ValueError(
                    "EnvConfig.max_episode_steps is for gymnasium ids; Atari uses max_episode_frames"
                )
        else:
            _check_gym_id(self.id)
            for f in fields(self):
                if f.name in ATARI_ONLY_FIELDS and getattr(self, f.name) != f.default:
                    raise ValueError(f"EnvConfig.{f.name} applies to Atari games only, not to {self.id!r}")
        if self.kind != "minatar" and self.difficulty_ramping is not True:
            raise ValueError(
                f"EnvConfig.difficulty_ramping applies to MinAtar games only, not to {self.id!r}"
            )
        _check_int("frameskip", self.frameskip, minimum=1)
        _check_int("frame_size", self.frame_size, minimum=1)
        if self.frame_size > 160:
            raise ValueError(
                f"EnvConfig.frame_size must be <= 160 (frames are downsampled), got {self.frame_size}"
            )
        _check_int("frame_stack", self.frame_stack, minimum=1)
        _check_int("noop_max", self.noop_max, minimum=0)
        _check_int("max_episode_frames", self.max_episode_frames, minimum=1)
        _check_int("num_threads", self.num_threads, minimum=0)
        if self.max_episode_steps is not None:
            _check_int("max_episode_steps", self.max_episode_steps, minimum=1)
        p = self.repeat_action_probability
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
            raise ValueError(f"EnvConfig.repeat_action_probability must be a number in [0, 1], got {p!r}")
        for name in (
            "full_action_space",
            "fire_reset",
            "clip_rewards",
            "episodic_life",
            "mask_velocity",
            "difficulty_ramping",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"EnvConfig.{name} must be a bool, got {getattr(self, name)!r}")

    @property
    def native_atari(self) -> bool:
        """ale-py's threaded vector env (``make_vec_env`` builds it for this config): its own threads
        step the envs between ``send_step`` and ``receive_step``, so they can serve as a sampler's
        env workers (``SamplerConfig.env_workers="threads"``)."""
        return self.kind == "atari" and self.backend == "native"

    @property
    def env_frameskip(self) -> int:
        """Frames per env step as step accounting counts them: ``frameskip`` for Atari, 1 otherwise."""
        return self.frameskip if self.kind == "atari" else 1


def applicable_fields(config: EnvConfig) -> dict[str, object]:
    """The fields of ``config`` its kind uses, as a dict (config.json's ``env``): a gymnasium id
    leaves out ``ATARI_ONLY_FIELDS`` and a MinAtar game keeps ``MINATAR_FIELDS``, whose other fields
    hold defaults it never reads (CartPole's ``frameskip`` 4 against the 1 its progress rows log).
    Reading the file back restores them from the defaults."""
    values = dataclasses.asdict(config)
    if config.kind == "gym":
        return {k: v for k, v in values.items() if k not in ATARI_ONLY_FIELDS}
    if config.kind == "minatar":
        return {k: v for k, v in values.items() if k in MINATAR_FIELDS}
    return values


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"EnvConfig.{name} must be an integer >= {minimum}, got {value!r}")


# ale-py and gymnasium are imported where validation needs them, so that importing this module
# (e.g. to read a config.json) does not load the emulator or the gymnasium registry.


def atari_game_ids() -> list[str]:
    """The snake_case games ale-py ships ROMs for (``pong``, ``chopper_command``, ...)."""
    from ale_py import roms

    return list(roms.get_all_rom_ids())


def _check_minatar_game(env_id: str) -> None:
    from algorithms.envs.minatar import MINATAR_GAMES

    if env_id not in MINATAR_GAMES:
        hint = (
            "; an Atari game? the setting's env.kind is 'minatar'"
            if not env_id.startswith(MINATAR_PREFIX)
            else ""
        )
        raise ValueError(
            f"EnvConfig.id: unknown MinAtar game {env_id!r} (one of {', '.join(MINATAR_GAMES)}){hint}"
        )


def _check_atari_game(game: str) -> None:
    if game.startswith(MINATAR_PREFIX):
        raise ValueError(
            f"EnvConfig.id: {game!r} is a MinAtar game, but the setting's env.kind is 'atari' "
            "(a MinAtar setting has env.kind = 'minatar')"
        )
    games = atari_game_ids()
    if game not in games:
        close = difflib.get_close_matches(game.lower().replace("-", "_"), games, n=3, cutoff=0.6)
        hint = f"; close matches: {close}" if close else ""
        raise ValueError(
            f"EnvConfig.id: unknown Atari game {game!r} (ALE snake_case, e.g. 'ms_pacman'){hint}"
        )


def _check_gym_id(env_id: str) -> None:
    import gymnasium as gym

    if env_id.startswith("ALE/"):
        import ale_py

        gym.register_envs(ale_py)
    if env_id not in gym.envs.registry:
        close = difflib.get_close_matches(env_id, list(gym.envs.registry), n=3, cutoff=0.6)
        hint = f"; close matches: {close}" if close else ""
        raise ValueError(f"EnvConfig.id: {env_id!r} is not a registered gymnasium id{hint}")
