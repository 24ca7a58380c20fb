"""``python -m analysis study runs/<experiment> --csv PATH --markdown PATH``: a study's tidy result table
and markdown summary (``analysis.study``); without ``--csv`` or ``--markdown`` the summary is printed;
``--as-frozen`` reads with the code of the experiment's freeze (``analysis.as_frozen``).
``python -m analysis ending runs/<experiment>``: the lines a run ends with (``analysis.ending``)."""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
from pathlib import Path

from algorithms.rundir import NotARegularFile, atomic_write_bytes, check_output
from analysis.as_frozen import add_as_frozen, as_frozen_main
from analysis.ending import ending_lines
from analysis.factorial import factorial_path
from analysis.replication import check_replication, with_replication_base
from analysis.scores import add_scoring_options, check_reps
from analysis.study import effects_path, result_table, run_study
from analysis.study_markdown import study_markdown
from protocol.console import guarded


def main(argv: list[str] | None = None) -> int:
    return guarded("analysis", lambda: _main(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    study = commands.add_parser("study", help="tidy result table and markdown summary of one experiment")
    study.add_argument("experiment", type=Path, help="runs/<experiment>")
    study.add_argument("--csv", type=Path, default=None, help="write the tidy result table here")
    study.add_argument("--markdown", type=Path, default=None, help="write the markdown summary here")
    study.add_argument(
        "--baseline",
        default=None,
        help="arm A of the two-arm verdict (default: the plan's first arm, an ablation's ablated setting, "
        "else the arm named 'published')",
    )
    study.add_argument(
        "--replication",
        type=Path,
        default=None,
        help="runs/<experiment> of the same arms on fresh seeds: its verdict beside this one's",
    )
    study.add_argument(
        "--pool",
        action="store_true",
        help="also read the study and its --replication pooled (labelled exploratory unless the frozen "
        "[analysis] section allows pooling)",
    )
    add_scoring_options(study)
    add_as_frozen(study)
    ending = commands.add_parser("ending", help="per arm and env the final score, then the verdict")
    ending.add_argument("experiment", type=Path, help="runs/<experiment>")
    add_scoring_options(ending)
    args = parser.parse_args(argv)
    if args.command == "ending":
        return _ending(args)
    if args.as_frozen:
        return as_frozen_main("analysis", args.experiment, argv)
    if args.pool and args.replication is None:
        parser.error("--pool reads a study and its --replication together: give --replication")
    try:
        check_reps(args.reps)
        for path in (args.csv, args.markdown):
            if path is not None:
                check_output(path)
        found = run_study(args.experiment, baseline=args.baseline, reps=args.reps, table=args.table)
        again = None
        if args.replication is not None:
            baseline = found.verdict.baseline if found.verdict is not None else args.baseline
            again = run_study(args.replication, baseline=baseline, reps=args.reps, table=args.table)
            check_replication(found, again)
            found = with_replication_base(found, again)
    except (FileNotFoundError, ValueError) as e:
        print(f"analysis: {e}", file=sys.stderr)
        return 2
    markdown = study_markdown(
        found,
        command="python -m analysis " + shlex.join(argv),
        date=dt.datetime.now(dt.UTC).date().isoformat() + " (UTC)",
        csv_path=str(args.csv) if args.csv else None,
        replication=again,
        pool=args.pool,
    )
    effects = effects_path(args.csv) if args.csv is not None and not found.effects.empty else None
    factorial = found.checks.factorial
    design = factorial_path(args.csv) if args.csv is not None and factorial is not None else None
    for path, text in (
        (args.csv, lambda: result_table(found.scores).to_csv(index=False)),
        (effects, lambda: found.effects.to_csv(index=False)),
        (design, lambda: factorial.effects.to_csv(index=False)),
        (args.markdown, lambda: markdown),
    ):
        if path is None:
            continue
        try:  # whole or not at all: a full disk leaves the file as it was, never a 0-byte one
            atomic_write_bytes(path, text().encode("utf-8"))
        except NotARegularFile as e:
            print(f"analysis: {e}", file=sys.stderr)
            return 2
        except OSError as e:
            print(f"analysis: cannot write {path}: {e.strerror or e}", file=sys.stderr)
            return 1
        print(path)
    if args.csv is None and args.markdown is None:
        print(markdown)
    return 0


def _ending(args: argparse.Namespace) -> int:
    if not args.experiment.is_dir():
        print(f"analysis: experiment directory {args.experiment} does not exist", file=sys.stderr)
        return 2
    try:
        check_reps(args.reps)
        lines = ending_lines(run_study(args.experiment, reps=args.reps, table=args.table))
    except (FileNotFoundError, ValueError) as e:
        print(f"analysis: {e}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
