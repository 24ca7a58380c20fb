"""What a newcomer meets in the CLI: ``show`` lists only the keys the env reads, ``--version``
answers, every ``run`` option says what it takes, and the scheduler's own commands stay out of the
help."""

from __future__ import annotations

import re

import pytest

from repro.cli import main


def test_show_leaves_out_the_keys_a_gym_env_never_reads_and_says_so(capsys):
    assert main(["show", "ppo_cartpole_zoo"]) == 0
    out = capsys.readouterr().out
    keys = [line.split()[0] for line in out.splitlines() if line.startswith("env.")]
    for atari_key in ("env.frameskip", "env.frame_stack", "env.frame_size", "env.noop_max"):
        assert atari_key not in keys
        assert atari_key in out.splitlines()[-1]
    assert "env.id" in keys and "env.max_episode_steps" in keys
    assert out.splitlines()[-1].startswith("not shown, unused by a 'gym' env")


def test_show_keeps_every_env_key_of_an_atari_setting(capsys):
    assert main(["show", "dqn_nature"]) == 0
    out = capsys.readouterr().out
    assert "env.frameskip" in out and "env.noop_max" in out and "not shown" not in out


def test_version_answers(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.split()[-1][0].isdigit()


def test_help_lists_the_users_commands_only_and_every_run_option_has_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    usage = capsys.readouterr().out
    assert "evaluate" in usage and "run-job" not in usage and "pack-job" not in usage
    from repro.cli import build_parser

    run = build_parser()._subparsers._group_actions[0].choices["run"]
    bare = [a.option_strings[0] for a in run._actions if a.option_strings and not a.help]
    assert bare == []


def test_the_reports_throughput_tables_stay_narrow(tmp_path):
    """The per-arm throughput table had 15 columns, wider than a 1280 px page (it scrolled in its own
    box): the time split is a table of its own and frames/s (steps/s times the frameskip) is gone.
    The column count stands in for the width, which only a browser measures (tests/test_reports_browser.py,
    where chromium is installed)."""
    import re

    from analysis.synthetic import SyntheticArm, write_experiment
    from reports.build import build_report

    arms = {"a": SyntheticArm(1.0, {"algo": "dqn"}), "b": SyntheticArm(0.5, {"algo": "dqn"})}
    exp = write_experiment(tmp_path, "exp", arms, ["CartPole-v1"], [0, 1], n_logs=2, eval_episodes=1)
    html = build_report(exp, reps=100).read_text()

    def headers(table_id: str) -> list[str]:
        head = re.search(rf'<table id="{table_id}">.*?<thead>(.*?)</thead>', html, re.S).group(1)
        return re.findall(r"<th>(.*?)</th>", head)

    assert len(headers("throughput-table")) <= 10 and "frames/s" not in headers("throughput-table")
    assert headers("time-split-table") == ["arm", "sampling %", "optimizing %", "evaluating %", "logging %"]


def _throughput_section(tmp_path, configs: dict[str, dict]) -> str:
    """The throughput section of the report of two synthetic runs per arm, each arm's config given."""
    from analysis.synthetic import SyntheticArm, write_experiment
    from reports.build import build_report

    arms = {arm: SyntheticArm(1.0, config) for arm, config in configs.items()}
    exp = write_experiment(tmp_path, "exp", arms, ["CartPole-v1"], [0, 1], n_logs=2, eval_episodes=1)
    return re.search(
        r'<section id="throughput">(.*?)</section>', build_report(exp, reps=100).read_text(), re.S
    )[1]


def _cells(html: str, table_id: str, tag: str = "td") -> list[list[str]]:
    table = re.search(rf'<table id="{table_id}">(.*?)</table>', html, re.S)[1]
    return [
        c
        for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)
        if (c := re.findall(rf"<{tag}>(.*?)</{tag}>", row))
    ]


PPO = {"algo": "ppo", "algo_config": {"epochs": 10}}
R2D1 = {"algo": "r2d1", "algo_config": {"replay_size_steps": 100_000}}


def test_the_per_run_throughput_table_fits_and_replay_ratios_stay_with_a_replay(tmp_path):
    """The per-run table had 13 columns and was clipped at 1280 px (tests/test_reports_browser.py
    measures it): it keeps what differs between runs, and the replay ratios, which PPO logs as its
    epochs (a constant), appear only for algorithms with a replay, per run in a folded table."""
    ppo = _throughput_section(tmp_path / "ppo", {"ppo": PPO})
    assert _cells(ppo, "throughput-runs-table", "th") == [
        ["arm", "env", "seed", "status", "env steps", "updates", "steps/s", "wall time (s)"]
    ]
    assert "replay" not in ppo and "<details>" not in ppo

    mixed = _throughput_section(tmp_path / "mixed", {"ppo": PPO, "r2d1": R2D1})
    assert len(_cells(mixed, "throughput-runs-table", "th")[0]) == 8
    folded = re.search(r"<details><summary>(.*?)</summary>\s*<div[^>]*>\s*<table id=\"([^\"]+)\"", mixed)
    assert folded.groups() == ("replay ratio per run", "replay-runs-table")
    per_arm = {row[0]: row for row in _cells(mixed, "throughput-table")}
    assert _cells(mixed, "throughput-table", "th")[0][7:9] == [
        "replay ratio (trained)",
        "replay ratio (with burn-in)",
    ]
    assert per_arm["ppo"][7:9] == ["–", "–"] and per_arm["r2d1"][7:9] == ["0.8", "1.2"]
