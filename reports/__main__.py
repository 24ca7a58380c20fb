"""``python -m reports build runs/<experiment>``: write the experiment's HTML report, print its path.
The experiment is its directory or its name under ``runs/`` (``python -m reports build
ppo_cartpole_zoo-smoke``, as ``make report EXP=...`` and ``rlrepro report`` pass it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from algorithms.rundir import check_output
from analysis.as_frozen import add_as_frozen, as_frozen_main
from analysis.scores import add_scoring_options, check_reps, read_bounds
from protocol.console import guarded
from reports.build import build_report

RUNS = Path("runs")


def experiment_path(given: Path) -> Path:
    """``given`` when it is a directory, else ``runs/<given>`` when that is one (an experiment's name);
    ``FileNotFoundError`` naming both otherwise."""
    if given.is_dir():
        return given
    if (RUNS / given).is_dir():
        return RUNS / given
    raise FileNotFoundError(f"experiment directory {given} does not exist, nor {RUNS / given}")


def main(argv: list[str] | None = None) -> int:
    return guarded("reports", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build the HTML report of one experiment directory")
    build.add_argument("experiment", type=Path, help="runs/<experiment>, or the experiment's name")
    build.add_argument(
        "--out", type=Path, default=None, help="output file (default: <experiment>/report.html)"
    )
    add_scoring_options(build)
    build.add_argument(
        "--bounds",
        type=Path,
        default=None,
        help="per-env score bounds (CSV env,score_min,score_max[,source], or TOML [[env]]/[[task]] tables "
        "with those keys): 0 and 1 of the normalised score, for envs without a shipped reference "
        "(analysis/data/gym_reference_scores.csv)",
    )
    build.add_argument(
        "--baseline",
        default=None,
        help="arm A of a two-arm verdict (default: the plan's first arm, else the arm named 'published')",
    )
    build.add_argument(
        "--figures",
        type=Path,
        default=None,
        help="also write each figure of the report there as <figure id>.png (for a page in docs/results)",
    )
    add_as_frozen(build)
    args = parser.parse_args(argv)
    if args.as_frozen:
        try:
            experiment = experiment_path(args.experiment)
        except FileNotFoundError as e:
            print(f"reports: {e}", file=sys.stderr)
            return 2
        return as_frozen_main("reports", experiment, sys.argv[1:] if argv is None else argv)
    try:
        check_reps(args.reps)
        if args.out is not None:
            check_output(args.out)
        bounds = read_bounds(args.bounds) if args.bounds is not None else None
        path = build_report(
            experiment_path(args.experiment), out=args.out, reps=args.reps, table=args.table,
            baseline=args.baseline, bounds=bounds, figures_dir=args.figures,
        )  # fmt: skip
    except (FileNotFoundError, ValueError) as e:
        print(f"reports: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk, a read-only --out: nothing was written
        print(f"reports: cannot write {e.filename or 'the report'}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
