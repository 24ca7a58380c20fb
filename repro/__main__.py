"""``python -m repro``: see ``repro/cli.py``. The stop signals are handled before anything else is
imported (``repro.job_side.stop_on_signals``): a stop that comes while the command's modules load is a
Ctrl-C like any other, exit 130, not lost in the import system nor the interpreter's -2."""

import sys

from repro.job_side import stop_on_signals

try:
    stop_on_signals()  # a stop held until now (blocked by the scheduler) is raised here
    from repro.cli import main

    code = main()
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    code = 130
sys.exit(code)
