"""On Linux workers are forked from one fork server, and still start like fresh interpreters.

A fork of the server inherits the server's state, not the main process's: these tests pin
what the loader does about that (the environment, NumPy's global random state) and that the
server is reused instead of starting an interpreter per worker at every `iter()`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import course_lib as grain
from course_lib import workers

needs_fork_server = pytest.mark.skipif(workers.START_METHOD != "forkserver",
                                       reason="workers start with spawn on this platform")


class Report(grain.MapTransform):
    """What the process that prepared a record sees."""

    def map(self, element):
        return {"record": element, "parent": os.getppid(),
                "mark": os.environ.get("COURSE_LIB_TEST_MARK", "unset")}


def _reports(count: int = 32) -> list[dict]:
    loader = grain.DataLoader(data_source=grain.RangeDataSource(0, count, 1),
                              sampler=grain.IndexSampler(count, num_epochs=1),
                              operations=[Report()], worker_count=2)
    with iter(loader) as iterator:
        return list(iterator)


@needs_fork_server
@pytest.mark.timeout(120)
def test_every_worker_is_forked_from_the_same_fork_server_at_every_iter():
    from multiprocessing import forkserver

    parents = {report["parent"] for report in _reports()} | {r["parent"] for r in _reports()}
    assert parents == {forkserver._forkserver._forkserver_pid}, (
        f"workers' parents {parents}; this process is {os.getpid()}")


@needs_fork_server
@pytest.mark.timeout(120)
def test_a_worker_sees_the_environment_as_it_is_when_the_worker_starts(monkeypatch):
    monkeypatch.setenv("COURSE_LIB_TEST_MARK", "first")
    assert {report["mark"] for report in _reports()} == {"first"}
    monkeypatch.setenv("COURSE_LIB_TEST_MARK", "second")
    assert {report["mark"] for report in _reports()} == {"second"}
    monkeypatch.delenv("COURSE_LIB_TEST_MARK")
    assert {report["mark"] for report in _reports()} == {"unset"}


def test_the_workers_environment_keeps_the_users_values_and_adds_the_thread_limits(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    environment = workers.worker_environment()
    assert environment["OMP_NUM_THREADS"] == "3"
    assert environment["OPENBLAS_NUM_THREADS"] == "1"


_GLOBAL_DRAWS = textwrap.dedent("""
    import json
    import numpy as np
    import course_lib as grain
    from course_lib import workers

    # The fork server imports numpy.random, so every fork would inherit one state (kept
    # here, whatever the default list, so that this test always checks the reseed).
    workers.FORKSERVER_PRELOAD = (*workers.FORKSERVER_PRELOAD, "numpy.random")

    class GlobalDraw(grain.MapTransform):
        def map(self, element):
            return int(np.random.randint(0, 2**62))

    np.random.seed(0)
    runs = []
    for _ in range(2):
        loader = grain.DataLoader(data_source=grain.RangeDataSource(0, 4, 1),
                                  sampler=grain.IndexSampler(4, num_epochs=1),
                                  operations=[GlobalDraw()], worker_count=2)
        with iter(loader) as iterator:
            runs.append([int(draw) for draw in iterator])
    print(json.dumps(runs))
""")


@needs_fork_server
@pytest.mark.timeout(120)
def test_workers_never_repeat_each_others_or_an_earlier_runs_global_numpy_draws():
    """Records 0 and 1 go to different workers; each run starts new workers. A fork that kept
    the server's NumPy state would draw the same first number in all four."""
    completed = subprocess.run([sys.executable, "-c", _GLOBAL_DRAWS], capture_output=True,
                               text=True, timeout=100)
    assert completed.returncode == 0, completed.stderr
    import json

    runs = json.loads(completed.stdout.splitlines()[-1])
    first_draws = [run[0] for run in runs] + [run[1] for run in runs]
    assert len(set(first_draws)) == 4, f"first draws per worker and run: {first_draws}"
    assert np.unique(np.concatenate(runs)).size == 8


@pytest.mark.timeout(120)
def test_with_spawn_as_on_macos_and_windows_workers_are_children_with_the_same_environment(
        monkeypatch):
    monkeypatch.setattr(workers, "START_METHOD", "spawn")
    monkeypatch.setenv("COURSE_LIB_TEST_MARK", "spawned")
    reports = _reports()
    assert [report["record"] for report in reports] == list(range(32))
    assert {report["parent"] for report in reports} == {os.getpid()}
    assert {report["mark"] for report in reports} == {"spawned"}


@needs_fork_server
@pytest.mark.timeout(120)
def test_the_fork_server_has_loaded_numpy_random_so_a_worker_starts_without_importing_it():
    from multiprocessing import forkserver

    _reports()
    with open(f"/proc/{forkserver._forkserver._forkserver_pid}/maps") as maps:
        mapped = maps.read()
    for module in ("numpy/random/_generator", "numpy/random/_philox"):
        assert module in mapped, f"the fork server has not loaded {module}"


def _kill_fork_server(collect: bool) -> int:
    """SIGKILL the fork server and wait until it is dead; `collect`: also wait for it, as a
    stray `os.waitpid` elsewhere in the program would."""
    import signal
    import time
    from multiprocessing import forkserver

    server = forkserver._forkserver._forkserver_pid
    os.kill(server, signal.SIGKILL)
    if collect:
        os.waitpid(server, 0)
        return server
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{server}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                return server
        time.sleep(0.01)
    raise AssertionError("the fork server did not die")


@needs_fork_server
@pytest.mark.timeout(120)
@pytest.mark.parametrize("collect", [False, True], ids=["dead", "dead_and_collected"])
def test_a_killed_fork_server_is_replaced_by_the_next_iterator(collect):
    from multiprocessing import forkserver

    first = [report["record"] for report in _reports()]
    server = _kill_fork_server(collect)
    reports = _reports()
    assert [report["record"] for report in reports] == first == list(range(32))
    restarted = forkserver._forkserver._forkserver_pid
    assert restarted != server and {report["parent"] for report in reports} == {restarted}


def _skipping_the_first_call(function, skipped: list, name: str):
    def wrapper():
        if name not in skipped:
            skipped.append(name)
            return None
        return function()
    return wrapper


@needs_fork_server
@pytest.mark.timeout(120)
def test_a_fork_server_that_dies_after_the_check_is_replaced_when_a_worker_fails_to_start(
        monkeypatch):
    """The server can die after multiprocessing's checks that it runs (the loader's own, and
    the one a worker's start makes) and before the worker is forked: the start then fails,
    and the loader starts a new server and the worker again."""
    from multiprocessing import forkserver

    _reports()
    server = _kill_fork_server(collect=False)
    skipped: list = []  # both checks, once each, see the dead server as running
    monkeypatch.setattr(forkserver, "ensure_running",
                        _skipping_the_first_call(forkserver.ensure_running, skipped, "loader"))
    monkeypatch.setattr(forkserver._forkserver, "ensure_running", _skipping_the_first_call(
        forkserver._forkserver.ensure_running, skipped, "start"))
    reports = _reports()
    assert len(skipped) == 2 and [report["record"] for report in reports] == list(range(32))
    assert forkserver._forkserver._forkserver_pid not in (None, server)
