"""What the ``repro`` commands share: how the user invoked the CLI, the report and ending commands
run in child processes, and the hints at smaller runs. Kept apart from ``repro.cli`` (the parser,
which names each command's module in a string, ``tests/test_layers.py`` counting that as an import)
so that no command module imports the parser back.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

# An estimate from a day on prints the hint at smaller runs.
LONG_ESTIMATE_S = 86_400.0


def invoked_as() -> str:
    """How the user started this CLI, for the commands its hints print: ``rlrepro`` (the console
    script) or ``python -m repro``."""
    return "rlrepro" if Path(sys.argv[0]).name == "rlrepro" else "python -m repro"


def report_command(experiment_dir: Path) -> str:
    """The command that builds ``experiment_dir``'s report, in the form the user ran this CLI in."""
    if invoked_as() == "rlrepro":
        return f"rlrepro report {experiment_dir}"
    return f"python -m reports build {experiment_dir}"


def build_report(experiment: str, options: Sequence[str] = ()) -> int:
    """Build an experiment's HTML report (``experiment``: a path or a name under ``runs/``) with
    ``python -m reports build``, in a child process: the reports layer sits above this one
    (pyproject's import contract), so it is run, never imported. Returns its exit code."""
    import subprocess

    argv = [sys.executable, "-m", "reports", "build", experiment, *options]
    sys.stdout.flush()  # what this process printed comes first, also into a pipe or a file
    return subprocess.run(argv, check=False).returncode


def print_ending(experiment: Path) -> int:
    """Print what a run ends with: per arm and env the final score, then the verdict or the learning
    check (``python -m analysis ending``, run in a child process as ``build_report`` runs the report,
    the analysis layer being a sibling of this one). Returns its exit code."""
    import subprocess

    argv = [sys.executable, "-m", "analysis", "ending", str(experiment)]
    sys.stdout.flush()  # what this process printed comes first, also into a pipe or a file
    return subprocess.run(argv, check=False).returncode


# The plans `make reproduce-r2d1` runs (the Makefile's SUITE): their hint names the Makefile's variables.
MAKE_PLANS = ("r2d1", "r2d1_minatar_published_vs_corrected", "r2d1_breakout_cpu")
# What any 2-core machine without a GPU runs in under an hour: the Makefile's default suite.
CPU_ANSWER = (
    "make reproduce-r2d1 SEEDS=3 (the confirmed R2D1 finding on MinAtar Breakout, under an hour on 2 cores; "
    "python -m repro run r2d1_breakout_cpu --seeds 3 --profile minatar_cpu)"
)


def smaller_runs_hint(plan: str, profile: str) -> str:
    """One line naming smaller runs than ``plan`` at ``profile``, in the form the user ran: for the
    Makefile's R2D1 plans its variables, then the CLI's; for any other plan or setting the CLI's."""
    options = []
    if plan in MAKE_PLANS:
        if profile not in ("mini", "minatar_cpu", "smoke"):
            options.append("PROFILE=mini (--profile mini)")
        if plan == "r2d1":
            plan_text = "plan r2d1_minatar_published_vs_corrected --profile minatar_cpu"
            options.append(f"SUITE=minatar PROFILE=minatar_cpu ({plan_text})")
            options.append(CPU_ANSWER)
        options.append("fewer GAMES or SEEDS")
    else:
        if profile != "smoke":
            options.append("--profile smoke (minutes, says nothing about learning)")
        options.append("fewer --env/--games or --seeds")
    return "hint: that is days on this machine; smaller runs: " + ", or ".join(options)
