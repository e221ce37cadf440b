"""Batches reach the device in the background, and local batches form one global batch."""

from __future__ import annotations

import gc
import json
import threading
import time
import traceback
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import SingleDeviceSharding

from course_lib.device import (
    batch_sharding,
    data_parallel_mesh,
    make_global_batch,
    prefetch_to_device,
    replicated_sharding,
)
from course_lib.launch import launch

SCRIPTS = Path(__file__).parent / "multiprocess"


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "prefetch_to_device"]


def wait_for_no_prefetch_threads(seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while prefetch_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not prefetch_threads(), "a prefetch thread was left running"


def numbered_batches(count: int):
    for step in range(count):
        yield {"image": np.full((2, 3), step, np.float32), "label": (np.array([step, step]),)}


class EndlessSource:
    """An endless iterator that remembers whether it was closed."""

    def __init__(self):
        self.closed = False
        self.produced = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.produced += 1
        return np.full(4, self.produced)

    def close(self):
        self.closed = True


@pytest.mark.timeout(30)
def test_prefetch_keeps_order_and_structure_and_returns_device_arrays():
    batches = list(prefetch_to_device(numbered_batches(5), size=2))
    assert len(batches) == 5
    for step, batch in enumerate(batches):
        assert isinstance(batch["image"], jax.Array)
        assert isinstance(batch["label"], tuple) and isinstance(batch["label"][0], jax.Array)
        np.testing.assert_array_equal(batch["image"], np.full((2, 3), step))
        np.testing.assert_array_equal(batch["label"][0], [step, step])
    wait_for_no_prefetch_threads()


@pytest.mark.timeout(30)
def test_prefetch_raises_the_source_error_with_its_traceback():
    def failing_source():
        yield np.zeros(2)
        yield np.ones(2)
        raise ValueError("record 2 is corrupt")

    iterator = prefetch_to_device(failing_source())
    assert len([next(iterator), next(iterator)]) == 2
    with pytest.raises(ValueError, match="record 2 is corrupt") as caught:
        next(iterator)
    frames = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert "failing_source" in frames, frames
    with pytest.raises(StopIteration):
        next(iterator)
    wait_for_no_prefetch_threads()


@pytest.mark.timeout(30)
def test_close_with_a_full_queue_stops_promptly_and_closes_the_source():
    source = EndlessSource()
    iterator = prefetch_to_device(source, size=2)
    next(iterator)
    deadline = time.monotonic() + 5
    while iterator._buffer.qsize() < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert iterator._buffer.full()  # the producer is now blocked on a full queue
    start = time.monotonic()
    iterator.close()
    assert time.monotonic() - start < 2
    assert source.closed
    assert not prefetch_threads()
    with pytest.raises(StopIteration):
        next(iterator)


@pytest.mark.timeout(30)
def test_context_manager_closes_after_a_break():
    source = EndlessSource()
    with prefetch_to_device(source, size=3) as batches:
        for step, batch in enumerate(batches):
            np.testing.assert_array_equal(batch, np.full(4, step + 1))
            if step == 2:
                break
    assert source.closed
    assert not prefetch_threads()


@pytest.mark.timeout(30)
def test_close_after_the_end_of_the_data_closes_the_source():
    class FiniteSource(EndlessSource):
        def __next__(self):
            if self.produced == 3:
                raise StopIteration
            return super().__next__()

    source = FiniteSource()
    iterator = prefetch_to_device(source)
    assert len(list(iterator)) == 3
    assert not source.closed  # still open, so that set_state could start it again
    iterator.close()
    assert source.closed


@pytest.mark.timeout(30)
def test_abandoned_iterator_does_not_leave_its_thread_behind():
    source = EndlessSource()
    iterator = prefetch_to_device(source, size=2)
    next(iterator)
    del iterator
    gc.collect()
    wait_for_no_prefetch_threads()
    assert source.closed


@pytest.mark.timeout(30)
def test_prefetch_places_batches_on_the_given_sharding():
    sharding = SingleDeviceSharding(jax.devices()[0])
    with prefetch_to_device(numbered_batches(3), sharding=sharding) as batches:
        for batch in batches:
            assert batch["image"].sharding == sharding


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"iterator": 3}, TypeError, "iterator=3 is not iterable"),
        ({"size": 0}, ValueError, "size=0 must be positive"),
        ({"sharding": "cpu"}, TypeError, "sharding='cpu' must be a jax.sharding.Sharding"),
    ],
)
def test_prefetch_rejects_bad_arguments(kwargs, error, message):
    arguments = {"iterator": [], **kwargs}
    with pytest.raises(error, match=message):
        prefetch_to_device(**arguments)


def test_single_process_global_batch_is_the_local_batch():
    mesh = data_parallel_mesh()
    local = {"x": np.arange(6.0).reshape(2, 3), "y": np.arange(2)}
    global_batch = make_global_batch(local, mesh)
    assert global_batch["x"].sharding == batch_sharding(mesh)
    np.testing.assert_array_equal(global_batch["x"], local["x"])
    assert replicated_sharding(mesh).is_fully_replicated


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ({}, "has no arrays"),
        ({"x": np.zeros((2, 3)), "step": np.int32(4)}, r"leaf \['step'\] is a scalar"),
        ({"x": np.zeros((2, 3)), "y": np.zeros(3)}, r"different batch sizes \[2, 3\]"),
    ],
)
def test_make_global_batch_explains_bad_batches(batch, message):
    with pytest.raises(ValueError, match=message):
        make_global_batch(batch, data_parallel_mesh())


def test_make_global_batch_rejects_a_non_mesh():
    with pytest.raises(TypeError, match=r"mesh_or_sharding='data' must be a jax\.sharding\.Mesh"):
        make_global_batch({"x": np.zeros((2, 3))}, "data")


@pytest.mark.timeout(60)
def test_two_process_data_parallel_gradient_equals_the_single_process_gradient():
    result = launch(SCRIPTS / "global_batch.py", num_processes=2, devices_per_process=2,
                    timeout=45)
    reports = [json.loads(line.removeprefix("RESULT ")) for rank in result.ranks
               for line in rank.output.splitlines() if line.startswith("RESULT ")]
    assert len(reports) == 2
    # The same data as the script builds, all of it, on this process's one device.
    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(8, 3)).astype(np.float32)
    targets = rng.normal(size=(8,)).astype(np.float32)
    weights = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    expected = jax.grad(lambda w: jnp.mean((inputs @ w - targets) ** 2))(weights)
    for report in reports:
        assert report["device_count"] == 4
        assert report["global_shape"] == [8, 3] and report["local_shards"] == 2
        assert report["gathered_equals_full"], "global batch rows are not in process order"
        np.testing.assert_allclose(report["grad"], expected, rtol=1e-5, atol=1e-6)
        assert report["prefetched_shapes"] == [[8, 3], [8, 3]]
