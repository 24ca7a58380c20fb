"""Adding an algorithm is two files: its module and its settings file.

The toy here is a real algorithm written where a user would write one, outside ``algorithms/``: linear
Q-learning on each sampler batch (Watkins 1989 with a linear Q, no replay, no target network),
epsilon-greedy through the agent's per-env random streams (Contract 2). Its package goes on
``PYTHONPATH``, its setting names it by module path, and ``python -m repro run`` takes it through the
smoke profile, which does not name it: the profile's ``[default.*]`` tables give it its budget. It
passes the checks every shipped algorithm passes (the glossary's, the defaults' and the registry's),
which find the algorithms through ``algorithms.registry`` and list none by name.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_config_defaults import canonical_settings, default_differences
from test_glossary import (
    ARCHITECTURE,
    config_classes,
    data_files,
    explained_twice,
    missing_from,
    shipped_algorithms,
)

from algorithms import registry
from algorithms.rundir import read_run
from analysis.runs import load_experiment
from repro.profiles import load_profile
from repro.settings import setting_configs

REPO = Path(__file__).resolve().parents[1]

TOY_MODULE = '''
"""Linear Q-learning on each fresh sampler batch: Q(s, a) = W s + b, one SGD step per batch on the
squared one-step TD error (Watkins 1989), epsilon-greedy exploration."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from algorithms.agents.base import Agent
from algorithms.learners.common import OptInfo
from algorithms.arrays import NamedArrays


@dataclass(frozen=True)
class Config:
    """Linear Q-learning settings; the defaults are linear_q_cartpole.toml's.

    Attributes:
        epsilon: probability of a uniformly random action while sampling, [0, 1].
    """

    learning_rate: float = 0.01
    discount: float = 0.99
    epsilon: float = 0.1
    learning_starts_steps: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"Config.epsilon must be in [0, 1], got {self.epsilon}")


class LinearQAgent(Agent):
    def __init__(self, config: Config, observation_space, action_space) -> None:
        model = nn.Linear(int(observation_space.shape[0]), int(action_space.n))
        super().__init__(model, observation_space, action_space)
        self.epsilon = config.epsilon

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward, state):
        q = self.model(observation.to(self.device, torch.float32))
        action = q.argmax(dim=-1)
        if self.mode == "sample":
            batch, n_actions = q.shape
            explore = self.uniform(batch) < self.epsilon
            random_action = (self.uniform(batch) * n_actions).long().clamp(max=n_actions - 1)
            action = torch.where(explore, random_action, action)
        return action, NamedArrays(q=q), None


def build_agent(config: Config, observation_space, action_space) -> LinearQAgent:
    return LinearQAgent(config, observation_space, action_space)


class Algo:
    def __init__(self, config: Config, agent: LinearQAgent, counters_frameskip: int, batch_spec) -> None:
        self.config = config
        self.agent = agent
        self.optimizer = torch.optim.SGD(agent.model.parameters(), lr=config.learning_rate)

    def optimize(self, env_steps: int, samples: NamedArrays) -> OptInfo:
        if env_steps < self.config.learning_starts_steps:
            return OptInfo(diagnostics={"td_loss": math.nan})
        model, device = self.agent.model, self.agent.device
        observation = samples.observation.to(device, torch.float32)
        q = model(observation).gather(-1, samples.action.to(device).long().unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            # final_observation is the observation after step t (the true last one where it ended).
            next_q = model(samples.final_observation.to(device, torch.float32)).max(dim=-1).values
            alive = (~samples.terminated.to(device)).to(torch.float32)
            target = samples.reward.to(device) + self.config.discount * alive * next_q
        loss = 0.5 * (q - target).pow(2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        n = samples.reward.numel()
        return OptInfo(updates=1, samples_trained=n, samples_replayed=n, diagnostics={"td_loss": loss.item()})

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
'''

TOY_SETTING = """
[setting]
title = "Linear Q-learning on CartPole (test)"
citation = "tests/test_add_algorithm.py"
algo = "toypkg.linear_q"
defaults_of = "toypkg.linear_q"

[algo]
learning_rate = { value = 0.01, source = "test" }
discount = { value = 0.99, source = "test" }
epsilon = { value = 0.1, source = "test" }
learning_starts_steps = { value = 0, source = "test: the profile's default replaces it" }
[env]
id = { value = "CartPole-v1", source = "test" }
kind = { value = "gym", source = "test" }
[sampler]
batch_B = { value = 4, source = "test" }
[runner]
n_steps = { value = 100_000, source = "test: the profile's default replaces it" }
"""


@pytest.fixture
def toy(tmp_path):
    package = tmp_path / "toypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "linear_q.py").write_text(TOY_MODULE)
    (package / "no_agent.py").write_text("Config = Algo = object\n")
    (tmp_path / "linear_q_cartpole.toml").write_text(TOY_SETTING)
    arm = tmp_path / "linear_q_cartpole.toml"
    plan = tmp_path / "toy.toml"
    plan.write_text(
        f'[plan]\ntitle = "toy"\narms = ["{arm}"]\nenvs = ["CartPole-v1"]\nenvs_source = "test"\n'
    )
    return tmp_path


@pytest.mark.slow
def test_a_module_and_a_setting_run_through_repro_with_the_profile_default(toy):
    root = toy / "runs"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(toy), os.environ.get("PYTHONPATH")])),
    }
    cmd = [sys.executable, "-m", "repro", "run", str(toy / "toy.toml"), "--seeds", "1", "--profile", "smoke"]
    cmd += ["--root", str(root), "--jobs", "1", "--no-estimate", "--no-progress"]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    experiment = load_experiment(root / "toy-smoke")
    assert experiment.arms == ["linear_q_cartpole"] and len(experiment.complete) == 1, experiment.skipped
    run = read_run(root / "toy-smoke" / "linear_q_cartpole" / "CartPole-v1" / "seed0")
    assert run.status == "complete", run.problems
    assert run.config["algo"] == "toypkg.linear_q"
    # smoke names no such algorithm: its [default.*] tables set the budget, and skip the default
    # replay size, which the toy's Config does not have.
    default = load_profile("smoke").default
    assert run.config["runner"]["n_steps"] == default["runner.n_steps"].value
    assert run.config["algo_config"]["learning_starts_steps"] == default["algo.learning_starts_steps"].value
    assert run.config["sampler"]["eval_episodes"] == default["sampler.eval_episodes"].value
    assert "replay_size_steps" not in run.config["algo_config"]
    assert run.progress["env_steps"].iloc[-1] == default["runner.n_steps"].value
    assert run.progress["updates"].iloc[-1] > 0 and run.progress["td_loss"].notna().iloc[-1]
    assert len(run.eval) == default["sampler.eval_episodes"].value


def test_the_toy_passes_the_checks_a_shipped_algorithm_passes(toy, monkeypatch):
    monkeypatch.syspath_prepend(str(toy))
    config, setting = registry.config_class("toypkg.linear_q"), toy / "linear_q_cartpole.toml"
    # The glossary: its own field (epsilon) is explained in its Config, the others by the glossary.
    text = ARCHITECTURE.read_text()
    assert missing_from(text, [*config_classes(), config], [*data_files(), setting]) == []
    assert explained_twice(text, [*config_classes(), config]) == []
    # Its defaults are its canonical setting's values, found by the file's defaults_of.
    assert canonical_settings(toy) == {"toypkg.linear_q": [setting]}
    assert default_differences("toypkg.linear_q", setting, toy) == []
    assert setting_configs(str(setting))["algo"] == config()


def test_registry_finds_modules_by_the_contract_and_names_what_is_missing(toy, monkeypatch):
    assert "base" not in registry.ALGORITHMS  # binds none of Config, build_agent, Algo
    assert registry.ALGORITHMS["rainbow"] == "algorithms.algos.rainbow"  # imports C51's Algo
    monkeypatch.syspath_prepend(str(toy))
    assert registry.config_class("toypkg.linear_q").__module__ == "toypkg.linear_q"
    with pytest.raises(ValueError, match=r"^toypkg.no_agent lacks build_agent \("):
        registry.algo_module("toypkg.no_agent")
    with pytest.raises(ValueError, match=r"^unknown algorithm 'toypkg.nothing' \(no module named"):
        registry.algo_module("toypkg.nothing")
    known = ", ".join(sorted(registry.ALGORITHMS))
    with pytest.raises(ValueError, match=rf"^unknown algorithm 'linear_q'; known: {known}$"):
        registry.algo_module("linear_q")


def test_listing_the_algorithms_imports_no_algorithm_module():
    code = (
        "import sys; from algorithms import registry; names = sorted(registry.ALGORITHMS); "
        "assert 'torch' not in sys.modules; "
        "assert not any(m.startswith('algorithms.algos.') for m in sys.modules); "
        "print(' '.join(names))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == shipped_algorithms() and "dqn" in done.stdout.split()
