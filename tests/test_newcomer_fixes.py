"""What a newcomer meets in the CLI: ``show`` lists only the keys the env reads, ``--version``
answers, every ``run`` option says what it takes, and the scheduler's own commands stay out of the
help."""

from __future__ import annotations

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
