"""However an iteration ends, its workers and shared memory go, silently.

The routes run in a fresh interpreter (tests/worker_scripts/), so that what the interpreter
prints at exit (resource_tracker warnings, "Exception ignored ...") is seen too.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from course_lib import Batch, DataLoader, IndexSampler, MapTransform, RangeDataSource
from course_lib.workers import JOIN_TIMEOUT_S
from tests.segments import process_alive

SCRIPTS = Path(__file__).parent / "worker_scripts"
# 200 early breaks take 40 to 150 s on 2 busy cores (0.2 to 0.75 s per worker start-up);
# FTB_EARLY_EXIT_BREAKS=15 gives a quick local run.
BREAKS = int(os.environ.get("FTB_EARLY_EXIT_BREAKS", "200"))
WARNINGS = ("resource_tracker", "Exception ignored", "leaked", "Warning", "warn")


def _run(script: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPTS / script), *args],
                          capture_output=True, text=True, timeout=timeout)


def _gone_within(pids, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(process_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.timeout(420)
def test_every_early_exit_route_leaves_nothing_behind():
    routes = [f"break={BREAKS}", "del=2", "close=2", "with=2", "keyboard_interrupt=2",
              "exception=2"]
    result = _run("early_exit.py", *routes, timeout=400)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
    assert result.stdout.rstrip().endswith("clean"), result.stdout
    print(result.stdout)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["suspended", "exit", "crash"])
def test_interpreter_exit_with_an_open_iterator_is_clean(mode):
    result = _run("abandon.py", mode, timeout=50)
    assert result.returncode == (1 if mode == "crash" else 0), result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert len(report["pids"]) == 2 and report["segments"]
    assert _gone_within(report["pids"], 5), report["pids"]
    assert [name for name in report["segments"] if os.path.exists(f"/dev/shm/{name}")] == []
    stderr = result.stderr
    if mode == "crash":  # the user's own traceback, and nothing else
        assert stderr.startswith("Traceback") and stderr.rstrip().endswith(
            "RuntimeError: the training loop crashed"), stderr
        assert stderr.count("Traceback") == 1, stderr
    else:
        assert stderr == "", stderr
    assert not any(marker in stderr for marker in WARNINGS), stderr


def _worker_children() -> list:
    return [p for p in multiprocessing.active_children() if p.name.startswith("course_lib-worker")]


@pytest.mark.timeout(30)
def test_close_does_not_wait_on_results_nobody_will_read():
    """Results without NumPy buffers travel through the pipe; a worker blocked writing a
    large one must not hold `close()` up until it is killed."""

    class BigBytes(MapTransform):
        def map(self, element):
            return bytes(50_000)

    iterator = iter(DataLoader(data_source=RangeDataSource(0, 10_000, 1),
                               sampler=IndexSampler(10_000, num_epochs=1),
                               operations=[BigBytes()], worker_count=2))
    assert next(iterator) == bytes(50_000)
    time.sleep(0.5)  # let both workers fill their pipes
    start = time.monotonic()
    iterator.close()
    assert time.monotonic() - start < 1.0
    assert not _worker_children()


@pytest.mark.timeout(30)
def test_close_stops_a_busy_worker_within_the_join_timeout():
    class Stuck(MapTransform):
        def map(self, element):
            if element >= 64:  # every unit after the first hangs
                time.sleep(60)
            return np.asarray(element)

    iterator = iter(DataLoader(data_source=RangeDataSource(0, 1000, 1),
                               sampler=IndexSampler(1000, num_epochs=1),
                               operations=[Stuck(), Batch(8)], worker_count=2))
    next(iterator)
    start = time.monotonic()
    iterator.close()
    assert time.monotonic() - start < JOIN_TIMEOUT_S + 1.5
    assert not _worker_children()
