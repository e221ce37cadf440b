"""Lesson 6's measurements and the sentences printed from them, with made-up numbers: the
compilation timed several times against the step, and chex's count shared by footprint."""

from __future__ import annotations

import pytest

from course_lib.course import recompilation
from course_lib.course.recompilation import CompilationTiming


def test_several_compilations_give_a_median_and_a_spread():
    timing = CompilationTiming(first_call=(0.401, 0.501, 0.451),
                               step_times=(0.001, 0.001, 0.002))
    assert timing.compile_times == pytest.approx((0.4, 0.5, 0.45))
    assert timing.compile_seconds == pytest.approx(0.45)
    sentence = timing.sentence()
    assert sentence.startswith("One compilation cost about as much as 450 steps here")
    assert ("(450 ms, the median of 3 compilations, which took from 400 ms to 500 ms, "
            "against 1 ms per step, the median of 3; the slowest step took 2 ms)") in sentence
    assert "timed once" not in sentence


def test_one_compilation_still_reads_as_timed_once():
    timing = CompilationTiming(first_call=0.501, step_times=(0.001, 0.001, 0.002))
    assert timing.first_calls == (0.501,)
    assert "(500 ms, timed once, against 1 ms per step" in timing.sentence()


def test_several_compilations_within_the_steps_spread_are_not_claimed():
    # the fastest first call is no slower than the slowest step: no compilation to read
    timing = CompilationTiming(first_call=(0.004, 0.009), step_times=(0.001, 0.002, 0.005))
    sentence = timing.sentence()
    assert sentence.startswith("This run could not tell a compilation from a step: the "
                               "fastest of 2 first calls took 4 ms, no more than the slowest "
                               "of the 3 compiled calls (5 ms)")
    assert "steps here" not in sentence


def test_compilation_timing_refuses_empty_or_negative_first_calls():
    with pytest.raises(ValueError, match="must be positive times"):
        CompilationTiming(first_call=(), step_times=(0.001,))
    with pytest.raises(ValueError, match="must be positive times"):
        CompilationTiming(first_call=(0.1, -0.1), step_times=(0.001,))


def test_time_compilation_times_each_fresh_call_first_then_repeats_the_last():
    made, runs = [], []

    def fresh():
        name = f"fresh {len(made)}"
        made.append(name)
        return lambda: runs.append(name)

    timing = recompilation.time_compilation(fresh(), repeats=4, compiles=3, fresh=fresh)
    assert len(made) == 3 and len(timing.first_calls) == 3 and len(timing.step_times) == 4
    assert runs == ["fresh 0", "fresh 1", "fresh 2"] + ["fresh 2"] * 4
    with pytest.raises(ValueError, match="needs fresh"):
        recompilation.time_compilation(fresh(), repeats=1, compiles=2)
    with pytest.raises(ValueError, match="compiles=0"):
        recompilation.time_compilation(fresh(), repeats=1, compiles=0, fresh=fresh)


def test_shared_counter_sentence_for_both_outcomes():
    shared = recompilation.shared_counter_sentence(True, "training.update")
    assert shared.startswith("The new wrapper of training.update raised at its very first "
                             "trace")
    assert "not by the function object" in shared
    apart = recompilation.shared_counter_sentence(False, "training.update")
    assert "started from zero" in apart and "not by the function object" not in apart


def _add_one(x):
    return x + 1


def test_chex_counts_by_footprint_not_by_function_object():
    # the fact the lesson states, pinned against the chex installed (chex/_src/asserts.py)
    chex = pytest.importorskip("chex")
    import jax
    import jax.numpy as jnp

    def wrap():
        return jax.jit(chex.assert_max_traces(_add_one, n=1))

    chex.clear_trace_counter()
    first, second = wrap(), wrap()  # two function objects, one footprint
    first(jnp.ones(2))
    with pytest.raises(AssertionError, match="traced > 1 times"):
        second(jnp.ones(2))  # its own first trace, counted on from the first wrapper's
    chex.clear_trace_counter()
    wrap()(jnp.ones(2))  # after clearing, a new wrapper starts from zero
    chex.clear_trace_counter()
