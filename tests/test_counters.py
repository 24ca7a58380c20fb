"""Step accounting with hand-computed values."""

import pytest

from algorithms.counters import Counters


def test_r2d1_replay_ratio_both_countings():
    # 64 sequences x (80 trained + 40 burn-in) per update, 7,680 env steps per update.
    c = Counters(frameskip=4)
    for _ in range(3):
        c.add_env_steps(7680)
        c.add_updates(1, samples_trained=64 * 80, samples_replayed=64 * 120)
    assert c.env_steps == 23040 and c.frames == 92160 and c.updates == 3
    assert c.replay_ratio_trained == pytest.approx(2 / 3)
    assert c.replay_ratio_with_burnin == pytest.approx(1.0)


def test_throughput_excludes_eval_and_logging():
    c = Counters(frameskip=4)
    c.add_env_steps(1000, episodes=2)
    c.time_sampling_s, c.time_optimizing_s = 1.5, 0.5
    c.time_evaluating_s, c.time_logging_s = 100.0, 10.0
    assert c.steps_per_second == pytest.approx(500.0)
    assert c.frames_per_second == pytest.approx(2000.0)
    assert c.episodes == 2 and c.sampler_itrs == 1


def test_timer_adds_to_category_and_rejects_unknown():
    c = Counters()
    with c.timer("optimizing"):
        pass
    assert c.time_optimizing_s > 0 and c.time_sampling_s == 0
    with pytest.raises(ValueError, match="unknown time category"):
        with c.timer("napping"):
            pass


def test_state_dict_round_trip_keeps_wall_time():
    c = Counters(frameskip=4, env_steps=100, updates=7, samples_trained=50, samples_replayed=80)
    state = c.state_dict()
    d = Counters.from_state_dict(state)
    assert d.env_steps == 100 and d.updates == 7 and d.frames == 400
    assert d.wall_time_s >= state["wall_time_before_resume_s"]
    with pytest.raises(KeyError, match="unknown"):
        Counters.from_state_dict({**state, "bogus": 1})


def test_invalid_inputs():
    with pytest.raises(ValueError, match="frameskip"):
        Counters(frameskip=0)
    with pytest.raises(ValueError, match="burn-in"):
        Counters().add_updates(1, samples_trained=10, samples_replayed=5)
    assert Counters().replay_ratio_trained == 0.0 and Counters().steps_per_second == 0.0


def test_snapshot_has_all_columns():
    row = Counters(frameskip=4, env_steps=8).snapshot()
    for key in (
        "env_steps",
        "frames",
        "updates",
        "samples_trained",
        "samples_replayed",
        "replay_ratio_trained",
        "replay_ratio_with_burnin",
        "time_sampling_s",
        "time_optimizing_s",
        "time_evaluating_s",
        "time_logging_s",
        "wall_time_s",
        "steps_per_second",
    ):
        assert key in row
    assert row["frames"] == 32
