"""What the SB3 run is, as ``bench.sb3_ppo_atari`` runs it: rl-baselines3-zoo's PPO settings for
Atari, SB3's AtariWrapper defaults as this harness's EnvConfig names them, and the driver's checks
of its arguments (``Refused``: a request it refuses). Nothing here imports Stable-Baselines3; the
record side (``bench.sb3_record``) reads these settings.
"""

from __future__ import annotations

import re

FRAMESKIP = 4  # SB3 AtariWrapper frame_skip default (MaxAndSkipEnv)
N_ENVS = 8  # ppo.yml atari n_envs
N_STACK = 4  # ppo.yml atari frame_stack
RESERVED_SEEDS = range(200, 300)  # kept for outside checks
ZOO_SOURCE = (
    "rl-baselines3-zoo hyperparams/ppo.yml 'atari' (DLR-RM/rl-baselines3-zoo @ 00128b5); "
    "every other PPO argument at Stable-Baselines3's default; env: make_atari_env + VecFrameStack(4)"
)
# rl-baselines3-zoo's ppo.yml 'atari' entry as PPO keyword arguments (lin_X: a linear schedule from X
# to 0 over learn's total_timesteps; see bench.sb3_record.ZooLinear).
# repro/configs/settings/ppo_atari_zoo.toml maps each to this harness's names.
ZOO_PPO = {
    "policy": "CnnPolicy",
    "n_steps": 128,
    "n_epochs": 4,
    "batch_size": 256,
    "learning_rate": 2.5e-4,  # lin_2.5e-4
    "clip_range": 0.1,  # lin_0.1
    "vf_coef": 0.5,
    "ent_coef": 0.01,
}
LINEAR_KEYS = ("learning_rate", "clip_range")
# SB3 AtariWrapper's defaults as this harness's EnvConfig names them; the driver checks them against
# the installed SB3 (``atari_wrapper_defaults``) before it writes anything.
ATARI_ENV = {
    "kind": "atari",
    "frameskip": FRAMESKIP,
    "frame_size": 84,
    "frame_stack": N_STACK,
    "noop_max": 30,
    "repeat_action_probability": 0.0,  # NoFrameskip-v4: no sticky actions
    "full_action_space": False,  # v4 ids: the minimal action set
    "fire_reset": True,
    "clip_rewards": True,  # the reward trained on; progress.csv holds unclipped game scores
    "episodic_life": True,
    "max_episode_frames": 108_000,  # ale-py 0.12 registers the v4 ids with max_num_frames_per_episode
}
# SB3 AtariWrapper argument -> (ATARI_ENV key, how the value reads there).
ATARI_WRAPPER_ARGS = {
    "noop_max": ("noop_max", int),
    "frame_skip": ("frameskip", int),
    "screen_size": ("frame_size", int),
    "terminal_on_life_loss": ("episodic_life", bool),
    "clip_reward": ("clip_rewards", bool),
    "action_repeat_probability": ("repeat_action_probability", float),
}


class Refused(ValueError):
    """A request this driver refuses; ``str`` is the one line printed (exit 2)."""


# --- arguments ---------------------------------------------------------------------------------


def check_seed(seed: int) -> int:
    if seed < 0:
        raise Refused(f"--seed {seed}: seeds are >= 0")
    if seed in RESERVED_SEEDS:
        raise Refused(
            f"--seed {seed}: seeds {RESERVED_SEEDS.start}-{RESERVED_SEEDS.stop - 1} are reserved for outside "
            "checks; pick another"
        )
    return seed


def check_game(game: str) -> str:
    """The harness's env id of ``game`` (ALE's rom id: ``pong``, ``space_invaders``); ``Pong`` and
    ``SpaceInvaders`` are read as those."""
    env = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", game).lower()
    if not re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", env):
        raise Refused(f"--game {game!r}: expected an Atari game as ALE names it, e.g. pong, breakout")
    return env


def gym_id(env: str) -> str:
    """The gymnasium id the zoo trains ``env`` under: ``pong`` -> ``PongNoFrameskip-v4``."""
    return "".join(part.capitalize() for part in env.split("_")) + "NoFrameskip-v4"


def check_name(flag: str, name: str) -> str:
    if not name or name in (".", "..") or "/" in name or name.strip() != name:
        raise Refused(f"{flag} {name!r}: expected a directory name")
    return name


def check_budget(steps: int, anneal_steps: int, threads: int, log_interval: int) -> None:
    for flag, value in (("--steps", steps), ("--anneal-steps", anneal_steps), ("--threads", threads),
                        ("--log-interval", log_interval)):  # fmt: skip
        if value < 1:
            raise Refused(f"{flag} {value}: must be >= 1")
    if steps > anneal_steps:
        raise Refused(
            f"--steps {steps:,} is past --anneal-steps {anneal_steps:,}: the run is a prefix of the "
            "annealed one"
        )
