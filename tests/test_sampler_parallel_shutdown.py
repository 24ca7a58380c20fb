"""Parallel samplers shut down cleanly after a worker raises, after a worker is killed, after Ctrl-C
and after the parent itself is killed (after a normal close: tests/test_sampler_parallel_modes.py).
No worker process may be left alive, and a failed worker must surface as a ``RuntimeError`` naming
it, quickly, not as a hang.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from interrupts import sigint_default

from algorithms.agents.dqn_agents import EpsilonGreedyAgent
from algorithms.agents.epsilon import EpsilonSchedule
from algorithms.envs.config import EnvConfig
from algorithms.models.dqn_model import QNetwork
from algorithms.run_config import SamplerConfig
from algorithms.samplers.base import env_spaces
from algorithms.samplers.modes import make_sampler
from algorithms.samplers.workers import WorkerError

ENV = EnvConfig(id="CartPole-v1", kind="gym")
REPO = Path(__file__).resolve().parents[1]


class FaultyAgent(EpsilonGreedyAgent):
    """A real epsilon-greedy agent that, from call ``fail_at`` on, raises or emits an invalid action."""

    def __init__(self, fail_at: int, failure: str) -> None:
        observation_space, action_space = env_spaces(ENV)
        schedule = EpsilonSchedule(start=0.0, final=0.0, decay_steps=0, eval=0.0)
        super().__init__(QNetwork((4,), 2, mlp_hidden_sizes=(8,)), observation_space, action_space, schedule)
        self.calls, self.fail_at, self.failure = 0, fail_at, failure

    def step(self, observation, prev_action, prev_reward, state):
        self.calls += 1
        action, info, next_state = super().step(observation, prev_action, prev_reward, state)
        if self.calls >= self.fail_at and self.failure == "raise":
            raise RuntimeError(f"injected agent failure at call {self.calls}")
        if self.calls >= self.fail_at and self.failure == "bad_action":
            action = action + 7  # CartPole has 2 actions: the env worker's step raises
        return action, info, next_state


@dataclass(frozen=True)
class FaultyAgentFactory:
    fail_at: int = 10**9
    failure: str = "none"

    def __call__(self) -> FaultyAgent:
        return FaultyAgent(self.fail_at, self.failure)


def build(mode: str, factory: FaultyAgentFactory, batch_T: int = 4, learner: FaultyAgent | None = None):
    config = SamplerConfig(mode=mode, batch_T=batch_T, batch_B=4, n_workers=2)
    agent = learner or FaultyAgentFactory()()
    sampler = make_sampler(mode, ENV, agent, config, seed=0, agent_factory=factory)
    sampler.initialize()
    return sampler, agent


def is_running(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def assert_all_gone(pids: list[int], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(is_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if is_running(p)], "worker processes left running"
    assert not {c.pid for c in mp.active_children()} & set(pids)


def test_exception_in_cpu_worker_names_the_worker() -> None:
    sampler, agent = build("cpu", FaultyAgentFactory(fail_at=6, failure="raise"))
    pids = sampler.worker_pids
    try:
        agent.set_mode("sample", 0)
        sampler.sample(0)  # 4 steps: fine
        with pytest.raises(
            RuntimeError, match=r"parallel-cpu sampler worker \d raised during 'sample'"
        ) as info:
            sampler.sample(1)
        assert "injected agent failure at call 6" in str(info.value)
        assert isinstance(info.value, WorkerError)
    finally:
        sampler.shutdown()
    assert_all_gone(pids)


def test_exception_in_env_worker_names_the_worker() -> None:
    """GPU mode: the learner emits an invalid action, the env worker's step raises."""
    learner = FaultyAgent(fail_at=3, failure="bad_action")
    sampler, agent = build("gpu", FaultyAgentFactory(), learner=learner)
    pids = sampler.worker_pids
    try:
        agent.set_mode("sample", 0)
        with pytest.raises(RuntimeError, match=r"parallel-gpu sampler worker \d raised during 'step'"):
            sampler.sample(0)
    finally:
        sampler.shutdown()
    assert_all_gone(pids)


@pytest.mark.parametrize("mode", ["cpu", "alternating"])
def test_worker_killed_mid_batch_raises_promptly(mode: str) -> None:
    # A batch long enough (tens of seconds) that the kill lands while it is being collected.
    sampler, agent = build(mode, FaultyAgentFactory(), batch_T=200_000)
    pids = sampler.worker_pids
    victim = pids[1]
    killer = threading.Timer(0.5, os.kill, args=(victim, signal.SIGKILL))
    try:
        agent.set_mode("sample", 0)
        killer.start()
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=rf"worker \d \(pid {victim}\) was killed by SIGKILL"):
            sampler.sample(0)
        assert time.monotonic() - start < 10.0
    finally:
        killer.cancel()
        sampler.shutdown()
    assert_all_gone(pids)


SCRIPT = textwrap.dedent(
    """
    import sys, time, torch
    sys.path.insert(0, {tests!r})
    from test_sampler_parallel_shutdown import FaultyAgentFactory, build
    sampler, agent = build({mode!r}, FaultyAgentFactory(), batch_T=50)
    print(" ".join(map(str, sampler.worker_pids)), flush=True)
    agent.set_mode("sample", 0)
    try:
        while True:
            sampler.sample(0)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    finally:
        sampler.shutdown()
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["ctrl_c", "parent_killed"])
def test_no_orphans_after_ctrl_c_or_parent_death(stop: str) -> None:
    mode = "gpu" if stop == "ctrl_c" else "cpu"
    script = SCRIPT.format(tests=str(REPO / "tests"), mode=mode)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
        preexec_fn=sigint_default,
    )
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2, "the script did not start its workers"
        time.sleep(0.5)  # sampling now
        if stop == "ctrl_c":
            os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole process group
            assert proc.wait(timeout=20) == 0
            assert "interrupted" in proc.stdout.read()
        else:
            proc.kill()
            proc.wait(timeout=10)
        assert_all_gone(pids)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()


def test_faulty_agent_is_a_working_agent_until_it_fails() -> None:
    agent = FaultyAgent(fail_at=2, failure="raise")
    obs = torch.zeros(3, 4)
    action, _, _ = agent.step(obs, torch.zeros(3, dtype=torch.int64), torch.zeros(3), None)
    assert action.shape == (3,)
    with pytest.raises(RuntimeError, match="injected"):
        agent.step(obs, torch.zeros(3, dtype=torch.int64), torch.zeros(3), None)


UNGUARDED = textwrap.dedent(
    """
    from algorithms import registry
    from algorithms.algos import dqn
    from algorithms.envs.config import EnvConfig
    from algorithms.samplers.base import env_spaces
    from algorithms.samplers.modes import make_sampler
    from algorithms.run_config import SamplerConfig

    env = EnvConfig(id="pong", num_threads=1)
    factory = registry.AgentFactory("dqn", dqn.Config(), *env_spaces(env))
    config = SamplerConfig(mode="cpu", batch_T=2, batch_B=2, n_workers=2)
    sampler = make_sampler("cpu", env, factory(), config, seed=0, agent_factory=factory)
    sampler.initialize()
    """
)


@pytest.mark.slow
def test_script_without_main_guard_fails_with_a_clear_error(tmp_path) -> None:
    """Spawn re-imports an unguarded script in each worker, which dies starting workers of its own.
    The parent must report that, not block: Pong's frame space in the agent recipe made the spawn
    data larger than a pipe buffer, and CPython's ``Process.start`` then waited for good on a dead
    child (``compact_space``)."""
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=180, cwd=tmp_path
    )
    assert done.returncode != 0
    assert "exited with code 1 during 'start'" in done.stderr
    assert 'if __name__ == "__main__"' in done.stderr
