"""A prefetch iterator reports the position the consumer has reached, not its read-ahead."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import course_lib as grain
from course_lib.device import prefetch_to_device

BATCH_SIZE = 4


def make_loader(worker_count: int, num_epochs: int | None = None) -> grain.DataLoader:
    return grain.load(grain.RangeDataSource(0, 400, 1), num_epochs=num_epochs, shuffle=True,
                      seed=5, batch_size=BATCH_SIZE, worker_count=worker_count)


def next_index(state) -> int:
    return json.loads(state)["next_index"]


def wait_until_full(iterator) -> None:
    deadline = time.monotonic() + 20
    while not iterator._buffer.full() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert iterator._buffer.full(), "the prefetch thread did not read ahead"


def take(iterator, count: int) -> list[list[int]]:
    return [np.asarray(next(iterator)).tolist() for _ in range(count)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_count", [0, 2])
def test_state_is_the_consumed_position_while_the_loader_reads_ahead(worker_count):
    source = iter(make_loader(worker_count))
    with prefetch_to_device(source, size=2) as batches:
        take(batches, 3)
        wait_until_full(batches)
        assert next_index(batches.get_state()) == 3 * BATCH_SIZE
        assert next_index(source.get_state()) > 3 * BATCH_SIZE  # the trap: it stands further on


def test_state_before_the_first_batch_is_the_start_of_the_stream():
    with prefetch_to_device(iter(make_loader(0)), size=2) as batches:
        wait_until_full(batches)
        assert next_index(batches.get_state()) == 0


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("saved_with", "restored_with"), [(0, 0), (2, 2), (2, 0)])
def test_set_state_continues_with_the_batch_after_the_last_one_consumed(saved_with,
                                                                      restored_with):
    expected = take(iter(make_loader(0)), 8)
    with prefetch_to_device(iter(make_loader(saved_with)), size=3) as batches:
        seen = take(batches, 5)
        wait_until_full(batches)
        state = batches.get_state()
    with prefetch_to_device(iter(make_loader(restored_with)), size=3) as resumed:
        resumed.set_state(state)
        assert next_index(resumed.get_state()) == next_index(state) == 5 * BATCH_SIZE
        assert seen + take(resumed, 3) == expected


@pytest.mark.timeout(60)
def test_set_state_on_a_running_iterator_drops_its_read_ahead():
    expected = take(iter(make_loader(0)), 6)
    with prefetch_to_device(iter(make_loader(0)), size=2) as batches:
        take(batches, 2)
        rewind_to = batches.get_state()
        take(batches, 3)
        wait_until_full(batches)
        batches.set_state(rewind_to)
        assert take(batches, 4) == expected[2:6]


@pytest.mark.timeout(60)
def test_set_state_after_the_end_of_the_data_starts_again():
    with prefetch_to_device(iter(make_loader(0, num_epochs=1)), size=2) as batches:
        start = batches.get_state()
        first_pass = [np.asarray(batch).tolist() for batch in batches]
        batches.set_state(start)
        assert [np.asarray(batch).tolist() for batch in batches] == first_pass
    assert len(first_pass) == 400 // BATCH_SIZE


@pytest.mark.timeout(60)
def test_a_refused_state_leaves_the_iterator_where_the_consumer_stood():
    expected = take(iter(make_loader(0)), 4)
    other_loader_state = iter(grain.load(grain.RangeDataSource(0, 10, 1))).get_state()
    with prefetch_to_device(iter(make_loader(0)), size=2) as batches:
        take(batches, 2)
        wait_until_full(batches)
        with pytest.raises(ValueError, match="Cannot restore"):
            batches.set_state(other_loader_state)
        assert next_index(batches.get_state()) == 2 * BATCH_SIZE
        assert take(batches, 2) == expected[2:]


@pytest.mark.parametrize("method", ["get_state", "set_state"])
def test_a_source_without_a_position_names_the_fix(method):
    def batches_from_a_generator():
        yield from (np.full(2, step) for step in range(5))

    with prefetch_to_device(batches_from_a_generator()) as batches:
        next(batches)
        call = getattr(batches, method)
        arguments = () if method == "get_state" else ({},)
        with pytest.raises(TypeError, match=r"\(generator\) has no get_state\(\).*iter\(loader\)"):
            call(*arguments)


def test_set_state_after_close_asks_for_a_new_iterator():
    batches = prefetch_to_device(iter(make_loader(0)))
    state = batches.get_state()
    batches.close()
    with pytest.raises(RuntimeError, match=r"closed prefetch iterator.*prefetch_to_device"):
        batches.set_state(state)
