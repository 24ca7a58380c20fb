"""A command's standard output that cannot be written: full (``> /dev/full``, a full disk) or closed by
its reader (``| head -1``). The command stops with one line on stderr and exit 1, not a traceback
from wherever it happened to print, nor the interpreter's "Exception ignored" at exit.

Telling a failed write of stdout from any other ``OSError`` needs the write itself: ``guarded`` puts
a writer on stdout's descriptor whose failures are ``StdoutUnwritable``, a class of their own.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable

EXIT_UNWRITABLE = 1


class StdoutUnwritable(OSError):
    """A write to standard output failed (its ``errno``: ``EPIPE``, ``ENOSPC``, ``EIO``, ...)."""


class _StdoutWriter(io.RawIOBase):
    """Writes to a descriptor it does not own (closing it leaves the descriptor open)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data) -> int:
        try:
            return os.write(self._fd, data)
        except OSError as e:
            raise StdoutUnwritable(e.errno, e.strerror) from None


def guarded(prog: str, command: Callable[[], int]) -> int:
    """``command()``'s exit code, its output flushed; ``EXIT_UNWRITABLE`` with one line on stderr when
    standard output could not be written. A stdout with no descriptor (a test's captured one) is
    left as it is."""
    original = sys.stdout
    try:
        fd = original.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both of the last two
        return command()
    original.flush()
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(_StdoutWriter(fd)), encoding=original.encoding, errors=original.errors,
        line_buffering=original.line_buffering,
    )  # fmt: skip
    try:
        code = command()
        sys.stdout.flush()
        return code
    except StdoutUnwritable as e:
        # What is still buffered goes nowhere, also when the interpreter flushes it at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
        print(f"{prog}: cannot write to standard output: {e.strerror}", file=sys.stderr)
        return EXIT_UNWRITABLE
    finally:
        sys.stdout = original
