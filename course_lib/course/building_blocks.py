"""Lesson 2, building blocks: reading course_lib's account of where an iterator ran.

Lesson 2 writes its loaders and its timing loop in its own cells and judges them with
`course.table`; nothing here builds a loader or times one. What stays is the reader of an
iterator's `execution` line (which thread read, transformed and batched, and why), which
`benchmarks/bench_probes.py` uses to check the shape it forced. Where each piece runs, in
course_lib and in Grain, is on the reference page `docs/inside/building_blocks.md`.
"""

from __future__ import annotations

import dataclasses
import re


# -- course_lib's own account of where an iterator ran (`execution`) ----------------------
@dataclasses.dataclass(frozen=True)
class Execution:
    """course_lib's `iterator.execution` line, read.

    `place`: "workers", "batch thread" or "this thread" (the batch thread's choice, made
    on the second chunk). `read_threads`: the read threads the first chunk chose (0: none),
    and `why_no_read_threads` why none: "forbidden" (`ReadOptions(num_threads=0)`),
    "capped" (work that computes, capped at this process's share of the cores), "cheap"
    (under the thresholds), "empty", or "" when they run or with workers. `reads` is the
    read threads' part of the line, with its figures."""

    text: str
    place: str
    read_threads: int
    why_no_read_threads: str
    reads: str


def read_execution(execution: str) -> Execution:
    """Read course_lib's `DataLoaderIterator.execution` (also an Engine iterator's); a line
    this does not know (a loader not started yet, another format) raises `ValueError`."""
    if execution.startswith("in worker processes"):
        return Execution(execution, "workers", 0, "", "")
    inline = "in the caller's thread, no batch thread and "
    if execution.startswith(inline):
        place, reads = "this thread", execution[len(inline):]
    elif "; " in execution:
        batch, reads = execution.split("; ", 1)
        if batch.startswith("on the batch thread"):
            place = "batch thread"
        elif batch.startswith("in the caller's thread"):
            place = "this thread"
        else:
            raise ValueError(f"not a decided batch thread: {batch!r}")
    else:
        raise ValueError(f"not an execution line of a started iterator: {execution!r}")
    counted = re.match(r"(\d+) read threads?:", reads)
    if counted:
        return Execution(execution, place, int(counted.group(1)), "", reads)
    if not reads.startswith("no read threads:"):
        raise ValueError(f"not a decided read-thread count: {reads!r}")
    if reads.startswith("no read threads: ReadOptions("):
        why = "forbidden"
    elif reads.startswith("no read threads: the first chunk was empty"):
        why = "empty"
    elif "capped at this process's share of the cores" in reads:
        why = "capped"
    else:
        why = "cheap"
    return Execution(execution, place, 0, why, reads)
