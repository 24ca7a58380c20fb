"""Children that a test interrupts with SIGINT, as a terminal's Ctrl-C would.

A shell without job control starts a background command with SIGINT ignored (POSIX; e.g.
``nohup make test &``, or ``make test &`` in a script), and every process below inherits that: a
Python started so installs no ``KeyboardInterrupt`` handler, and the SIGINT a test sends it does
nothing. The tests that send one are about a user's Ctrl-C, so their child starts with SIGINT's
default action, whatever the test run inherited.
"""

from __future__ import annotations

import signal


def sigint_default() -> None:
    """``preexec_fn`` for ``subprocess.Popen``: SIGINT back to its default action in the child, so
    that Python there installs its ``KeyboardInterrupt`` handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
