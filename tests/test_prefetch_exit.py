"""A prefetch iterator that is never closed still lets the interpreter exit cleanly.

Before course_lib.device closed open iterators at exit, the script below aborted in about a
third of its runs with 0 workers (status 134, "terminate called after throwing an instance
of ''"): its thread was still copying a batch to the device while JAX shut down. A crash
that shows up in some runs only needs many runs; each imports JAX, so the count is modest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import course_lib as grain
from course_lib import device

SCRIPT = Path(__file__).parent / "scripts" / "prefetch_unclosed.py"
RUNS = int(os.environ.get("FTB_PREFETCH_EXIT_RUNS", "8"))


@pytest.mark.timeout(60 * RUNS + 60)  # a loaded machine takes 10 s a run
@pytest.mark.parametrize("worker_count", [0, 2])
def test_unclosed_prefetch_iterator_exits_cleanly_every_time(worker_count):
    failures = []
    for run in range(RUNS):
        result = subprocess.run([sys.executable, str(SCRIPT), str(worker_count)],
                                capture_output=True, text=True, timeout=90)
        if result.returncode != 0 or result.stderr or "(512, 256)" not in result.stdout:
            failures.append(f"run {run}: status {result.returncode}, stderr "
                            f"{result.stderr[-500:]!r}, stdout {result.stdout[-200:]!r}")
    assert failures == [], f"{len(failures)} of {RUNS} runs did not exit cleanly:\n" + (
        "\n".join(failures))


@pytest.mark.timeout(30)
def test_the_exit_hook_stops_every_open_iterator_and_closes_its_source():
    sources = [iter(grain.load(grain.ArrayDataSource(np.ones((64, 2), np.float32)),
                               num_epochs=None, batch_size=8)) for _ in range(2)]
    iterators = [device.prefetch_to_device(source) for source in sources]
    for iterator in iterators:
        next(iterator)
    device._close_open_iterators()
    assert not any(iterator._producer.thread.is_alive() for iterator in iterators)
    for source in sources:
        with pytest.raises(RuntimeError, match="closed"):
            next(source)
    assert not any(iterator in device._open_iterators for iterator in iterators)
