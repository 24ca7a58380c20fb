"""A training process's setup (``algorithms.process``): torch threads, and freed memory kept.

Each case runs in a fresh interpreter: malloc's thresholds and torch's thread count are process-wide.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Rounds of sixteen 1 MiB blocks allocated, written and freed, as an update's temporaries are: with
# glibc's default thresholds each round's freed heap top exceeds the trim threshold and is handed back
# to the kernel, so every later round faults its pages in again.
_ROUNDS = """
import resource, sys
import numpy as np
from algorithms.process import configure_process
if sys.argv[1] == "configure":
    configure_process(2)
def allocate_and_free():
    blocks = [np.ones(1 << 20, np.uint8) for _ in range(16)]
    del blocks
allocate_and_free()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    allocate_and_free()
import torch
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, torch.get_num_threads())
"""


def _faults_and_threads(mode: str) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_ROUNDS), mode],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1])


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):
        return False


@pytest.mark.skipif(not _glibc(), reason="malloc's thresholds are glibc's")
def test_configured_process_keeps_freed_memory_instead_of_faulting_it_in_again():
    default_faults, default_threads = _faults_and_threads("default")
    faults, threads = _faults_and_threads("configure")
    # Ten rounds of 16 MiB: ~40,000 page faults with the default thresholds (measured 40,660), none kept.
    assert default_faults > 10 * 16 * 256 // 2, default_faults
    assert faults < 100, faults
    assert (default_threads, threads) == (1, 2)


def test_retain_freed_memory_is_idempotent_and_says_whether_it_applies():
    code = (
        "from algorithms.process import retain_freed_memory as r; a, b = r(), r(); "
        "assert a == b, (a, b); print(a)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.strip()
    assert out == str(_glibc())
