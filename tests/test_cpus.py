"""CPU lists and pinning (``algorithms.cpus``), and the async runner's CPU settings."""

from __future__ import annotations

import os

import pytest

from algorithms.cpus import parse_cpus, pinned
from algorithms.run_config import RunnerConfig


@pytest.mark.parametrize(
    ("spec", "cpus"),
    [("", set()), ("0", {0}), ("0,2-3", {0, 2, 3}), ("1-1", {1}), (" 4, 6 ", {4, 6})],
)
def test_parse_cpus_reads_taskset_lists(spec, cpus):
    assert parse_cpus(spec) == cpus


@pytest.mark.parametrize("spec", ["a", "0,", "-1", "3-1", "0;1", "1-2-3"])
def test_parse_cpus_rejects_anything_else(spec):
    with pytest.raises(ValueError, match="CPU list"):
        parse_cpus(spec)


def test_pinned_restores_the_threads_cpus_and_rejects_unavailable_ones():
    before = os.sched_getaffinity(0)
    first = min(before)
    with pinned(frozenset({first}), "test"):
        assert os.sched_getaffinity(0) == {first}
    assert os.sched_getaffinity(0) == before
    with pytest.raises(ValueError, match="test: CPUs \\[4096\\] are not available"):
        with pinned(frozenset({4096}), "test"):
            pass
    assert os.sched_getaffinity(0) == before


def test_runner_config_checks_the_cpu_lists():
    config = RunnerConfig(kind="async", async_sampler_cpus="0", async_optimizer_cpus="1")
    assert (config.async_sampler_cpus, config.async_optimizer_cpus) == ("0", "1")
    with pytest.raises(ValueError, match="RunnerConfig.async_sampler_cpus: CPU list 'x'"):
        RunnerConfig(kind="async", async_sampler_cpus="x")
    with pytest.raises(ValueError, match="async_optimizer_cpus must be empty unless kind is 'async'"):
        RunnerConfig(kind="sync", async_optimizer_cpus="1")
