"""Lesson 6's picture and counts, and the chex facts it states, against the installed chex."""

from __future__ import annotations

import pytest

from course_lib.course import recompilation


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


def test_chex_outside_the_jit_counts_nothing_and_refuses_jax_jit():
    # the reason the lesson gives for "jit outside, chex inside" (chex/_src/asserts.py:
    # a trace counts only when the wrapper gets tracers; a jax.jit result is refused)
    chex = pytest.importorskip("chex")
    import jax
    import jax.numpy as jnp
    from flax import nnx

    with pytest.raises(ValueError, match="change wrappers ordering"):
        chex.assert_max_traces(jax.jit(_add_one), n=1)
    chex.clear_trace_counter()
    outside = chex.assert_max_traces(nnx.jit(_add_one), n=1)  # not recognised: wrapped
    for size in (1, 2, 3):  # three shapes, three compilations, and no error
        outside(jnp.ones(size))
    inside = jax.jit(chex.assert_max_traces(_add_one, n=1))
    inside(jnp.ones(1))
    with pytest.raises(AssertionError, match="traced > 1 times"):
        inside(jnp.ones(2))
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


def test_plot_step_times_labels_each_new_batch_size_and_checks_its_input():
    import matplotlib

    matplotlib.use("Agg")
    runs = [[0.5, 0.001, 0.001, 0.4], [0.6, 0.002, 0.001, 0.5]]
    figure = recompilation.plot_step_times(runs, rows=[64, 64, 64, 28])
    ax = figure.axes[0]
    assert [text.get_text() for text in ax.texts] == ["first batch of 64 rows",
                                                      "first batch of 28 rows"]
    assert ax.get_yscale() == "log" and ax.get_ylabel()
    with pytest.raises(ValueError, match="one time per step"):
        recompilation.plot_step_times(runs, rows=[64, 28])
