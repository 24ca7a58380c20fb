"""The serial sampler: the reference mode, one process, the learner's agent acting on B envs.

Every other mode must produce the same samples as this one for the same seed (see
``algorithms.samplers.base`` for the shared per-step logic and the seeding rule).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from algorithms.arrays import NamedArrays
from algorithms.samplers.base import BaseSampler, EnvStepper, allocate_samples, env_seed, record_example


class SerialSampler(BaseSampler):
    """Steps ``batch_B`` envs (one vector env) for ``batch_T`` steps per ``sample`` call."""

    def initialize(self) -> None:
        from algorithms.envs.factory import make_vec_env

        B = self.batch_spec.B
        self.env = make_vec_env(self.env_config, B, env_seed(self.seed, "train", self.start_env_steps))
        ranks = np.arange(B)
        self.agent.set_env_ranks(ranks, B)
        example = record_example(self.env.observation_space, self.env.action_space, self.agent)
        self.buffer = allocate_samples(example, self.batch_spec)
        self.stepper = EnvStepper(self.env, self.agent, ranks)
        self.stepper.reset(example.action)

    @torch.no_grad()
    def sample(self, itr: int) -> tuple[NamedArrays, list[dict[str, Any]]]:
        traj_infos: list[dict[str, Any]] = []
        for t in range(self.batch_spec.T):
            record, finished = self.stepper.step()
            self.buffer[t] = record
            traj_infos.extend(finished)
        return self.buffer.replace(bootstrap=self.stepper.bootstrap()), traj_infos

    def shutdown(self) -> None:
        super().shutdown()
        env = getattr(self, "env", None)
        if env is not None:
            env.close()
            self.env = None
