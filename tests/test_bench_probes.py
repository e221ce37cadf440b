"""benchmarks/bench_probes.py: its sentences, one per verdict, and how it reads a shape."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def bench_probes():
    sys.path.insert(0, str(BENCHMARKS))  # its own imports: bench_common
    try:
        spec = importlib.util.spec_from_file_location("bench_probes",
                                                      BENCHMARKS / "bench_probes.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
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
