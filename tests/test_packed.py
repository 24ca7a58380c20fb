"""Packed runs (``algorithms.packed``): member k of a pack computes what a single run with
seed k computes, update for update.

**Exactly** (bit for bit): everything on the env side and in the replay: episode returns and
lengths, the replay's stored arrays and its selector's random state (so every minibatch draw), and
every counter. **Within a float tolerance**: network parameters after every iteration and the loss
diagnostics. The packed update runs the member's own loss under ``torch.func.vmap``, whose batched
kernels (grouped convolutions, batched matrix products) may sum in another order than the single
run's; float32 rounding of such sums is ~1e-7 relative per operation, and over these few updates the
largest difference seen is 3e-8 (DDPG; most are below 1e-8). The bound, 1e-5
absolute on parameters (|w| <= ~1) and 1e-4 relative on diagnostics, keeps that margin more than 300-fold
while any coupling between members would show at the size of an optimizer step (learning rates of
2.5e-4 to 1e-3 here), far above it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import torch

from algorithms.packed.learners import PackedQLearner
from algorithms.packed.optim import MemberOptimizer, stacked_optimizer
from algorithms.packed.pack import check_packable, train_packed
from algorithms.packed.runner import PackedRunner, PackMismatch
from algorithms.packed.stack import StackedParameters, clip_member_gradients
from algorithms.rundir import read_run
from algorithms.runners.sync import SyncRunner
from algorithms.train import train
from tests.test_train_algorithms import CASES, MASKED_CARTPOLE, REPLAY, tiny

SEEDS = (0, 1, 2)
ATOL, RTOL = 1e-5, 1e-4
PACKABLE = (
    "dqn",
    "dqn_double_dueling_prioritized_3step",
    "c51",
    "rainbow",
    "r2d1",
    "ppo",
    "ddpg",
    "td3",
    "sac",
    "r2d1_time_limits",
)
# R2D1 with a time limit of 12 steps: the trained windows of every minibatch hold time limits, so the
# loss bootstraps from final observations, a branch the packed learner decides outside the transform
# (``r2d1.loss_mode`` with ``traced``: every step's values, kept by ``torch.where``) and the single run
# at the steps ``loss_mode`` finds.
EXTRA = {
    "r2d1_time_limits": dataclasses.replace(
        CASES["r2d1"][0], env=dataclasses.replace(MASKED_CARTPOLE, max_episode_steps=12)
    )
}


def seeded(config, seeds=SEEDS):
    return [dataclasses.replace(config, runner=dataclasses.replace(config.runner, seed=s)) for s in seeds]


def snapshot(runner) -> dict[str, np.ndarray]:
    return {name: p.detach().clone().numpy() for name, p in runner.agent.model.named_parameters()}


def run_packed(configs, iterations):
    """(runner, per-iteration parameter snapshots of every member) of ``iterations`` packed iterations."""
    runner = PackedRunner.build(configs, [None] * len(configs), [None] * len(configs))
    runner.start()
    snapshots = []
    for _ in range(iterations):
        runner.iteration(list(range(len(configs))))
        snapshots.append([snapshot(m) for m in runner.members])
    return runner, snapshots


def run_single(config, iterations):
    runner = SyncRunner.build(config, None, None)
    runner.sampler.initialize()
    snapshots = []
    for itr in range(iterations):
        runner.iteration(itr)
        snapshots.append(snapshot(runner))
    return runner, snapshots


def replay_state(algo) -> tuple[list[np.ndarray], dict]:
    """The replay's stored arrays and its selector's random state (what every future draw depends on)."""
    replay = algo.replay
    return [
        np.asarray(x) for x in replay.storage.ring.fields.leaves()
    ], replay.selector._rng.bit_generator.state


@pytest.mark.parametrize("name", PACKABLE)
def test_member_equals_its_single_run_update_for_update(name):
    config = EXTRA[name] if name in EXTRA else CASES[name][0]
    iterations = config.runner.n_steps // config.sampler.batch_size
    packed, packed_snaps = run_packed(seeded(config), iterations)
    assert packed.failures == {}
    trained = [getattr(packed.learner, name, None) for name in ("online", "actor", "critic")]
    for stack in filter(None, trained):
        for param_name, param in stack.params.items():
            # Gradients computed outside autograd's record: a recorded graph outlives its update.
            assert param.grad is not None and param.grad.grad_fn is None, param_name
    for k, member_config in enumerate(seeded(config)):
        single, single_snaps = run_single(member_config, iterations)
        member = packed.members[k]
        assert member.counters.updates == single.counters.updates > 0
        for a, b in zip(
            (member.counters.env_steps, member.counters.episodes, member.counters.samples_trained),
            (single.counters.env_steps, single.counters.episodes, single.counters.samples_trained),
        ):
            assert a == b
        assert member.window.traj_infos == single.window.traj_infos  # env streams: exactly
        for itr, (mine, theirs) in enumerate(zip(packed_snaps, single_snaps)):
            for param, value in theirs.items():
                np.testing.assert_allclose(
                    mine[k][param], value, rtol=0, atol=ATOL, err_msg=f"{param} @ {itr}"
                )
        for key, values in single.window.diagnostics.items():
            np.testing.assert_allclose(
                member.window.diagnostics[key], values, rtol=RTOL, atol=1e-6, err_msg=key
            )
        if (
            hasattr(single.algo, "replay")
            and single.algo.replay is not None
            and hasattr(single.algo.replay, "storage")
        ):
            (mine_arrays, mine_rng), (their_arrays, their_rng) = (
                replay_state(member.algo),
                replay_state(single.algo),
            )
            assert mine_rng == their_rng
            for a, b in zip(mine_arrays, their_arrays):
                np.testing.assert_array_equal(a, b)


def test_stacked_parameters_are_shared_with_the_member_modules():
    torch.manual_seed(0)
    modules = [torch.nn.Linear(3, 2) for _ in range(3)]
    originals = [m.weight.detach().clone() for m in modules]
    stacked = StackedParameters(modules, requires_grad=True)
    for k, module in enumerate(modules):
        assert torch.equal(module.weight, originals[k])
    with torch.no_grad():
        stacked.params["weight"][1].add_(1.0)
    assert torch.equal(modules[1].weight, originals[1] + 1.0)
    assert torch.equal(modules[0].weight, originals[0])
    x = torch.randn(3, 4, 3)
    out = torch.func.vmap(lambda p, xi: stacked.call(p)(xi))(stacked.tensors(), x)
    for k, module in enumerate(modules):
        torch.testing.assert_close(out[k], module(x[k]))


def test_clip_member_gradients_clips_each_member_as_clip_grad_norm_does():
    torch.manual_seed(1)
    grads = {"a": torch.randn(3, 4, 5) * torch.tensor([0.1, 10.0, 1.0]).view(3, 1, 1), "b": torch.randn(3, 7)}
    params = {name: torch.nn.Parameter(torch.zeros_like(g)) for name, g in grads.items()}
    for name, p in params.items():
        p.grad = grads[name].clone()
    norms = clip_member_gradients(params, max_norm=2.0)
    for k in range(3):
        single = [torch.nn.Parameter(torch.zeros_like(g[k])) for g in grads.values()]
        for p, g in zip(single, grads.values()):
            p.grad = g[k].clone()
        norm = torch.nn.utils.clip_grad_norm_(single, 2.0)
        torch.testing.assert_close(norms[k], norm)
        for p, name in zip(single, grads):
            torch.testing.assert_close(params[name].grad[k], p.grad)


def test_member_optimizer_state_is_a_single_optimizers():
    torch.manual_seed(2)
    modules = [torch.nn.Linear(4, 3) for _ in range(2)]
    singles = [torch.nn.Linear(4, 3) for _ in range(2)]
    for s, m in zip(singles, modules):
        s.load_state_dict(m.state_dict())
    optimizers = [torch.optim.RMSprop(m.parameters(), lr=0.01, centered=True) for m in modules]
    stacked = StackedParameters(modules, requires_grad=True)
    packed = stacked_optimizer(optimizers, list(stacked.params.values()))
    x = torch.randn(2, 5, 4)
    for _ in range(3):
        loss = torch.func.vmap(lambda p, xi: stacked.call(p)(xi).pow(2).sum())(stacked.tensors(), x).sum()
        packed.zero_grad()
        loss.backward()
        packed.step()
    for k, single in enumerate(singles):
        optimizer = torch.optim.RMSprop(single.parameters(), lr=0.01, centered=True)
        for _ in range(3):
            optimizer.zero_grad()
            single(x[k]).pow(2).sum().backward()
            optimizer.step()
        mine, theirs = MemberOptimizer(packed, k).state_dict(), optimizer.state_dict()
        assert mine["param_groups"] == theirs["param_groups"]
        for index, entry in theirs["state"].items():
            for key, value in entry.items():
                torch.testing.assert_close(mine["state"][index][key], value)
        torch.testing.assert_close(modules[k].weight, single.weight)


def test_a_member_whose_loss_turns_nan_stops_and_the_others_equal_their_single_runs():
    config = CASES["dqn"][0]
    configs = seeded(config)
    runner = PackedRunner.build(configs, [None] * 3, [None] * 3)
    assert isinstance(runner.learner, PackedQLearner)
    runner.start()
    with torch.no_grad():
        for stack in runner.learner.online.params.values():
            stack[1].fill_(math.nan)
    iterations = config.runner.n_steps // config.sampler.batch_size
    for _ in range(iterations):
        active = [k for k in runner.training()]
        runner.iteration(active)
    assert list(runner.failures) == [1]
    assert "loss became nan" in runner.failures[1] and "q_mean" in runner.failures[1]
    for k in (0, 2):
        single, snaps = run_single(configs[k], iterations)
        for name, value in snaps[-1].items():
            np.testing.assert_allclose(snapshot(runner.members[k])[name], value, rtol=0, atol=ATOL)


def test_train_packed_writes_single_run_directories_and_resumes_like_them(tmp_path):
    config = CASES["dqn"][0]
    config = dataclasses.replace(
        config, runner=dataclasses.replace(config.runner, log_interval_steps=32, checkpoint_interval_steps=64)
    )
    configs = seeded(config)
    packed_dirs = [tmp_path / f"packed{s}" for s in SEEDS]
    single_dirs = [tmp_path / f"single{s}" for s in SEEDS]
    train_packed(configs, packed_dirs)
    for c, d in zip(configs, single_dirs):
        train(c, d)
    # Continue seeds 1 and 2 from their previous checkpoint (step 128), packed and alone; seed 0 stays
    # complete (a pack's complete members only finish, and are not stacked).
    for d in [*packed_dirs[1:], *single_dirs[1:]]:
        (d / "checkpoints" / "previous.pt").replace(d / "checkpoints" / "latest.pt")
        (d / "status.json").unlink()
    train_packed(configs, packed_dirs)
    for c, d in zip(configs, single_dirs):
        train(c, d)
    for mine, theirs in zip(packed_dirs, single_dirs):
        a, b = read_run(mine), read_run(theirs)
        assert a.status == b.status == "complete", (a.problems, b.problems)
        assert a.config == b.config
        assert a.metadata["packed"]["seeds"] == list(SEEDS)
        columns = ["env_steps", "episodes", "updates", "return_mean"]
        pd.testing.assert_frame_equal(a.progress[columns], b.progress[columns])
        left = torch.load(mine / "checkpoints" / "latest.pt", weights_only=True)
        right = torch.load(theirs / "checkpoints" / "latest.pt", weights_only=True)
        for name, value in right["agent"].items():
            torch.testing.assert_close(left["agent"][name], value, rtol=0, atol=ATOL)
            assert left["agent"][name].untyped_storage().nbytes() == value.untyped_storage().nbytes()


def test_members_at_different_steps_are_a_pack_mismatch_and_continue_alone(tmp_path):
    config = CASES["dqn"][0]
    config = dataclasses.replace(
        config, runner=dataclasses.replace(config.runner, checkpoint_interval_steps=64)
    )
    configs = seeded(config, (0, 1))
    dirs = [tmp_path / "a", tmp_path / "b"]
    train_packed(configs, dirs)
    (dirs[0] / "checkpoints" / "previous.pt").replace(dirs[0] / "checkpoints" / "latest.pt")  # step 128
    for path in (dirs[1] / "checkpoints").iterdir():  # step 0
        path.unlink()
    for d in dirs:
        (d / "status.json").unlink()
    with pytest.raises(PackMismatch, match="different env steps"):
        train_packed(configs, dirs)
    for c, d in zip(configs, dirs):
        train(c, d)
        assert read_run(d).status == "complete"


def test_check_packable_names_what_stops_a_pack():
    config = CASES["dqn"][0]
    check_packable(seeded(config))
    with pytest.raises(ValueError, match="more than the seed and the env id"):
        check_packable(
            [
                config,
                dataclasses.replace(
                    config, algo_config=dataclasses.replace(config.algo_config, batch_size=8)
                ),
            ]
        )
    with pytest.raises(ValueError, match="repeat"):
        check_packable([config, config])
    acrobot = dataclasses.replace(config, env=dataclasses.replace(config.env, id="Acrobot-v1"))
    with pytest.raises(ValueError, match="envs in one pack need the same"):
        check_packable([config, acrobot])
    with pytest.raises(ValueError, match="no packed learner"):
        check_packable(seeded(CASES["a2c"][0]))
    with pytest.raises(ValueError, match="recurrent"):
        check_packable(seeded(CASES["ppo_recurrent"][0]))
    target_kl = CASES["ppo"][0]
    target_kl = dataclasses.replace(
        target_kl, algo_config=dataclasses.replace(target_kl.algo_config, target_kl=0.02)
    )
    with pytest.raises(ValueError, match="target_kl"):
        check_packable(seeded(target_kl))
    parallel = tiny("dqn", 160, 4, 2, mode="cpu", n_workers=2, env=MASKED_CARTPOLE)
    with pytest.raises(ValueError, match="serial"):
        check_packable(seeded(parallel))


def test_members_on_envs_with_the_same_spaces_equal_their_single_runs():
    from algorithms.envs.config import EnvConfig

    def on(game: str, seed: int):
        env = EnvConfig(id=game, kind="minatar", full_action_space=True)
        config = tiny(
            "dqn", 96, 4, 2, env=env, batch_size=8, env_steps_per_update=8, conv_torso="minatar", **REPLAY
        )
        config = dataclasses.replace(
            config, algo_config=dataclasses.replace(config.algo_config, hidden_size=16)
        )
        return dataclasses.replace(config, runner=dataclasses.replace(config.runner, seed=seed))

    configs = [on("minatar_asterix", 0), on("minatar_breakout", 0)]
    check_packable(configs)
    iterations = 96 // 8
    packed, packed_snaps = run_packed(configs, iterations)
    for k, config in enumerate(configs):
        single, single_snaps = run_single(config, iterations)
        assert packed.members[k].window.traj_infos == single.window.traj_infos
        assert packed.members[k].counters.updates == single.counters.updates > 0
        for name, value in single_snaps[-1].items():
            np.testing.assert_allclose(packed_snaps[-1][k][name], value, rtol=0, atol=ATOL)
