"""``python -m repro``: published settings, plans and the scheduler from the command line.

    python -m repro list
    python -m repro show r2d2_paper [--profile smoke]
    python -m repro diff rlpyt_r2d1_published r2d1_corrected      # NAME@PROFILE also works
    python -m repro run ppo_cartpole_zoo --seeds 100-104 --profile smoke   # a setting, no plan file
    python -m repro run ppo_cartpole_zoo --env CartPole-v1 --seeds 1,5,9 --set algo.learning_rate=1e-4,3e-4
                                  # a sweep: one arm per value, compared in one report
    python -m repro run r2d1 --seeds 3 --profile smoke --dry-run   # plan, totals, estimated time
    python -m repro run r2d1 --seeds 3 --profile smoke [--games pong,qbert] [--backend ray] [--jobs 2]
                                  # estimated duration first (repro/probe.py), plan record, then the jobs
    python -m repro run r2d1_minatar_published_vs_corrected --seeds 5 --pack 5
                                  # the 5 seeds of each arm and game in one process
    python -m repro summary runs/r2d1-smoke
    python -m repro report ppo_cartpole_zoo-smoke   # the HTML report: an experiment's name or path

The console command ``rlrepro`` (pyproject's ``[project.scripts]``) is this CLI: ``rlrepro run ...``,
``rlrepro report EXP``.

Bad input (unknown setting, game, profile or plan, a bad seed spec, an unknown ``--set`` key or a
value of the wrong type, a sweep over a budget key, ``--env`` with a plan, a missing optional
dependency, a malformed config file, a value a job could not run with) prints one line ``error: ...``
and exits 2 before any run directory is created; ``python -m repro`` alone prints the usage and
exits 2. ``run`` exits 1 when a job failed for good or its run was busy (written by another
process), and 130 when interrupted (Ctrl-C, SIGTERM or SIGHUP; rerun the same command to continue).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from algorithms.configs import ConfigError
from repro.cli_shared import build_report, invoked_as

DEFAULT_ROOT = Path("runs")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _version() -> str:
    """The installed package's version (pyproject's ``version``); "unknown" when run from a tree
    that was never installed (``python -m repro`` with PYTHONPATH)."""
    from importlib import metadata

    try:
        return metadata.version("rlrepro")
    except metadata.PackageNotFoundError:
        return "unknown (not installed: make venv)"


def _cmd_list(args: argparse.Namespace) -> int:
    from repro.plans import available_plans
    from repro.profiles import available_profiles
    from repro.settings import available_settings

    print("settings:", " ".join(available_settings()))
    print("profiles:", " ".join(available_profiles()))
    print("plans:   ", " ".join(available_plans()))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from repro.ablation import plan_lines
    from repro.inspect_settings import resolve_label, show_text
    from repro.plans import is_plan, load_plan, plan_analysis
    from repro.preregister import analysis_lines

    if "@" not in args.setting and is_plan(args.setting):
        plan = load_plan(args.setting)
        print("\n".join(plan_lines(plan) + analysis_lines(plan_analysis(plan))))
        return 0
    label = args.setting + (f"@{args.profile}" if args.profile else "")
    print(show_text(resolve_label(label, sets=args.set or ())))
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from repro.inspect_settings import diff_text, resolve_label

    print(diff_text(resolve_label(args.a), resolve_label(args.b, sets=args.set or ())))
    return 0


def _cmd_summary(args: argparse.Namespace) -> int:
    from repro.summary import summary_text

    path = Path(args.experiment_dir)
    if not path.is_dir():
        raise ConfigError(f"experiment directory {path} does not exist")
    print(summary_text(path))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    return build_report(args.experiment, args.options)


def _command(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The command ``name`` of ``module``, imported when it runs: ``--help`` and a job's start-up
    import only the command they run."""

    def command(args: argparse.Namespace) -> int:
        import importlib

        return getattr(importlib.import_module(module), name)(args)

    return command


def _add_set(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--set", action="append", default=None, metavar="SECTION.KEY=VALUE", help=f"{what} (repeatable)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=invoked_as(), description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    # The scheduler's own commands (run-job, pack-job) stay out of the list: a user never types them.
    sub = parser.add_subparsers(
        dest="command", required=True, parser_class=_Parser, metavar="COMMAND",
        title="commands (COMMAND --help for its options)",
    )  # fmt: skip

    p = sub.add_parser("list", help="shipped settings, profiles and plans")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("show", help="a setting resolved, every value with its source; a plan's arms")
    p.add_argument("setting", help="name, NAME@PROFILE, a path to a .toml file, or a plan's name")
    p.add_argument("--profile", default=None, help="a profile's changes applied (as NAME@PROFILE)")
    _add_set(p, "a value of the setting, shown with origin 'command line'")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("diff", help="every hyperparameter that differs between two settings")
    p.add_argument("a")
    p.add_argument("b")
    _add_set(p, "a value of B (diff A A --set k=v lists what the override changes)")
    p.set_defaults(func=_cmd_diff)

    p = sub.add_parser("run", help="run (or --dry-run) a setting or an experiment plan")
    p.add_argument("plan", metavar="SETTING_OR_PLAN", help="a setting or a plan: a name or a .toml file")
    p.add_argument(
        "--seeds", default=None, help="a count (3: seeds 0..2), a range (100-104) or a list (1,5,9)"
    )
    p.add_argument(
        "--profile",
        default="paper",
        help="paper (the published budget, default), smoke (minutes, tests the pipeline), mini, minatar_cpu, "
        "... (rlrepro list), or a profile .toml",
    )
    p.add_argument(
        "--env", action="append", default=None, help="an env for a setting (repeatable; default its env.id)"
    )
    p.add_argument("--games", default=None, help="comma-separated env ids replacing the plan's")
    p.add_argument("--arms", default=None, help="settings (names or paths, comma-separated) for the plan's")
    _add_set(p, "every arm's value; a,b,c sweeps: one arm per value (per combination of several keys)")
    p.add_argument("--tensorboard", action="store_true", help="TensorBoard event files in each run's tb/")
    p.add_argument(
        "--track", action="store_true", help="Weights & Biases (offline) per run when wandb is installed"
    )
    p.add_argument(
        "--pilot",
        default=None,
        help="tidy results (python -m analysis study --csv) or an experiment dir with results.csv: plan the "
        "seeds needed to detect --detect points (default: the plan's pilot)",
    )
    p.add_argument(
        "--detect", type=float, default=10.0, help="IQM difference to detect with 80%% power, points (10)"
    )
    p.add_argument("--exp", default=None, help="experiment name (default <plan or setting>-<profile>)")
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="run a plan with an [analysis] section from a tree with uncommitted changes (recorded)",
    )
    p.add_argument("--root", default=str(DEFAULT_ROOT), help="where experiments go (default runs/)")
    p.add_argument("--backend", default="local", help="local (this machine, default) or ray (a cluster)")
    p.add_argument("--address", default=None, help="Ray cluster address (BACKEND=ray)")
    p.add_argument("--jobs", default=None, help="slots (default: GPUs, else cores / torch threads)")
    p.add_argument("--cpus-per-job", default=None, help="CPUs per job, also its torch threads")
    p.add_argument(
        "--gpus-per-job",
        default=None,
        help="GPUs per job: 0.25 puts four jobs on a GPU (default 1 with GPUs)",
    )
    p.add_argument(
        "--shared-fs",
        action="store_true",
        help="BACKEND=ray: runs/ is at this path on every node; jobs write there (default: streamed here)",
    )
    p.add_argument(
        "--retries", type=int, default=2, help="retries of a failed job before it is marked failed"
    )
    p.add_argument("--dry-run", action="store_true", help="the jobs, their totals and an estimated duration")
    p.add_argument(
        "--rerun-changed",
        action="store_true",
        help="runs that ran with another config start afresh (the old directory kept beside them)",
    )
    p.add_argument(
        "--no-probe",
        dest="probe",
        action="store_false",
        help="estimate from cached throughput measurements only, never run the probe",
    )
    p.add_argument(
        "--reprobe",
        action="store_true",
        help="--dry-run: measure every arm afresh (default: reuse this machine's cached measurements)",
    )
    p.add_argument(
        "--no-estimate",
        dest="estimate",
        action="store_false",
        help="no estimated duration (neither probe nor cache)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar (a log file's output)")
    p.add_argument("--report", action="store_true", help="build the experiment's HTML report at the end")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also the throughput table per run at the end (rlrepro summary)",
    )
    p.add_argument(
        "--pack",
        default=None,
        help="K: train up to K seeds of an arm and env in one process; auto: K from the slots",
    )
    p.set_defaults(func=_command("repro.cli_run", "cmd_run"))

    for name, func, what in (
        ("run-job", "cmd_run_job", "train one job of a plan"),
        ("pack-job", "cmd_pack_job", "train several seeds of one arm and env of a plan in one process"),
    ):
        p = sub.add_parser(name, description=f"(used by the scheduler) {what}")
        p.add_argument("--arm", required=True)
        p.add_argument("--profile", required=True)
        p.add_argument("--env", required=True)
        if name == "run-job":
            p.add_argument("--seed", type=int, required=True)
            p.add_argument("--run-dir", required=True)
        else:
            p.add_argument("--seeds", required=True, help="a seed spec (1,2 or 0-4), one seed per --run-dir")
            p.add_argument("--run-dir", action="append", required=True, help="one per seed, in order")
        p.add_argument("--device", default=None)
        p.add_argument(
            "--threads", type=int, default=None, help="torch threads (the scheduler's CPUs per job)"
        )
        _add_set(p, "the job's --set values")
        p.add_argument(
            "--deviation", default=None, metavar="SETTING:NAME:KEYS", help="an ablation arm's deviation"
        )
        p.add_argument("--tensorboard", action="store_true")
        p.add_argument("--track", action="store_true")
        p.set_defaults(func=_command("repro.cli_job", func))

    p = sub.add_parser(
        "evaluate", help="watch a trained agent: a run's checkpoint played, with --video a GIF"
    )
    p.add_argument("run", help="a run directory: runs/<experiment>/<arm>/<env>/seed<k>")
    p.add_argument("--episodes", type=int, default=5, help="evaluation episodes to play (5)")
    p.add_argument(
        "--checkpoint",
        default="latest",
        help="latest (the final one of a finished run), previous, or a .pt path",
    )
    p.add_argument("--video", default=None, metavar="DIR", help="record each episode as DIR/episode<k>.gif")
    p.add_argument("--seed", type=int, default=None, help="the env seed (default: the run's seed)")
    p.add_argument("--max-frames", type=int, default=2000, help="frames kept per episode in a video (2000)")
    p.set_defaults(func=_command("repro.evaluate", "cmd_evaluate"))

    p = sub.add_parser("report", help="build the HTML report of runs/<experiment> (python -m reports build)")
    p.add_argument("experiment", help="the experiment's name (under runs/) or its directory")
    p.add_argument(
        "options", nargs=argparse.REMAINDER, help="python -m reports build's options: --out, --reps, ..."
    )
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("summary", help="throughput summary of runs/<experiment>")
    p.add_argument("experiment_dir")
    p.set_defaults(func=_cmd_summary)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from protocol.console import guarded

    return guarded("repro", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        parser.print_help(sys.stderr)
        return 2
    args = parser.parse_args(argv)
    args.argv = argv  # what the user typed, for hints that repeat it (``run``'s --dry-run)
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # a run directory that may not be read, a file that is not a regular one
        from algorithms.rundir import NotARegularFile, RunFileNotRegular, RunUnreadable

        if not isinstance(e, RunUnreadable | NotARegularFile):
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2 if isinstance(e, NotARegularFile | RunFileNotRegular) else 1
    except KeyboardInterrupt:  # Ctrl-C (or SIGTERM/SIGHUP in `run`) before or after the jobs ran
        print("interrupted", file=sys.stderr)
        return 130
