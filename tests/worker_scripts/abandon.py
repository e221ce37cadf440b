"""Leave the interpreter while a worker iterator is still open (never closed).

Run by tests/test_worker_cleanup.py as `abandon.py MODE`; prints a JSON line with the worker
pids and the shared memory segments this process created, so the parent can check after
exit that all are gone. Modes:
  suspended: the script simply ends with the iterator mid-stream, held in a global.
  exit:      sys.exit() from inside the loop.
  crash:     an uncaught exception from inside the loop (exit code 1, a traceback).
"""

import json
import multiprocessing
import sys
from multiprocessing import shared_memory

import numpy as np

import course_lib as grain

created: list[str] = []
_original_init = shared_memory.SharedMemory.__init__


def _recording_init(self, name=None, create=False, size=0):
    _original_init(self, name, create, size)
    if create:
        created.append(self.name)


shared_memory.SharedMemory.__init__ = _recording_init

loader = grain.DataLoader(
    data_source=grain.ArrayDataSource(np.ones((64, 4), np.float32)),
    sampler=grain.IndexSampler(64, num_epochs=None), operations=[grain.Batch(4)],
    worker_count=2)


def report() -> None:
    pids = [p.pid for p in multiprocessing.active_children()]
    print(json.dumps({"pids": pids, "segments": created}), flush=True)


mode = sys.argv[1]
if mode == "suspended":
    iterator = iter(loader)
    next(iterator)
    report()
else:
    for step, _ in enumerate(loader):
        if step == 3:
            report()
            if mode == "exit":
                sys.exit(0)
            raise RuntimeError("the training loop crashed")
