"""Results cross from worker to main process through shared memory and are used in place."""

import gc
import os
import sys

import numpy as np
import pytest

from course_lib.transport import SlotOwner, SlotWriter, needed_bytes, serialize


def _send(owner: SlotOwner, writer: SlotWriter, result, worker: int = 0, ring_index: int = 0):
    skeleton, buffers = serialize(result)
    name, size = owner.slot(worker, ring_index)
    if needed_bytes(buffers) > size:
        name, _ = owner.grow(worker, ring_index, needed_bytes(buffers))
    return name, owner.read(name, skeleton, writer.write(name, buffers))


def _batch(value: float) -> dict:
    return {"x": np.full((64, 100), value), "y": np.arange(64)}


def _mapped_slots(prefix: str) -> int:
    """How many mappings of this owner's segments the process still has (Linux only)."""
    with open("/proc/self/maps") as maps:
        return sum(prefix in line for line in maps)


@pytest.fixture
def endpoints():
    owner, writer = SlotOwner(), SlotWriter()
    yield owner, writer
    writer.close()
    owner.close()


def test_a_result_is_a_view_of_shared_memory_not_a_copy(endpoints):
    owner, writer = endpoints
    name, result = _send(owner, writer, _batch(1.0))
    base = owner._by_name[name].base
    assert np.shares_memory(result["x"], base) and np.shares_memory(result["y"], base)
    assert result["x"].flags.writeable and result["x"].flags.c_contiguous


def test_a_released_slot_is_reused(endpoints):
    owner, writer = endpoints
    first_name, result = _send(owner, writer, _batch(1.0))
    del result
    second_name, result = _send(owner, writer, _batch(2.0))
    assert second_name == first_name, "a slot nobody refers to was replaced instead of reused"
    assert np.all(result["x"] == 2.0)


def test_a_batch_still_held_is_never_overwritten_by_the_next_one(endpoints):
    owner, writer = endpoints
    held_name, held = _send(owner, writer, _batch(1.0))
    names = set()
    for value in (2.0, 3.0, 4.0):
        name, latest = _send(owner, writer, _batch(value))
        names.add(name)
        assert np.all(latest["x"] == value)
    assert held_name not in names, "a slot still in use was handed to the worker again"
    assert np.all(held["x"] == 1.0), "a later result was written into a batch still in use"


def test_one_array_kept_from_a_batch_keeps_its_slot_in_use(endpoints):
    owner, writer = endpoints
    name, result = _send(owner, writer, _batch(1.0))
    labels = result["y"]
    del result
    new_name, _ = _send(owner, writer, _batch(2.0))
    assert new_name != name
    assert np.array_equal(labels, np.arange(64))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_retired_and_closed_slots_disappear_once_their_last_array_is_freed():
    owner, writer = SlotOwner(), SlotWriter()
    held = [_send(owner, writer, _batch(float(value)))[1] for value in range(3)]
    writer.close()
    owner.close()
    assert not [entry for entry in os.listdir("/dev/shm") if entry.startswith(owner.prefix)]
    assert [float(batch["x"][0, 0]) for batch in held] == [0.0, 1.0, 2.0], \
        "closing the owner invalidated batches that were still held"
    assert _mapped_slots(owner.prefix) == 3
    del held
    gc.collect()
    assert _mapped_slots(owner.prefix) == 0, "a slot stayed mapped after its arrays were freed"
