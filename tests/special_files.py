"""Things at a file's path that are not a regular file (a symlink, FIFO, socket, directory, device):
what an output must never replace (tests/test_output_files.py) and a reader must never open
(tests/test_run_damage_readers.py: a FIFO blocks the open, a device's read may never end)."""

from __future__ import annotations

import os
import socket
import stat
import tempfile
from pathlib import Path

import pytest


def not_a_file(kind: str, path: Path) -> Path:
    """``path`` made a ``kind`` of thing that is not a regular file; a symlink points at a file."""
    if kind == "symlink":
        (path.parent / "target.txt").write_text("the target's own text\n")
        path.symlink_to(path.parent / "target.txt")
    elif kind == "dangling symlink":
        path.symlink_to(path.parent / "nowhere")
    elif kind == "FIFO":
        os.mkfifo(path)
    elif kind == "socket":  # bound where its path is short enough for AF_UNIX, then moved into place
        with tempfile.TemporaryDirectory(dir="/tmp") as short, socket.socket(socket.AF_UNIX) as sock:
            sock.bind(f"{short}/s")
            os.rename(f"{short}/s", path)
    elif kind == "directory":
        path.mkdir()
    else:  # a character device with /dev/full's numbers, made here and not the system's
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 7))
        except PermissionError:
            pytest.skip("making a device node needs root")
    return path
