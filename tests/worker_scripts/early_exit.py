"""Leave worker iterators early, by every route, and check that nothing is left behind.

Run by tests/test_worker_cleanup.py as `early_exit.py ROUTE=ROUNDS ...`. After each round:
no worker process is alive and no shared memory segment this process created still exists.
Prints one timing line per route; any leak fails an assertion (exit code 1). The parent test
checks that stderr stays empty: no resource_tracker, "Exception ignored" or "leaked" lines.
"""

import gc
import multiprocessing
import os
import sys
import time
from multiprocessing import forkserver, resource_tracker, shared_memory

import numpy as np

import course_lib as grain

created: list[str] = []  # every segment this process creates
_original_init = shared_memory.SharedMemory.__init__


def _recording_init(self, name=None, create=False, size=0):
    _original_init(self, name, create, size)
    if create:
        created.append(self.name)


shared_memory.SharedMemory.__init__ = _recording_init


class Jitter(grain.RandomMapTransform):
    def random_map(self, element, rng):
        return element + rng.normal(size=element.shape).astype(np.float32)


LOADER = grain.DataLoader(
    data_source=grain.ArrayDataSource(np.ones((64, 4), np.float32)),
    sampler=grain.IndexSampler(64, shuffle=True, seed=0, num_epochs=None),
    operations=[Jitter(), grain.Batch(4)], worker_count=2)


class TrainingError(Exception):
    pass


def route_break():
    for _ in LOADER:
        break


def route_del():
    iterator = iter(LOADER)
    next(iterator)
    del iterator


def route_close():
    iterator = iter(LOADER)
    next(iterator)
    iterator.close()
    iterator.close()  # twice is fine


def route_with():
    with iter(LOADER) as iterator:
        next(iterator)


def route_keyboard_interrupt():
    try:
        for _ in LOADER:
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass


def route_exception():
    try:
        for _ in LOADER:
            raise TrainingError("the loss is NaN")
    except TrainingError:
        pass


def _children_of(parent: int) -> list[int]:
    """Live (not zombie) child processes of `parent`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent and fields[0] != "Z":
            found.append(int(entry))
    return found


def _children() -> list[int]:
    """Live child processes of this one, except multiprocessing's resource tracker and fork
    server, and the live children of the fork server (the workers are forked from it)."""
    tracker = resource_tracker._resource_tracker._pid
    fork_server = forkserver._forkserver._forkserver_pid
    found = [pid for pid in _children_of(os.getpid()) if pid not in (tracker, fork_server)]
    return found + (_children_of(fork_server) if fork_server is not None else [])


def check_clean(route: str, round_index: int) -> None:
    assert not multiprocessing.active_children(), (route, round_index)
    assert not _children(), (route, round_index, _children())
    left = [name for name in created if os.path.exists(f"/dev/shm/{name}")]
    assert not left, (route, round_index, left)


def main() -> None:
    for argument in sys.argv[1:]:
        route, rounds = argument.split("=")
        run = globals()[f"route_{route}"]
        start = time.perf_counter()
        for round_index in range(int(rounds)):
            run()
            check_clean(route, round_index)
        elapsed = time.perf_counter() - start
        print(f"{route}: {rounds} rounds, {elapsed / int(rounds):.3f} s per round", flush=True)
    gc.collect()
    check_clean("end", 0)
    assert created, "no shared memory was used: the script tests nothing"
    print("clean", flush=True)


main()
