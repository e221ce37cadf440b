"""Ctrl-C while a Dataset pipeline with worker processes is making its next batches: the
KeyboardInterrupt reaches the loop. Prints "interrupted", the worker pids, the names of
the shared memory segments this process created, which tests/test_iter_dataset.py then
checks are gone, and the seconds from the signal to the loop's `except`."""

import json
import os
import signal
import threading
import time
from multiprocessing import shared_memory

import numpy as np

import course_lib as grain


def slow_pid(x):
    time.sleep(0.02)
    return np.full(2, os.getpid())


CREATED: list[str] = []
SIGNALLED_AT: list[float] = []


def interrupt() -> None:
    SIGNALLED_AT.append(time.perf_counter())
    os.kill(os.getpid(), signal.SIGINT)


def _record_created_segments() -> None:
    original_init = shared_memory.SharedMemory.__init__

    def recording_init(self, name=None, create=False, size=0):
        original_init(self, name, create, size)
        if create:
            CREATED.append(self.name)

    shared_memory.SharedMemory.__init__ = recording_init


def main():
    # Python's own Ctrl-C handler, even where this process inherited SIGINT ignored (a suite
    # started in the background by a shell): otherwise the signal below does nothing.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _record_created_segments()
    ds = (grain.MapDataset.range(2000).map(slow_pid).to_iter_dataset().batch(4)
          .mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    pids = set()
    try:
        for count, batch in enumerate(ds):
            pids.add(int(batch[0, 0]))
            if count == 40:  # signal while the next batches are still being made
                threading.Timer(0.01, interrupt).start()
    except KeyboardInterrupt:
        elapsed = time.perf_counter() - SIGNALLED_AT[0]
        print("interrupted", json.dumps(sorted(pids), separators=(",", ":")),
              json.dumps(CREATED, separators=(",", ":")),
              f"{elapsed:.3f}")


if __name__ == "__main__":
    main()
