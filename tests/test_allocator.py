"""A running loader keeps freed memory for reuse (glibc's malloc thresholds, allocator.py).

Each check runs in a fresh interpreter, whose malloc has not been tuned by anything else,
and asks glibc itself (`mallinfo2`) where a 24 MiB block came from: a block of its own
mapping (`hblks` grows) is what glibc does with the default thresholds, the heap is what it
does once course_lib raised them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from course_lib import ArrayDataSource, Batch, DataLoader, IndexSampler, allocator

pytestmark = pytest.mark.skipif(
    allocator._glibc() is None or not hasattr(allocator._glibc(), "mallinfo2"),
    reason="needs glibc 2.33 or newer (mallopt and mallinfo2)")

PROBE = r"""
import ctypes, ctypes.util, json, sys
import numpy as np
from course_lib import ArrayDataSource, Batch, DataLoader, IndexSampler, allocator

libc = ctypes.CDLL(ctypes.util.find_library("c"))
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
BLOCK = 24 << 20
held = []

def block_is_mapped():
    # Kept until the end: freeing a mapped block would move glibc's own threshold.
    before = libc.mallinfo2().hblks
    held.append(libc.malloc(BLOCK))
    return libc.mallinfo2().hblks > before

loader = DataLoader(data_source=ArrayDataSource(np.arange(64.0)),
                    sampler=IndexSampler(64, num_epochs=1), operations=[Batch(8)],
                    worker_count=int(sys.argv[1]))
seen = {"mapped_before": block_is_mapped()}
iterator = iter(loader)
next(iterator)
seen["mapped_while_iterating"] = block_is_mapped()
seen["raised_while_iterating"] = allocator.thresholds_raised()
kept = libc.malloc(BLOCK)
libc.free(kept)
seen["heap_kept_mb"] = libc.mallinfo2().arena / 2**20
iterator.close()
seen["heap_after_close_mb"] = libc.mallinfo2().arena / 2**20
seen["mapped_after_close"] = block_is_mapped()
for pointer in held:
    libc.free(pointer)
print(json.dumps(seen))
"""


def _probe(worker_count: int = 0, **environment: str) -> dict:
    env = {name: value for name, value in os.environ.items()
           if name not in (allocator.OPT_OUT_VARIABLE, *allocator.GLIBC_VARIABLES)}
    env.update(environment)
    done = subprocess.run([sys.executable, "-c", PROBE, str(worker_count)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("worker_count", [0, 1])
def test_thresholds_are_raised_while_an_iterator_runs(worker_count):
    seen = _probe(worker_count)
    assert seen["mapped_before"], "the probe needs glibc's default thresholds at the start"
    assert not seen["mapped_while_iterating"], "a 24 MiB block still got its own mapping"
    assert seen["raised_while_iterating"]


def test_closing_the_last_iterator_hands_kept_memory_back_and_keeps_thresholds():
    seen = _probe()
    assert seen["heap_kept_mb"] >= 24, "a freed 24 MiB block was not kept for reuse"
    assert seen["heap_after_close_mb"] <= seen["heap_kept_mb"] - 16, (
        f"close() left {seen['heap_after_close_mb']:.0f} MiB of heap "
        f"(was {seen['heap_kept_mb']:.0f}): malloc_trim did not run")
    assert not seen["mapped_after_close"], "allocator.py documents that thresholds stay raised"


@pytest.mark.parametrize("value", ["0", "off"])
def test_opt_out_variable_leaves_malloc_alone(value):
    seen = _probe(**{allocator.OPT_OUT_VARIABLE: value})
    assert seen["mapped_while_iterating"], "malloc was tuned although the user opted out"
    assert not seen["raised_while_iterating"]


def test_users_own_glibc_threshold_wins():
    seen = _probe(MALLOC_MMAP_THRESHOLD_=str(1 << 20))
    assert seen["mapped_while_iterating"], "course_lib overrode MALLOC_MMAP_THRESHOLD_"
    assert not seen["raised_while_iterating"]


def test_without_glibc_a_loader_runs_and_tunes_nothing(monkeypatch):
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    monkeypatch.setattr(allocator, "_thresholds_raised", False)
    monkeypatch.setattr(allocator, "_running_iterators", 0)
    loader = DataLoader(data_source=ArrayDataSource(np.arange(10)),
                        sampler=IndexSampler(10, num_epochs=1), operations=[Batch(5)])
    with iter(loader) as iterator:
        batches = [batch.tolist() for batch in iterator]
    assert batches == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert not allocator.thresholds_raised()
    assert allocator._running_iterators == 0, "close() did not stop counting the iterator"

