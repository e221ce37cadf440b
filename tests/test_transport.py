"""Results cross from worker to main process through shared memory, then into reused memory."""

import numpy as np

from course_lib.transport import HostBuffers, SlotOwner, SlotWriter, needed_bytes, serialize


def _send(owner: SlotOwner, writer: SlotWriter, result):
    skeleton, buffers = serialize(result)
    name, size = owner.slot(0, 0)
    if needed_bytes(buffers) > size:
        name, _ = owner.grow(0, 0, needed_bytes(buffers))
    return owner.read(name, skeleton, writer.write(name, buffers))


def test_a_batch_still_held_is_never_overwritten_by_the_next_one():
    owner, writer = SlotOwner(), SlotWriter()
    try:
        held = _send(owner, writer, {"x": np.full((64, 100), 1.0), "y": np.arange(64)})
        for value in (2.0, 3.0, 4.0):
            latest = _send(owner, writer, {"x": np.full((64, 100), value), "y": np.arange(64)})
            assert np.all(latest["x"] == value)
        assert np.all(held["x"] == 1.0), "a later result was written into a batch still in use"
        assert held["x"].flags.writeable
    finally:
        writer.close()
        owner.close()


def test_host_buffers_are_reused_once_released_and_not_before():
    buffers = HostBuffers()
    view = memoryview(buffers.take(1000))  # a result built on the first buffer is alive
    second = buffers.take(1000)
    assert second is not view.obj, "a buffer in use was handed out again"
    first_id = id(view.obj)
    del view, second
    assert id(buffers.take(500)) == first_id, "a released buffer was not reused"
