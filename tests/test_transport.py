"""Results cross from worker to main process through shared memory and are used in place."""

import collections
import gc
import os
import sys
from multiprocessing import shared_memory

import numpy as np
import pytest

from course_lib import transport
from course_lib.transport import SlotOwner, SlotWriter, needed_bytes, serialize

_units = iter(range(10**6))


def _send(owner: SlotOwner, writer: SlotWriter, result, worker: int = 0):
    """What a unit's round trip does: get a slot, write (growing one if needed), read."""
    unit = next(_units)
    skeleton, buffers = serialize(result)
    name = owner.slot(worker, unit)
    writer.forget(*owner.to_unmap(worker))
    layout = writer.write(name, buffers)
    if layout is None:
        writer.forget(name)
        name = owner.grow(worker, unit, needed_bytes(buffers))
        layout = writer.write(name, buffers)
    return name, owner.read(unit, name, skeleton, layout)


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


# -- stacking straight into the slot (the worker side) --------------------------------------
def _stacked_into_arena(owner, writer, records):
    """What a worker does: stack into the slot's arena, then write and read back."""
    from course_lib.transforms import stack_records

    name = owner.grow(0, 0, 1 << 20)
    arena = writer.arena(name)
    batch = stack_records(records, empty=arena.empty)
    skeleton, buffers = serialize(batch)
    layout = writer.write(name, buffers, arena)
    return name, batch, arena, owner.read(0, name, skeleton, layout)


def test_a_batch_stacked_into_the_arena_is_sent_without_a_copy(endpoints):
    owner, writer = endpoints
    records = [{"x": np.full((4, 5), i, np.float32), "y": np.int64(i)} for i in range(8)]
    name, batch, arena, result = _stacked_into_arena(owner, writer, records)
    assert np.shares_memory(batch["x"], arena.slot), "the batch was not stacked in the slot"
    base = owner._by_name[name].base
    assert np.shares_memory(result["x"], base) and np.shares_memory(result["y"], base)
    np.testing.assert_array_equal(result["x"], np.stack([r["x"] for r in records]))
    np.testing.assert_array_equal(result["y"], np.arange(8))


def test_copies_go_after_what_the_arena_handed_out(endpoints):
    owner, writer = endpoints
    name = owner.grow(0, 0, 1 << 16)
    arena = writer.arena(name)
    in_slot = arena.empty((10,), np.float64)
    in_slot[:] = 7.0
    elsewhere = np.arange(10.0)
    skeleton, buffers = serialize((in_slot, elsewhere))
    layout = writer.write(name, buffers, arena)
    assert layout[0][0] == 0 and layout[1][0] >= arena.used
    got = owner.read(0, name, skeleton, layout)
    np.testing.assert_array_equal(got[0], np.full(10, 7.0))
    np.testing.assert_array_equal(got[1], elsewhere)


def test_arena_refuses_what_does_not_fit_or_holds_objects(endpoints):
    owner, writer = endpoints
    name = owner.grow(0, 0, 1000)
    size = owner._by_name[name].size
    arena = writer.arena(name)
    assert arena.empty((3,), object) is None
    assert arena.empty((size + 1,), np.uint8) is None
    assert arena.empty((10,), np.int32).shape == (10,)


def test_write_asks_for_a_bigger_slot_when_the_result_does_not_fit(endpoints):
    owner, writer = endpoints
    name = owner.grow(0, 0, 100)
    size = owner._by_name[name].size
    skeleton, buffers = serialize(np.ones(size + 1, np.uint8))
    assert writer.write(name, buffers) is None
    assert writer.write("", buffers) is None  # no slot yet
    bigger = owner.grow(0, 0, needed_bytes(buffers))
    got = owner.read(0, bigger, skeleton, writer.write(bigger, buffers))
    assert got.sum() == size + 1


def test_no_arena_while_an_array_from_an_earlier_unit_still_views_the_slot(endpoints):
    owner, writer = endpoints
    name = owner.grow(0, 0, 1 << 16)
    kept = writer.arena(name).empty((4,), np.float32)  # e.g. a transform kept it
    assert writer.arena(name) is None, "the next unit would overwrite an array still in use"
    del kept
    assert writer.arena(name) is not None


def test_results_are_copied_once_too_many_retired_slots_are_held(endpoints):
    """Held batches pin shared memory, which may be small: past a few retired slots, results
    come back as copies, so their slot is free again at once."""
    owner, writer = endpoints
    held = []
    count = owner.slots_per_worker + SlotOwner.MAX_HELD_RETIRED
    for value in range(count):
        held.append(_send(owner, writer, _batch(float(value)))[1])
    assert owner.held_retired() == SlotOwner.MAX_HELD_RETIRED
    name, copied = _send(owner, writer, _batch(9.0))
    assert not np.shares_memory(copied["x"], owner._by_name[name].base)
    again, _ = _send(owner, writer, _batch(10.0))
    assert again == name, "a slot whose result was copied out was not reused"
    assert [float(batch["x"][0, 0]) for batch in held] == [float(v) for v in range(count)]
    assert np.all(copied["x"] == 9.0)
    del held
    gc.collect()
    assert owner.held_retired() == 0


def test_a_few_held_batches_reuse_the_slots_instead_of_creating_new_ones(endpoints):
    """A prefetcher holds a few batches at any time; their slots are reused in turn, not
    retired and replaced by a new segment for every unit."""
    owner, writer = endpoints
    held = collections.deque(maxlen=owner.slots_per_worker - 1)
    names = set()
    for value in range(50):
        name, result = _send(owner, writer, _batch(float(value)))
        held.append(result)
        names.add(name)
        assert np.all(result["x"] == value)
    assert len(names) == owner.slots_per_worker  # the held ones and one being written
    assert owner.held_retired() == 0


def test_past_the_cap_the_oldest_held_slot_is_retired_and_the_worker_told_to_unmap_it(
        endpoints):
    owner, writer = endpoints
    held = [_send(owner, writer, _batch(float(value)), worker=1)
            for value in range(owner.slots_per_worker)]
    assert owner.slot(1, chunk=999) == "", "every slot is held: none may be handed out"
    assert owner.to_unmap(1) == (held[0][0],), "the oldest held slot was not retired"
    assert owner.to_unmap(1) == (), "a worker is told once"
    assert not os.path.exists(f"/dev/shm/{held[0][0]}"), "a retired slot kept its name"
    assert float(held[0][1]["x"][0, 0]) == 0.0, "retiring invalidated a batch still held"


class _InterruptedSlot(transport._Slot):
    """A slot whose segment exists when Ctrl-C arrives, before its owner has recorded it."""

    def __init__(self, name: str, size: int):
        super().__init__(name, size)
        raise KeyboardInterrupt


def _segment_exists(name: str) -> bool:
    try:
        segment = shared_memory.SharedMemory(name=name)
    except FileNotFoundError:
        return False
    segment.close()
    return True


def test_close_unlinks_a_slot_whose_creation_ctrl_c_interrupted(monkeypatch):
    """Ctrl-C can land between a slot's creation and its owner's record of it (the Dataset
    Ctrl-C test once left one such segment for the resource tracker to report)."""
    owner = SlotOwner()
    monkeypatch.setattr(transport, "_Slot", _InterruptedSlot)
    with pytest.raises(KeyboardInterrupt):
        owner.grow(worker=0, chunk=0, nbytes=100)
    name = f"{owner.prefix}_0_1"
    assert _segment_exists(name)
    owner.close()
    assert not _segment_exists(name)
