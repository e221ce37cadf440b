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


_UPDATE_FIRST = ("TRACING CACHE MISS at flax/nnx/transforms/compilation.py:1023:49 "
                 "(JitWrapped.__call__):\n  never seen function:\n    update id=1403 defined "
                 "at course_lib/training.py:44")
_UPDATE_AGAIN = ("TRACING CACHE MISS at flax/nnx/transforms/compilation.py:1023:49 "
                 "(JitWrapped.__call__):\n  for update defined at course_lib/training.py:44\n"
                 "  all previously seen cache keys differ.")
_OPTAX_HELPER = ("TRACING CACHE MISS at optax/_src/transform.py:294:15 "
                 "(scale_by_adam.<locals>.update_fn):\n  never seen function:\n"
                 "    tree_bias_correction id=1398 defined at optax/tree_utils/_tree_math.py:441")


def test_step_traces_counts_the_step_alone():
    messages = [_UPDATE_FIRST, _OPTAX_HELPER, "Compiling update with global shapes", _UPDATE_AGAIN]
    assert recompilation.step_traces(messages, "update") == 2
    assert recompilation.step_traces(messages, "tree_bias_correction") == 1
    assert recompilation.step_traces(messages, "updat") == 0
    assert recompilation.step_traces([], "update") == 0


def test_step_traces_reads_what_jax_logs():
    # the message format the count relies on, from the JAX installed
    jax = pytest.importorskip("jax")
    from course_lib.course import basics

    def scaled(x):
        return x * 2

    step = jax.jit(scaled)
    with basics.jax_messages() as messages:
        step(jax.numpy.ones(3))
        step(jax.numpy.ones(3))
        step(jax.numpy.ones(4))
    assert recompilation.step_traces(messages, "scaled") == 2


def test_epoch_traces_sentence_once_per_process():
    sentence = recompilation.epoch_traces_sentence([2, 0, 0])
    assert sentence.startswith("Traces of the step per epoch: epoch 1: 2, epoch 2: 0, epoch 3: 0.")
    assert "in the 2 later epochs jax.jit's cache held the programs" in sentence
    assert "once per process, not once per epoch" in sentence
    # the step's traces alone: no claim about every compilation
    assert "it was not traced again (this counts its traces only" in sentence
    assert "compiled nothing" not in sentence and "Programs XLA compiled" not in sentence


def test_epoch_traces_sentence_says_nothing_compiled_only_when_counted():
    sentence = recompilation.epoch_traces_sentence(
        [2, 0, 0], compiled=[["jit(update)", "jit(update)"], [], []])
    assert ("epoch 3: 0. Programs XLA compiled per epoch, of any function: 2, 0, 0. "
            "Every trace came in epoch 1;") in sentence
    assert "and XLA compiled nothing at all, for any function." in sentence
    assert "once per process, not once per epoch" in sentence


def test_epoch_traces_sentence_names_what_else_compiled_in_later_epochs():
    one = recompilation.epoch_traces_sentence(
        [2, 0, 0], compiled=[["jit(update)"] * 2, [], ["jit(add)"]])
    assert "Programs XLA compiled per epoch, of any function: 2, 0, 1." in one
    assert "but XLA compiled 1 other program in epoch 3 (jit(add))" in one
    assert "compiled nothing" not in one and "once per epoch" not in one
    several = recompilation.epoch_traces_sentence(
        [1, 0, 0], compiled=[["jit(update)"], ["jit(add)", "jit(mul)"], ["jit(add)"]])
    assert "but XLA compiled 3 other programs in epochs 2, 3 (jit(add), jit(mul))" in several
    with pytest.raises(ValueError, match="one list of compiled programs per epoch"):
        recompilation.epoch_traces_sentence([2, 0], compiled=[[]])


def test_compilations_counts_every_program_xla_compiles():
    # JAX's own compilation event, from the JAX installed: a jitted function per new shape,
    # an eager operation too, and nothing for a call it already compiled
    jax = pytest.importorskip("jax")
    import numpy as np

    def doubled(x):
        return x * 2

    step = jax.jit(doubled)  # fed NumPy arrays: making them compiles nothing
    with recompilation.compilations() as first:
        step(np.ones(3, np.float32))
    with recompilation.compilations() as again:
        step(np.ones(3, np.float32))
        step(np.ones(3, np.float32))
    with recompilation.compilations() as new_shape:
        result = step(np.ones(7, np.float32))
        result - result[0]  # eager operations, on a shape not seen before
    assert first == ["jit(doubled)"]
    assert again == []
    assert new_shape[0] == "jit(doubled)" and len(new_shape) >= 2
    assert "jit(subtract)" in new_shape
    after = len(new_shape)
    step(np.ones(5, np.float32))  # outside the block: the listener is gone
    assert len(new_shape) == after


def test_epoch_traces_sentence_when_later_epochs_trace_again():
    sentence = recompilation.epoch_traces_sentence([2, 1, 0, 1])
    assert "The step traced again in epochs 2, 4:" in sentence
    assert "paid in later epochs too" in sentence and "once per process" not in sentence
    assert "in epoch 2:" in recompilation.epoch_traces_sentence([2, 1])


def test_epoch_traces_sentence_when_nothing_traced_and_refuses_one_epoch():
    assert "never traced" in recompilation.epoch_traces_sentence([0, 0])
    with pytest.raises(ValueError, match="at least two epochs"):
        recompilation.epoch_traces_sentence([2])


def test_restart_sentence_for_each_cache_setting():
    default = recompilation.restart_sentence(None, 1.0, 0.36)
    assert "jax_compilation_cache_dir is unset" in default
    assert "every restart of the process" in default
    small = recompilation.restart_sentence("/cache", 1.0, 0.36)
    assert "at least jax_persistent_cache_min_compile_time_secs=1 s" in small
    assert "took 360 ms with its tracing, so every restart compiles it again" in small
    large = recompilation.restart_sentence("/cache", 1.0, 2.5)
    assert "not less than jax_persistent_cache_min_compile_time_secs=1 s" in large
    assert "reads the compiled program from the cache" in large


def test_restart_sentence_default_matches_the_jax_installed():
    # the defaults the lesson's full run states, in a process without the test suite's
    # JAX_COMPILATION_CACHE_DIR (conftest.py sets one)
    pytest.importorskip("jax")
    import os
    import subprocess
    import sys

    env = {name: value for name, value in os.environ.items()
           if not name.startswith("JAX_COMPILATION_CACHE")}
    printed = subprocess.run(
        [sys.executable, "-c", "import jax; print(jax.config.jax_compilation_cache_dir, "
         "jax.config.jax_persistent_cache_min_compile_time_secs)"],
        env=env, capture_output=True, text=True, check=True).stdout.split()
    assert printed == ["None", "1.0"]


def test_padded_rows_sentence_for_each_outcome():
    shapes = [(64, 8, 8)] * 5
    same = recompilation.padded_rows_sentence("Grain 0.2.18", [64, 64, 64, 64, 41], shapes,
                                              [64, 64, 64, 64, 41])
    assert same == ("Grain 0.2.18: 5 batches of shape (64, 8, 8), real rows per batch "
                    "[64, 64, 64, 64, 41]: one shape, and the same number of real rows per "
                    "batch as PadAndMask's masks.")
    unpadded = recompilation.padded_rows_sentence("Grain", [64, 41], [(64, 8, 8), (41, 8, 8)],
                                                  [64, 41])
    assert "2 shapes, so the step would trace once per shape" in unpadded
    no_mask = recompilation.padded_rows_sentence("Grain", [64, 64], [(64, 8, 8)] * 2, [64, 41])
    assert "but PadAndMask's masks count [64, 41]" in no_mask


def test_grain_pads_with_batch_and_pad_and_a_mask_field():
    # the recipe the lesson gives for Grain, against the Grain installed
    real_grain = pytest.importorskip("grain.python")
    import functools

    import numpy as np

    pad = functools.partial(real_grain.experimental.batch_and_pad, batch_size=3)
    records = [{"x": np.float32(key)} for key in range(5)]
    batches = list(real_grain.MapDataset.source(records)
                   .map(lambda record: {**record, "mask": True}).batch(3, batch_fn=pad))
    assert [batch["x"].shape for batch in batches] == [(3,), (3,)]
    assert [batch["mask"].tolist() for batch in batches] == [[True] * 3, [True, True, False]]


def test_must_raise_traceback_points_at_the_call_that_raised_in_a_kernel_cell(capsys):
    # A kernel's cell has a .py file name that is not on disk (its lines are in linecache);
    # the cell's frame is still at its `with` line when must_raise formats the error.
    pytest.importorskip("IPython")
    import linecache
    import re

    from IPython.core.interactiveshell import InteractiveShell

    from course_lib import course

    InteractiveShell.instance()  # get_ipython() now returns it, as in a notebook
    source = ("with course.must_raise(ValueError):\n"
              "    for text in ['1', 'x']:\n"
              "        int(text)\n")
    filename = "/nonexistent/ipykernel_0/cell_1.py"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        exec(compile(source, filename, "exec"), {"course": course})
    finally:
        del linecache.cache[filename]
    printed = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().err)
    arrows = [line for line in printed.splitlines() if re.match(r"-+> ", line)]
    assert arrows and "int(text)" in arrows[0], printed
    assert not any("with course.must_raise" in line for line in arrows), printed


def test_compilations_unregisters_on_a_jax_without_the_public_function(monkeypatch):
    # JAX 0.7.2 (Colab's) has no jax.monitoring.unregister_event_duration_listener: the
    # block must still end cleanly and remove its listener
    jax = pytest.importorskip("jax")
    from jax._src import monitoring

    monkeypatch.delattr(jax.monitoring, "unregister_event_duration_listener", raising=False)
    if not hasattr(monitoring, "_unregister_event_duration_listener_by_callback"):
        monkeypatch.setattr(monitoring, "_unregister_event_duration_listener_by_callback",
                            monitoring.unregister_event_duration_listener, raising=False)
    before = len(monitoring.get_event_duration_listeners())
    with recompilation.compilations() as compiled:
        assert len(monitoring.get_event_duration_listeners()) == before + 1
    assert compiled == []
    assert len(monitoring.get_event_duration_listeners()) == before


def test_recompile_sentence_places_the_trap_against_the_fresh_compilations():
    timing = CompilationTiming(first_call=(0.401, 0.501, 0.451),
                               step_times=(0.001, 0.001, 0.002))  # compilations 400-500 ms
    inside = timing.recompile_sentence([0.431, 0.481, 0.441], rows=28, compiled_rows=64)
    assert inside == ("The trap's own recompilation, a step already compiled for 64 rows fed "
                      "the 28-row batch once, took 440 ms (the median of 3, from 430 ms to "
                      "480 ms), less one compiled step as above: within the range of the 3 "
                      "fresh 64-row compilations above (from 400 ms to 500 ms). The short "
                      "batch costs what a first compilation does, within their spread: about "
                      "as much as 440 steps.")
    above = timing.recompile_sentence([0.601, 0.651, 0.701], rows=28, compiled_rows=64)
    assert "600 ms to 700 ms), less one compiled step as above: more than any of the 3 fresh" \
        in above
    assert above.endswith("The short batch costs more than the first compilation here, about "
                          "as much as 650 steps.")
    below = timing.recompile_sentence([0.201], rows=28, compiled_rows=64)
    assert "took 200 ms, less one compiled step as above: less than any of the 3 fresh" in below
    assert "costs less than the first compilation here, about as much as 200 steps." in below
    cached = timing.recompile_sentence([0.0015, 0.002], rows=28, compiled_rows=64)
    assert "this run saw no recompilation there" in cached and "steps." not in cached
    one = CompilationTiming(first_call=0.501, step_times=(0.001,))
    assert "within the range" not in one.recompile_sentence([0.301], rows=28, compiled_rows=64)
    assert "less than the fresh 64-row compilation above (500 ms)" in \
        one.recompile_sentence([0.301], rows=28, compiled_rows=64)
    with pytest.raises(ValueError, match="positive times"):
        timing.recompile_sentence([], rows=28, compiled_rows=64)


def test_cache_miss_sentence_for_each_outcome():
    reasons = ["* at images, now f32[28,8,8] and before f32[64,8,8]"]
    assert recompilation.cache_miss_sentence(2, reasons) == (
        "JAX traced the step 2 times. Why the last time:\n"
        "* at images, now f32[28,8,8] and before f32[64,8,8]")
    silent = recompilation.cache_miss_sentence(2, [])
    assert silent.startswith("JAX traced the step 2 times. JAX logged no reason")
    assert "jax_explain_cache_misses on" in silent and "Why the last time" not in silent
    assert recompilation.cache_miss_sentence(1, []) == (
        "JAX traced the step once. No trace after the first, so no cache miss to explain.")
