"""IterDataset on the DataLoader's engine: course_lib's promises where Grain's mp_prefetch
only warns (the same elements at any worker count after filter and mix, a state of plain
numbers that restores at any worker and thread count, errors at their own element, nothing
left behind)."""

import gc
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import pytest

import course_lib as grain
from course_lib.dataset_engine import EngineIterator
from tests.segments import existing_segments, process_alive, record_created_segments

WORKERS = (0, 1, 2, 3)


def listed(iterable):
    return [np.asarray(element).tolist() for element in iterable]


def keep(x):
    return x % 3 != 0


def jitter(x, rng):
    return int(x * 1000 + rng.integers(1000))


def filtered_pipeline(num_workers: int, read_options=None):
    return (grain.MapDataset.range(120).shuffle(seed=5).to_iter_dataset(read_options)
            .filter(keep).random_map(jitter, seed=2).batch(7)
            .mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers)))


def mixed_pipeline(num_workers: int):
    letters = grain.MapDataset.range(60).map(lambda x: x + 1000).filter(keep)
    digits = grain.MapDataset.range(40).shuffle(seed=1)
    return (grain.IterDataset.mix([letters.to_iter_dataset(), digits.to_iter_dataset()],
                                  [0.7, 0.3])
            .batch(4, drop_remainder=True)
            .mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers)))


def test_elements_after_filter_are_the_same_at_every_worker_count():
    expected = listed(filtered_pipeline(0))
    assert len(expected) == 12  # 80 survivors in batches of 7
    for num_workers in WORKERS[1:]:
        assert listed(filtered_pipeline(num_workers)) == expected, num_workers


def test_elements_after_mix_are_the_same_at_every_worker_count():
    expected = listed(mixed_pipeline(0))
    assert len(expected) > 10
    for num_workers in WORKERS[1:]:
        assert listed(mixed_pipeline(num_workers)) == expected, num_workers


def test_iterdataset_mix_interleaves_like_grain_until_one_runs_out():
    parts = [grain.MapDataset.range(5).to_iter_dataset(),
             grain.MapDataset.range(7, 10).to_iter_dataset()]
    assert list(grain.IterDataset.mix(parts)) == [0, 7, 1, 8, 2, 9, 3]


def test_the_state_is_a_few_plain_numbers():
    iterator = iter(mixed_pipeline(0))
    next(iterator)
    state = iterator.get_state()

    def numbers_only(value):
        if isinstance(value, dict):
            return all(numbers_only(v) for v in value.values())
        if isinstance(value, list):
            return all(numbers_only(v) for v in value)
        return isinstance(value, int | bool)

    assert numbers_only(state), state
    # The first batch took 3 letters, 1000, 1001 and 1003 (1002 is filtered), and 1 digit.
    assert state == {"parents": [{"next_index": 4}, {"next_index": 1}], "index": 4,
                     "stop": False}
    iterator.close()


@pytest.mark.parametrize("saved_at, restored_at", [(2, 0), (0, 3), (3, 1)])
def test_a_state_restores_at_another_worker_count(saved_at, restored_at):
    expected = listed(filtered_pipeline(0))
    with iter(filtered_pipeline(saved_at)) as first:
        head = [np.asarray(next(first)).tolist() for _ in range(5)]
        state = first.get_state()
    with iter(filtered_pipeline(restored_at)) as second:
        second.set_state(state)
        assert head + listed(second) == expected


def test_a_state_restores_at_another_thread_count():
    expected = listed(filtered_pipeline(0))
    inline = grain.ReadOptions(num_threads=0)
    threads = grain.ReadOptions(num_threads=4, prefetch_buffer_size=16)
    with iter(filtered_pipeline(0, threads)) as first:
        head = [np.asarray(next(first)).tolist() for _ in range(3)]
        state = first.get_state()
    with iter(filtered_pipeline(0, inline)) as second:
        second.set_state(state)
        assert head + listed(second) == expected


def test_a_mix_resumes_at_another_worker_count():
    expected = listed(mixed_pipeline(0))
    with iter(mixed_pipeline(2)) as first:
        head = [np.asarray(next(first)).tolist() for _ in range(4)]
        state = first.get_state()
    with iter(mixed_pipeline(0)) as second:
        second.set_state(state)
        assert head + listed(second) == expected


def test_a_state_that_is_not_one_says_what_a_state_is():
    iterator = iter(grain.MapDataset.range(5).to_iter_dataset())
    with pytest.raises(ValueError, match=r"'next_index'.*get_state\(\) returned"):
        iterator.set_state({"position": 3})


def explode_at_41(x):
    if x == 41:
        raise KeyError("no label for 41")
    return x


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_failing_transform_raises_at_its_element_with_index_and_traceback(num_workers):
    ds = (grain.MapDataset.range(100).to_iter_dataset()
          .map(explode_at_41).batch(10)
          .mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers)))
    taken = []
    with iter(ds) as iterator, pytest.raises(KeyError) as raised:
        for batch in iterator:
            taken.append(batch)
    # In this process batches 0..3 arrive and batch 4, which holds element 41, raises. A
    # worker computes a unit of 7 batches and sends the error instead of the unit, so the
    # error comes at the unit's first batch (the DataLoader's worker behaviour, unchanged).
    assert len(taken) == (4 if num_workers == 0 else 0)
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    text = notes + "".join(traceback.format_exception(raised.value))
    assert "index 41" in notes
    assert f'{Path(__file__).name}", line' in text and "explode_at_41" in text


def _worker_pids_then_end(route: str) -> list[int]:
    ds = (grain.MapDataset.range(400).map(lambda x: np.full(4, os.getpid()))
          .to_iter_dataset().batch(8)
          .mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    iterator = iter(ds)
    pids = sorted({int(next(iterator)[0, 0]) for _ in range(30)})
    if route == "close":
        iterator.close()
    elif route == "with":
        with iterator:
            next(iterator)
    else:  # abandoned
        del iterator
        gc.collect()
    return pids


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /proc and /dev/shm")
@pytest.mark.parametrize("route", ["close", "with", "abandoned"])
def test_nothing_is_left_after_close_with_or_an_abandoned_iterator(route, monkeypatch):
    # Only this test's own segments: other tests and notebooks may run beside it.
    created = record_created_segments(monkeypatch)
    pids = _worker_pids_then_end(route)
    assert len(pids) == 2 and os.getpid() not in pids
    deadline = time.monotonic() + 5
    while any(process_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(process_alive(pid) for pid in pids)
    assert created and existing_segments(created) == []


def test_an_engine_chain_is_one_dataloader_and_a_mix_runs_here():
    single = iter(filtered_pipeline(0))
    assert isinstance(single, EngineIterator)
    single.close()
    mixed = iter(mixed_pipeline(0))
    assert not isinstance(mixed, EngineIterator)
    assert all(isinstance(part, EngineIterator) for part in mixed._parent._parents)
    mixed.close()


def test_steps_after_the_engine_part_run_here_on_its_output():
    ds = (grain.MapDataset.range(10).to_iter_dataset().batch(3)
          .filter(lambda batch: batch.sum() > 3).map_with_index(lambda i, b: (i, b.tolist())))
    assert list(ds) == [(0, [3, 4, 5]), (1, [6, 7, 8]), (2, [9])]


def test_random_map_on_the_engine_equals_the_map_dataset_random_map():
    as_map = grain.MapDataset.range(30).random_map(jitter, seed=9)
    as_iter = grain.MapDataset.range(30).to_iter_dataset().random_map(jitter, seed=9)
    assert list(as_iter) == [as_map[i] for i in range(30)]


def test_mp_prefetch_refuses_what_course_lib_does_not_do():
    ds = grain.MapDataset.range(3).to_iter_dataset()
    with pytest.raises(ValueError, match="worker_init_fn and sequential_slice"):
        ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=1), worker_init_fn=print)
    with pytest.raises(ValueError, match="num_workers=-1 must be >= 0"):
        grain.MultiprocessingOptions(num_workers=-1)


def test_a_named_mix_restores_by_name_and_starts_a_new_component_afresh():
    def named(keys):
        return grain.IterDataset.mix(
            {key: grain.MapDataset.range(10 * i, 10 * i + 10).to_iter_dataset()
             for i, key in enumerate(keys)})
    first = iter(named(["a", "b"]))
    assert [next(first) for _ in range(4)] == [0, 10, 1, 11]
    state = first.get_state()
    assert state["parents"] == {"a": {"next_index": 2}, "b": {"next_index": 2}}
    wider = iter(named(["a", "b", "c"]))
    wider.set_state(state)
    # Position 4 of a three-way mix is b's turn, then c (from its start), then a.
    assert [next(wider) for _ in range(3)] == [12, 20, 2]


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /proc and /dev/shm")
def test_ctrl_c_reaches_the_loop_and_leaves_no_worker_or_segment():
    script = Path(__file__).parent / "worker_scripts" / "dataset_interrupt.py"
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Exception ignored" not in result.stderr and "leaked" not in result.stderr
    word, pids, created, _ = result.stdout.split()
    assert word == "interrupted"
    pids, created = json.loads(pids), json.loads(created)
    assert len(pids) == 2
    assert not any(process_alive(pid) for pid in pids)
    # The script's own segments (other tests and notebooks may run beside this one).
    assert created and existing_segments(created) == []
