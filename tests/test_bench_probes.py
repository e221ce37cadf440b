"""benchmarks/bench_probes.py: its sentences, one per verdict, and how it reads a shape from
course_lib's `execution` line (which thread read, transformed and batched, and why): each
decision the line can report, read from a made-up line and from a real iterator's."""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import course_lib as grain

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def bench_probes():
    sys.path.insert(0, str(BENCHMARKS))  # its own imports: bench_common
    try:
        spec = importlib.util.spec_from_file_location("bench_probes",
                                                      BENCHMARKS / "bench_probes.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_probes"] = module  # its dataclass looks its module up there
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("bench_probes", None)
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize(("chosen", "rejected", "says"), [
    ([1.00, 1.01, 0.99], [1.50, 1.52, 1.49], "faster than caller, it pays"),
    ([1.50, 1.52, 1.49], [1.00, 1.01, 0.99], "slower than caller, it costs"),
    ([1.00, 1.01, 0.99], [1.01, 1.00, 1.02], "as fast as caller within the noise"),
    ([1.00, 2.00, 0.50, 1.00], [1.00, 0.40, 2.20, 1.05], "too noisy to tell from caller"),
])
def test_each_verdict_of_the_margin_rule_has_its_sentence(bench_probes, chosen, rejected,
                                                          says):
    sentence = bench_probes.choice_sentence("cheap, the batch-thread probe", "batch", chosen,
                                            "caller", rejected)
    assert sentence.startswith("cheap, the batch-thread probe: " + says), sentence
    medians = (f"batch {statistics.median(chosen):.3f} s against caller "
               f"{statistics.median(rejected):.3f} s")
    assert medians in sentence, sentence


def test_the_shape_is_read_from_what_the_iterator_says(bench_probes):
    assert bench_probes.chosen_shape(
        "in the caller's thread: the second chunk took 0.33 ms, under 2 ms; no read threads: "
        "the first chunk waited 0.0 µs and took 4.0 µs per record (...)") == "caller"
    assert bench_probes.chosen_shape(
        "on the batch thread: the second chunk took 12.80 ms, at least 2 ms; 16 read "
        "threads: the first chunk waited 556 µs (...)") == "batch_read"
    with pytest.raises(ValueError, match="no batch-thread decision"):
        bench_probes.chosen_shape("in worker processes (worker_count=2)")


def test_each_probe_is_judged_against_the_shape_of_its_other_choice(bench_probes):
    flip = bench_probes._flip
    assert (flip("batch", "batch"), flip("batch", "read")) == ("caller", "batch_read")
    assert (flip("caller_read", "batch"), flip("caller_read", "read")) == ("batch_read",
                                                                            "caller")


# -- course_lib's execution line, read (`read_execution`) ---------------------------------
class SlowSource:
    """Each read waits 2 ms, far above the per-record wait at which read threads pay."""

    def __len__(self) -> int:
        return 256

    def __getitem__(self, record_key: int) -> int:
        time.sleep(0.002)
        return record_key


def _loader(source, operations, num_records: int):
    sampler = grain.IndexSampler(num_records, num_epochs=1)
    return grain.DataLoader(data_source=source, sampler=sampler, operations=operations)


class BurnCpu(grain.MapTransform):
    """Spins until this process has used 5 ms more CPU time: a known amount of work."""

    def map(self, element):
        until = time.process_time() + 0.005
        while time.process_time() < until:
            pass
        return element


# course_lib's execution lines, in the formats of loader.py, read_ahead.py and record_stage.py
BATCH = "on the batch thread: the second chunk took 9.10 ms, at least 2 ms"
HERE = "in the caller's thread: the second chunk took 0.51 ms, under 2 ms"
MEASURED = ("the first chunk waited 0.0 µs and took 30 µs per record (threads from 200 µs "
            "waiting in reads of one record at a time, or 25 µs in all with per-record "
            "transforms)")
CAPPED = f"no read threads: {MEASURED}, capped at this process's share of the cores (1)"
CHEAP = f"no read threads: {MEASURED}"
POOL = f"3 read threads: {MEASURED}, capped at this process's share of the cores (3)"
INLINE_FORBIDDEN = ("in the caller's thread, no batch thread and no read threads: "
                    "ReadOptions(num_threads=0, prefetch_buffer_size=500)")


def test_read_execution_reads_each_decision(bench_probes):
    lesson = bench_probes
    here = lesson.read_execution(f"{HERE}; {CAPPED}")
    assert (here.place, here.read_threads, here.why_no_read_threads) == \
        ("this thread", 0, "capped")
    assert here.reads == CAPPED
    cheap = lesson.read_execution(f"{BATCH}; {CHEAP}")
    assert (cheap.place, cheap.read_threads, cheap.why_no_read_threads) == \
        ("batch thread", 0, "cheap")
    pool = lesson.read_execution(f"{BATCH}; {POOL}")
    assert (pool.place, pool.read_threads, pool.why_no_read_threads) == ("batch thread", 3, "")
    forbidden = lesson.read_execution(INLINE_FORBIDDEN)
    assert (forbidden.place, forbidden.why_no_read_threads) == ("this thread", "forbidden")
    workers = lesson.read_execution("in worker processes (worker_count=2); each times ...")
    assert workers.place == "workers"
    for not_started in ("not started: chosen on the first chunks, at the first next()",
                        "batch thread not decided yet: the second chunk will be timed "
                        "against 2 ms; read threads not chosen yet: the first chunk will be "
                        "timed"):
        with pytest.raises(ValueError, match="not a"):
            lesson.read_execution(not_started)


def test_read_execution_reads_what_course_lib_prints(bench_probes):
    """The formats above are course_lib's: real iterators' lines read the same way."""
    lesson = bench_probes
    from course_lib.record_stage import threads_for_work

    def execution(loader):
        with iter(loader) as iterator:
            for _ in iterator:
                pass
            return lesson.read_execution(iterator.execution)

    forbidden = execution(grain.DataLoader(
        data_source=grain.ArrayDataSource(np.arange(64)), operations=[grain.Batch(8)],
        sampler=grain.IndexSampler(64, num_epochs=1),
        read_options=grain.ReadOptions(num_threads=0)))
    assert (forbidden.place, forbidden.why_no_read_threads) == ("this thread", "forbidden")
    cheap = execution(_loader(grain.ArrayDataSource(np.arange(256)), [grain.Batch(8)], 256))
    assert (cheap.place, cheap.why_no_read_threads) == ("batch thread", "cheap")
    waiting = execution(_loader(SlowSource(), [grain.Batch(8)], 256))
    assert waiting.place == "batch thread" and waiting.read_threads > 1
    computing = execution(_loader(grain.RangeDataSource(0, 16, 1),
                                  [BurnCpu(), grain.Batch(4)], 16))
    share = threads_for_work(grain.ReadOptions().num_threads, 0)
    if share == 1:
        assert (computing.read_threads, computing.why_no_read_threads) == (0, "capped")
    else:
        assert computing.read_threads == share
