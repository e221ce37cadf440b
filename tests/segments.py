"""Watching what a worker pool shares, sends and leaves behind: the shared memory segments a
test creates, the size of the payload pickled for the workers, and whether a worker process
is still alive. Shared by the worker tests."""

from __future__ import annotations

import os
from multiprocessing import shared_memory

import course_lib.workers


def record_created_segments(monkeypatch) -> list[str]:
    """Names of the shared memory segments this process creates from now on."""
    created: list[str] = []
    original_init = shared_memory.SharedMemory.__init__

    def recording_init(self, name=None, create=False, size=0):
        original_init(self, name, create, size)
        if create:
            created.append(self.name)

    monkeypatch.setattr(shared_memory.SharedMemory, "__init__", recording_init)
    return created


def existing_segments(names) -> list[str]:
    """Those of `names` that still exist in /dev/shm."""
    return [name for name in names if os.path.exists(f"/dev/shm/{name}")]


def record_payload_sizes(monkeypatch) -> list[int]:
    """Sizes in bytes of the payloads (source, sampler, pipeline) pickled for the workers
    from now on, one per worker pool started."""
    sizes: list[int] = []
    pickle_payload = course_lib.workers._pickle_payload

    def measured(*args):
        payload = pickle_payload(*args)
        sizes.append(len(payload))
        return payload

    monkeypatch.setattr(course_lib.workers, "_pickle_payload", measured)
    return sizes


def process_alive(pid: int) -> bool:
    """Whether process `pid` still runs: a zombie (exited, not yet reaped) counts as gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
