"""MinAtar: the env behind Contract 1, its EnvConfig checks, the MinAtar networks, the R2D1 arms at
MinAtar scale and a tiny end-to-end plan."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from algorithms.envs.config import EnvConfig
from algorithms.envs.factory import make_vec_env
from algorithms.envs.minatar import MINATAR_GAMES, MinAtarEnv, gym_id, register_envs
from algorithms.models.dqn_model import QNetwork
from algorithms.models.policies import ActorCritic
from algorithms.models.r2d1_model import R2D1Model
from algorithms.models.torsos import MinAtarConvTorso, build_torso
from algorithms.replay.observations import FrameObservations, FullObservations, observations_for
from repro.cli import main
from repro.inspect_settings import diff_rows, resolve_label

CHANNELS = {"asterix": 4, "breakout": 4, "freeway": 7, "seaquest": 10, "space_invaders": 6}
MINIMAL_ACTIONS = {"asterix": 5, "breakout": 3, "freeway": 3, "seaquest": 6, "space_invaders": 4}


def rollout(env: MinAtarEnv, seed: int, actions: list[int]) -> tuple[np.ndarray, list, list]:
    obs, _ = env.reset(seed=seed)
    observations, rewards, ends = [obs], [], []
    for a in actions:
        obs, r, terminated, truncated, _ = env.step(a)
        observations.append(obs)
        rewards.append(r)
        ends.append((terminated, truncated))
        if terminated or truncated:
            obs, _ = env.reset()
            observations.append(obs)
    return np.stack(observations), rewards, ends


@pytest.mark.parametrize("game", sorted(CHANNELS))
def test_spaces_channels_first_and_action_sets(game):
    env = MinAtarEnv(game)
    assert env.observation_space == gym.spaces.Box(0, 1, (CHANNELS[game], 10, 10), bool)
    assert env.action_space == gym.spaces.Discrete(6)  # Young & Tian 2019: all six actions
    assert MinAtarEnv(game, full_action_space=False).action_space.n == MINIMAL_ACTIONS[game]
    obs, _ = env.reset(seed=0)
    assert obs.shape == (CHANNELS[game], 10, 10) and obs.dtype == bool and obs.flags.c_contiguous
    assert obs.any()  # the player (at least) is on the board


@pytest.mark.parametrize("game", sorted(CHANNELS))
def test_same_seed_same_episodes(game):
    actions = np.random.default_rng(1).integers(6, size=300).tolist()
    first = rollout(MinAtarEnv(game), 7, actions)
    second = rollout(MinAtarEnv(game), 7, actions)
    assert np.array_equal(first[0], second[0]) and first[1:] == second[1:]
    other = rollout(MinAtarEnv(game), 8, actions)
    assert not (np.array_equal(first[0], other[0]) and first[1:] == other[1:])


def test_terminated_and_truncated_are_apart():
    # Breakout under random play loses the ball within a few dozen steps: a game over is terminal.
    env = MinAtarEnv("breakout")
    _, _, ends = rollout(env, 0, [0] * 200)
    assert (True, False) in ends and all(not tr for _, tr in ends)
    # A time limit truncates without terminating, at exactly max_episode_steps.
    env = MinAtarEnv("freeway", max_episode_steps=5)  # Freeway runs 2,500 steps before it ends
    _, _, ends = rollout(env, 0, [0] * 5)
    assert ends == [(False, False)] * 4 + [(False, True)]


def test_sticky_actions():
    actions = np.random.default_rng(0).integers(6, size=100).tolist()
    # Always sticky: every action repeats the previous one, which starts as the no-op.
    always = rollout(MinAtarEnv("breakout", sticky_action_prob=1.0), 3, actions)
    noop = rollout(MinAtarEnv("breakout", sticky_action_prob=1.0), 3, [0] * 100)
    assert np.array_equal(always[0], noop[0])
    never = rollout(MinAtarEnv("breakout", sticky_action_prob=0.0), 3, actions)
    noop = rollout(MinAtarEnv("breakout", sticky_action_prob=0.0), 3, [0] * 100)
    assert not np.array_equal(never[0][:20], noop[0][:20])  # the paddle moved
    # At 0.1 some but not all actions are replaced: trajectories part from the non-sticky ones.
    sticky = rollout(MinAtarEnv("breakout", sticky_action_prob=0.1), 3, actions)
    assert not np.array_equal(sticky[0], never[0])


def test_explicit_gymnasium_registration():
    register_envs()
    register_envs()  # twice is harmless
    env = gym.make(gym_id("minatar_seaquest"), disable_env_checker=True, full_action_space=False)
    assert env.unwrapped.game == "seaquest" and env.action_space.n == 6
    assert set(MINATAR_GAMES) == {f"minatar_{g}" for g in CHANNELS}


def test_vector_env_contract_1():
    config = EnvConfig(id="minatar_breakout", kind="minatar", repeat_action_probability=0.1)
    env = make_vec_env(config, 4, seed=3)
    assert env.frameskip == 1 and env.observation_space.shape == (4, 10, 10)
    obs = env.reset()
    rng = np.random.default_rng(0)
    ended = False
    for _ in range(300):
        out = env.step(rng.integers(3, size=4))
        done = out.terminated | out.truncated
        if done.any():
            i = int(np.flatnonzero(done)[0])
            # Same-step autoreset: the true last observation is kept apart from the next first one.
            assert not np.array_equal(out.observation[i], out.final_observation[i])
            assert out.env_info.episode_length[i] > 0
            ended = True
        assert np.array_equal(out.observation[~done], out.final_observation[~done])
        obs = out.observation
    assert ended and obs.dtype == bool
    again = make_vec_env(config, 4, seed=3).reset()
    assert np.array_equal(again, make_vec_env(config, 4, seed=3).reset())


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"id": "minatar_pong"}, "unknown MinAtar game 'minatar_pong'"),
        ({"id": "pong"}, "an Atari game?"),
        ({"frameskip": 2}, "EnvConfig.frameskip does not apply to MinAtar games"),
        ({"kind": "atari"}, "'minatar_breakout' is a MinAtar game, but the setting's env.kind is 'atari'"),
        ({"kind": "atari", "id": "pong", "difficulty_ramping": False}, "applies to MinAtar games only"),
    ],
)
def test_env_config_refuses_mixed_settings(fields, message):
    with pytest.raises(ValueError, match=message.replace("?", r"\?")):
        EnvConfig(**{"id": "minatar_breakout", "kind": "minatar", **fields})


def test_minatar_networks_shapes():
    obs = torch.zeros(5, 3, 7, 10, 10, dtype=torch.bool)
    assert MinAtarConvTorso((7, 10, 10), "valid", 128)(obs).shape == (5, 3, 128)
    assert MinAtarConvTorso((7, 10, 10), "valid", None).output_size == 16 * 8 * 8
    assert MinAtarConvTorso((7, 10, 10), "same", None)(obs).shape == (5, 3, 1600)
    assert build_torso((7, 10, 10), hidden_sizes=(64,), conv="flatten")(obs).shape == (5, 3, 64)
    # Young & Tian's DQN: conv 16 -> 128 -> 6; Revisiting Rainbow's: conv 16 SAME -> linear streams.
    young_tian = QNetwork((7, 10, 10), 6, hidden_size=128, conv_torso="minatar")
    assert young_tian(obs).shape == (5, 3, 6)
    assert [m.out_features for m in young_tian.modules() if isinstance(m, torch.nn.Linear)] == [128, 6]
    rainbow = QNetwork((7, 10, 10), 6, dueling=True, n_atoms=51, hidden_size=0, conv_torso="minatar_same")
    assert rainbow(obs).shape == (5, 3, 6, 51)
    assert [m.in_features for m in rainbow.modules() if isinstance(m, torch.nn.Linear)] == [1600, 1600]
    model = R2D1Model((7, 10, 10), 6, lstm_size=32, fc_size=0, head_hidden_size=16, conv_torso="minatar")
    q, state = model(obs, torch.zeros(5, 3, dtype=torch.long), torch.zeros(5, 3))
    assert q.shape == (5, 3, 6) and state.h.shape == (3, 32)
    assert model.lstm.input_size == 1024 + 6 + 1
    pi, v = ActorCritic(
        gym.spaces.Box(0, 1, (7, 10, 10), bool), gym.spaces.Discrete(6), (64, 64), conv_torso="flatten"
    )(obs)
    assert pi.logits.shape == (5, 3, 6) and v.shape == (5, 3)
    with pytest.raises(ValueError, match="too small for the Nature convs"):
        R2D1Model((7, 10, 10), 6, lstm_size=32, fc_size=0, head_hidden_size=16, conv_torso="nature")


def test_replay_keeps_minatar_maps_whole():
    assert isinstance(observations_for(np.zeros((4, 10, 10), bool)), FullObservations)
    assert isinstance(observations_for(np.zeros((4, 84, 84), np.uint8)), FrameObservations)
    assert isinstance(observations_for(np.zeros(4, np.float32)), FullObservations)


# The rows `repro diff` shows between the arms: the Atari pair's, with the same values, except the replay
# ratio (r2d1_minatar's, 32x R2D2's) and rlpyt's extra layer before the LSTM, which r2d1_minatar gives
# both arms (docs/results/r2d1_minatar_scale_sweep.md), so that it is no difference at MinAtar scale.
SCALED, SHARED = "algo.replay_ratio", "algo.fc_size"


def test_minatar_arms_differ_exactly_as_the_atari_arms():
    atari = diff_rows(resolve_label("rlpyt_r2d1_published"), resolve_label("r2d1_corrected"))
    minatar = diff_rows(
        resolve_label("rlpyt_r2d1_minatar_published"), resolve_label("r2d1_minatar_corrected")
    )
    atari_rows = {key: (a.value, b.value) for key, a, b in atari}
    minatar_rows = {key: (a.value, b.value) for key, a, b in minatar}
    assert set(minatar_rows) == set(atari_rows) - {SHARED}
    for key in set(atari_rows) - {SCALED, SHARED}:
        assert minatar_rows[key] == atari_rows[key], key
    # Both replay ratios scaled by the same factor: rlpyt's 1.0 with burn-in against R2D2's 0.8.
    (pa, ca), (pm, cm) = atari_rows[SCALED], minatar_rows[SCALED]
    assert pm / pa == pytest.approx(cm / ca)
    # The layer both MinAtar arms have is rlpyt's, sized as the LSTM (512 = the LSTM at Atari scale).
    for arm in ("rlpyt_r2d1_minatar_published", "r2d1_minatar_corrected"):
        entries = resolve_label(arm).entries
        assert entries["algo.fc_size"].value == entries["algo.lstm_size"].value == 128, arm


def test_done_bug_arm_is_the_corrected_arm_with_only_the_done_bug():
    """The budget study's third arm (plan r2d1_minatar_budget) names r2d1_minatar as its base, since a
    base may not have a base; it must still differ from r2d1_minatar_corrected in that one key, at the
    published arm's value."""
    corrected = resolve_label("r2d1_minatar_corrected")
    rows = diff_rows(corrected, resolve_label("r2d1_minatar_corrected_nstep_done_bug"))
    published = resolve_label("rlpyt_r2d1_minatar_published").entries["algo.nstep_done_bug"].value
    assert {key: (a.value, b.value) for key, a, b in rows} == {"algo.nstep_done_bug": (False, published)}
    assert published is True


@pytest.mark.parametrize("arm", ["r2d1_minatar_corrected", "rlpyt_r2d1_minatar_published"])
def test_minatar_cpu_1m_is_minatar_cpu_at_four_times_the_budget(arm):
    """The budget study's profile changes only the budget and when it is written down and evaluated
    (docs/results/r2d1_minatar_budget.md): evaluations at 250k, 500k, 750k and 1M, checkpoints as often
    as minatar_cpu's."""
    rows = diff_rows(resolve_label(f"{arm}@minatar_cpu"), resolve_label(f"{arm}@minatar_cpu_1m"))
    assert {key: (a.value, b.value) for key, a, b in rows} == {
        "runner.n_steps": (250_000, 1_000_000),
        "runner.log_interval_steps": (25_000, 100_000),
        "runner.checkpoint_interval_steps": (0, 25_000),  # 0: at every log row, 25k in minatar_cpu
        "runner.eval_interval_steps": (0, 250_000),
    }
    sampler = resolve_label(f"{arm}@minatar_cpu_1m").entries
    batch = sampler["sampler.batch_T"].value * sampler["sampler.batch_B"].value
    assert 250_000 % batch == 0  # each evaluation lands on its boundary, not a batch past it


@pytest.mark.parametrize(
    "argv, message",
    [
        (["r2d1_minatar_published_vs_corrected", "--games", "pong"], "unknown MinAtar game 'pong'"),
        (["r2d1", "--games", "minatar_breakout"], "is a MinAtar game, but the setting's env.kind is 'atari'"),
        (
            ["r2d1_minatar_published_vs_corrected", "--games", "minatar_chess"],
            "unknown MinAtar game 'minatar_chess'",
        ),
    ],
)
def test_plan_refuses_mixed_games(argv, message, tmp_path, capsys):
    root = tmp_path / "runs"
    assert main(["run", *argv, "--seeds", "1", "--profile", "smoke", "--root", str(root), "--no-probe"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not root.exists()


def test_plan_refuses_a_model_that_cannot_take_the_observations(tmp_path, capsys):
    setting = tmp_path / "r2d1_nature_on_minatar.toml"
    setting.write_text(
        '[setting]\ntitle = "t"\ncitation = "c"\nbase = "r2d1_minatar"\n'
        '[algo]\nconv_torso = { value = "nature", source = "test" }\n'
    )
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'[plan]\ntitle = "t"\narms = ["{setting}"]\nenvs = ["minatar_breakout"]\nenvs_source = "test"\n'
    )
    root = tmp_path / "runs"
    assert (
        main(["run", str(plan), "--seeds", "1", "--profile", "smoke", "--root", str(root), "--no-probe"]) == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "r2d1_nature_on_minatar" in err and "minatar_breakout" in err and "too small" in err
    assert not root.exists()


@pytest.mark.slow
def test_tiny_minatar_plan_end_to_end(tmp_path):
    root = tmp_path / "runs"
    argv = [
        "run",
        "r2d1_minatar_published_vs_corrected",
        "--seeds",
        "1",
        "--profile",
        "smoke",
        "--games",
        "minatar_breakout",
    ]
    assert main([*argv, "--root", str(root), "--exp", "e", "--no-progress", "--no-probe"]) == 0
    for arm in ("rlpyt_r2d1_minatar_published", "r2d1_minatar_corrected"):
        run = root / "e" / arm / "minatar_breakout" / "seed0"
        assert json.loads((run / "status.json").read_text())["state"] == "complete"
        config = json.loads((run / "config.json").read_text())
        assert config["env"]["kind"] == "minatar" and config["algo_config"]["conv_torso"] == "minatar"
        rows = (run / "progress.csv").read_text().splitlines()
        assert len(rows) >= 2
