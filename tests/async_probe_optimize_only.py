"""The probe replay algorithm of ``async_probe_algo`` behind ``optimize`` alone (no async extension),
registered as ``"probe_optimize_only"`` (like ``async_probe_algo``): how an algorithm that only
implements Contract 4's ``optimize`` runs under the asynchronous runner."""

from __future__ import annotations

from typing import ClassVar

import async_probe_algo as probe

from algorithms.arrays import NamedArrays
from algorithms.learners.common import OptInfo


class Config(probe.Config):
    """The probe's config under this module's registry name."""

    registry_name: ClassVar[str] = "probe_optimize_only"


build_agent = probe.build_agent


class Algo:
    def __init__(self, config: Config, agent: probe.ProbeQAgent, counters_frameskip: int, batch_spec) -> None:
        self._inner = probe.Algo(config, agent, counters_frameskip, batch_spec)

    def optimize(self, env_steps: int, samples: NamedArrays) -> OptInfo:
        return self._inner.optimize(env_steps, samples)

    def state_dict(self) -> dict:
        return self._inner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self._inner.load_state_dict(state)
