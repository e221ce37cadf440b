"""Watching the shared memory segments a test creates, shared by the worker tests."""

from __future__ import annotations

import os
from multiprocessing import shared_memory


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
