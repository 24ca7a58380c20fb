"""Ablation plans (``ablate = SETTING``): leave-one-out arms generated from ``repro diff`` and the
ablate setting's declared deviation groups, both endpoints beside them, the values with the ablate
setting's sources, the job's command line reproducing its config, and one-line refusals."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from algorithms.configs import ConfigError
from repro.ablation import ablation_arms
from repro.cli import build_parser
from repro.cli_job import _job_configs
from repro.cli_run import _tasks
from repro.inspect_settings import diff_rows, resolve_label
from repro.plans import expand, load_plan, pack_jobs, resolve_job_setting
from repro.profiles import load_profile
from repro.record import plan_record
from repro.settings import load_setting
from tests.refusals import refused_run_line

REPO = Path(__file__).resolve().parents[1]
BASE, PUBLISHED = "r2d1_minatar_corrected", "rlpyt_r2d1_minatar_published"


def _jobs(tmp_path, plan="r2d1_minatar_ablation", seeds=1):
    return expand(load_plan(plan), seeds, "smoke", tmp_path, envs=["minatar_breakout"])


def test_the_shipped_plan_has_both_endpoints_and_one_arm_per_declared_deviation(tmp_path):
    arms = ablation_arms(load_plan("r2d1_minatar_ablation"))
    assert [a.name for a in arms[:2]] == [PUBLISHED, BASE]
    names = [a.name.removeprefix(BASE + "_with_") for a in arms[2:]]
    assert names == [
        "swapped_exponents", "one_step_initial_priorities", "initial_priorities_without_alpha",
        "half_segment_priorities", "replay_ratio_with_burnin", "nstep_done_bug", "minimal_action_set",
        "log_spaced_epsilons",
    ]  # fmt: skip
    by_name = {a.name: a for a in arms}
    assert by_name[f"{BASE}_with_replay_ratio_with_burnin"].deviation[2] == (
        "algo.replay_ratio", "algo.replay_ratio_counts_burnin",
    )  # fmt: skip
    # Every key repro diff lists is in exactly one deviation arm.
    diff = {key for key, _, _ in diff_rows(resolve_label(BASE), resolve_label(PUBLISHED))}
    keys = [k for a in arms[2:] for k in a.deviation[2]]
    assert sorted(keys) == sorted(diff)


def test_endpoints_run_seed_by_seed_then_each_deviation_arm_whole(tmp_path):
    # A study stopped part-way leaves balanced endpoint seeds, then whole deviation arms.
    envs = ["minatar_breakout", "minatar_freeway"]
    jobs = expand(load_plan("r2d1_minatar_ablation"), "4,2", "smoke", tmp_path, envs=envs)
    arms = [a.name for a in ablation_arms(load_plan("r2d1_minatar_ablation"))]
    endpoints = [(seed, env, arm) for seed in (4, 2) for env in envs for arm in arms[:2]]
    deviations = [(seed, env, arm) for arm in arms[2:] for seed in (4, 2) for env in envs]
    assert [(job.seed, job.env, job.arm) for job in jobs] == endpoints + deviations


def test_each_deviation_arm_is_the_base_with_only_its_keys_at_the_published_values(tmp_path):
    jobs = {j.arm: j for j in _jobs(tmp_path)}
    assert len(jobs) == 10
    base, published = jobs[BASE].config, jobs[PUBLISHED].config

    def flat(config):
        return {
            f"{section}.{k}": v
            for section in ("algo", "env", "sampler", "runner")
            for k, v in dataclasses.asdict(
                config.algo_config if section == "algo" else getattr(config, section)
            ).items()
        }

    for arm, job in jobs.items():
        if job.deviation is None:
            continue
        changed = {k for k, v in flat(job.config).items() if flat(base)[k] != v}
        assert changed == set(job.deviation[2]), arm
        assert all(flat(job.config)[k] == flat(published)[k] for k in job.deviation[2]), arm
        assert job.run_dir == tmp_path / "r2d1_minatar_ablation-smoke" / arm / "minatar_breakout" / "seed0"
    # The values keep the published file's sources (not the command line's origin).
    job = jobs[f"{BASE}_with_swapped_exponents"]
    assert job.config.origins == ()
    setting, _ = resolve_job_setting(BASE, load_profile("smoke"), deviation=job.deviation)
    published_entry = load_setting(PUBLISHED).entries["algo.swap_priority_exponents"]
    assert setting.entries["algo.swap_priority_exponents"] == published_entry
    assert setting.entries["algo.nstep_done_bug"] == load_setting(BASE).entries["algo.nstep_done_bug"]


def test_the_job_command_line_reproduces_the_arm_and_packs_keep_arms_apart(tmp_path):
    jobs = _jobs(tmp_path, seeds=2)
    for task in _tasks(jobs):
        job = next(j for j in jobs if j.key == task.key)
        args = build_parser().parse_args(list(task.argv[3:]))
        (config,) = _job_configs(args, [job.seed])
        assert config == job.config, job.arm
    packs = pack_jobs(jobs, 2)
    assert len(packs) == 10 and all(len({j.arm for j in p}) == 1 for p in packs)


def test_the_plan_record_names_the_base_and_each_deviation(tmp_path):
    jobs = _jobs(tmp_path)
    record = plan_record(load_plan("r2d1_minatar_ablation"), jobs, (0,))
    ablation = record["plans"][0]["ablation"]
    assert ablation["base"] == BASE and ablation["ablate"] == PUBLISHED
    assert ablation["deviations"][f"{BASE}_with_minimal_action_set"] == ["env.full_action_space"]


def _plan(tmp_path, ablate_body: str, deviations: str | None) -> Path:
    declared = f"\n[[setting.deviations]]\n{deviations}\n" if deviations is not None else ""
    (tmp_path / "pub.toml").write_text(
        textwrap.dedent(f"""
        [setting]
        title = "t"
        citation = "c"
        base = "r2d1_minatar"
        {declared}
        [algo]
        {ablate_body}
        """)
    )
    path = tmp_path / "abl.toml"
    path.write_text(
        textwrap.dedent(f"""
        [plan]
        title = "t"
        arms = ["{BASE}"]
        ablate = "{tmp_path / "pub.toml"}"
        envs = ["minatar_breakout"]
        envs_source = "test"
        """)
    )
    return path


def test_an_undeclared_differing_key_is_a_deviation_of_its_own(tmp_path):
    body = (
        'nstep_done_bug = { value = true, source = "s" }\n'
        'swap_priority_exponents = { value = true, source = "s" }'
    )
    plan = load_plan(str(_plan(tmp_path, body, 'name = "done"\nkeys = ["algo.nstep_done_bug"]')))
    arms = ablation_arms(plan)
    deviations = {a.name: a.deviation[2] for a in arms if a.deviation}
    assert deviations[f"{BASE}_with_done"] == ("algo.nstep_done_bug",)
    assert deviations[f"{BASE}_with_algo_swap_priority_exponents"] == ("algo.swap_priority_exponents",)


@pytest.mark.parametrize(
    "deviations, message",
    [
        (None, "declares no deviation switches"),
        (
            'name = "typo"\nkeys = ["algo.nstep_done_bugg"]',
            "names 'algo.nstep_done_bugg', a switch algorithm 'r2d1' lacks",
        ),
    ],
)
def test_bad_ablation_plans_are_one_line_exit_2_and_nothing_written(tmp_path, deviations, message):
    plan = _plan(tmp_path, 'nstep_done_bug = { value = true, source = "s" }', deviations)
    with pytest.raises(ConfigError, match="ablate"):
        ablation_arms(load_plan(str(plan)))
    line = refused_run_line(plan, tmp_path / "runs")
    assert str(plan) in line and "'ablate'" in line and message in line


def test_show_lists_the_generated_arms_with_their_values():
    done = subprocess.run(
        [sys.executable, "-m", "repro", "show", "r2d1_minatar_ablation"],
        cwd=REPO, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        f"{BASE}_with_replay_ratio_with_burnin: algo.replay_ratio=32.0, algo.replay_ratio_counts_burnin=true"
        in done.stdout
    )
    assert json.dumps(PUBLISHED)[1:-1] in done.stdout


def test_a_name_that_is_a_setting_and_a_plan_shows_the_setting_and_the_plan_by_path():
    def show(name: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "repro", "show", name],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert show("r2d1_minatar").startswith("setting:  r2d1_minatar")
    assert show("repro/configs/plans/r2d1_minatar_published_vs_corrected.toml").startswith(
        "plan:     r2d1_minatar_published_vs_corrected"
    )
