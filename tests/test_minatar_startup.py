"""MinAtar's games without the ``minatar`` package's plotting import: the same episodes as
``minatar.Environment``, no matplotlib or seaborn loaded, and a stop signal that arrives while a
MinAtar env is being made stops the process (the package's bare ``except:`` around that import
swallowed it: docs/results/run_integrity.md)."""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from interrupts import sigint_default

from algorithms.envs.minatar import MINATAR_GAMES, MinAtarEnv

REPO = Path(__file__).resolve().parents[1]


def reference_rollout(game: str, seed: int, actions: list[int], sticky: float, ramping: bool, minimal: bool):
    """The episodes ``minatar.Environment`` gives for ``actions`` (indices into the action set)."""
    from minatar import Environment

    env = Environment(game, sticky_action_prob=sticky, difficulty_ramping=ramping)
    action_set = env.minimal_action_set() if minimal else list(range(6))
    env.seed(seed)
    env.reset()
    observations, steps = [env.state().transpose(2, 0, 1)], []
    for a in actions:
        reward, terminal = env.act(action_set[a])
        steps.append((float(reward), bool(terminal)))
        observations.append(env.state().transpose(2, 0, 1))
        if terminal:
            env.reset()
            observations.append(env.state().transpose(2, 0, 1))
    return np.stack(observations), steps


def our_rollout(game: str, seed: int, actions: list[int], sticky: float, ramping: bool, minimal: bool):
    env = MinAtarEnv(
        game, sticky_action_prob=sticky, difficulty_ramping=ramping, full_action_space=not minimal
    )
    obs, _ = env.reset(seed=seed)
    observations, steps = [obs], []
    for a in actions:
        obs, reward, terminated, truncated, _ = env.step(a)
        assert not truncated
        steps.append((reward, terminated))
        observations.append(obs)
        if terminated:
            obs, _ = env.reset()
            observations.append(obs)
    return np.stack(observations), steps


@pytest.mark.parametrize("game", sorted(MINATAR_GAMES.values()))
@pytest.mark.parametrize(
    "sticky, ramping, minimal",
    [(0.1, True, False), (0.0, True, False), (0.5, False, False), (0.1, True, True)],
    ids=["published", "no-sticky", "no-ramping", "minimal-actions"],
)
def test_same_episodes_as_minatar_environment(game, sticky, ramping, minimal):
    n_actions = MinAtarEnv(game, full_action_space=not minimal).action_space.n
    actions = np.random.default_rng(3).integers(n_actions, size=3000).tolist()
    ours = our_rollout(game, 11, actions, sticky, ramping, minimal)
    theirs = reference_rollout(game, 11, actions, sticky, ramping, minimal)
    assert ours[0].dtype == theirs[0].dtype == bool
    assert np.array_equal(ours[0], theirs[0]) and ours[1] == theirs[1]
    assert sum(terminal for _, terminal in ours[1]) >= (0 if game == "freeway" else 2)  # several episodes


def test_a_game_pickles_and_keeps_its_state():
    env = MinAtarEnv("seaquest")
    env.reset(seed=5)
    for a in range(20):
        env.step(a % 6)
    copy = pickle.loads(pickle.dumps(env))
    actions = np.random.default_rng(0).integers(6, size=200).tolist()
    assert np.array_equal(
        np.stack([env.step(a)[0] for a in actions]), np.stack([copy.step(a)[0] for a in actions])
    )


def test_making_stepping_and_checkpointing_every_game_loads_no_plotting_library_and_no_ale():
    """Also a checkpoint's pickling of the envs (``algorithms.resume``): pickle imports the module of
    every class it names, and naming a game's class would run the ``minatar`` package's ``__init__``.
    ale-py is Atari's alone: a machine without it runs MinAtar (docs/results/gpu_tier.md)."""
    code = textwrap.dedent(
        """
        import sys
        import algorithms.train
        from algorithms.envs.config import EnvConfig
        from algorithms.envs.factory import make_vec_env
        from algorithms.envs.minatar import MINATAR_GAMES, MinAtarEnv
        from algorithms.resume import pickle_objects, unpickle_objects
        for game in MINATAR_GAMES.values():
            env = MinAtarEnv(game)
            env.reset(seed=0)
            env.step(1)
            unpickle_objects(pickle_objects([env]))[0].step(1)
        make_vec_env(EnvConfig(id="minatar_breakout", kind="minatar"), 2, 0).reset()
        loaded = ("matplotlib", "seaborn", "minatar.environment", "ale_py")
        print(sorted(m for m in loaded if m in sys.modules))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# A job's start as far as its env: what runs when a MinAtar run begins. The SIGINT (a Ctrl-C, or the
# parent-death signal of a job whose scheduler died) is sent DELAY s after the imports, while the envs
# are made; the old path imported matplotlib and seaborn there for ~1.7 s, inside a bare ``except:``.
STARTING_JOB = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    import algorithms.train
    from algorithms.envs.minatar import MINATAR_GAMES, MinAtarEnv
    threading.Timer(float(sys.argv[1]), lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    envs = [MinAtarEnv(game) for game in MINATAR_GAMES.values()]
    for env in envs:
        env.reset(seed=0)
    time.sleep(30)
    print("survived SIGINT", flush=True)
    """
)


@pytest.mark.parametrize("delay_s", [0.05, 0.2, 0.4, 0.8])
def test_sigint_while_the_minatar_envs_are_made_stops_the_process(delay_s):
    proc = subprocess.run(
        [sys.executable, "-c", STARTING_JOB, str(delay_s)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        preexec_fn=sigint_default,
    )
    assert "survived SIGINT" not in proc.stdout
    assert proc.returncode in (1, -signal.SIGINT) and "KeyboardInterrupt" in proc.stderr, proc.stderr
