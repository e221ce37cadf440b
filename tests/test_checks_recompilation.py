"""The check of exercise 4 (count the traces of a jitted step) on right and wrong answers.

The step here is a one-line stand-in for the lesson's training step, also named `update`
(the check listens for JAX's traces of a function of that name), so that every trace costs
milliseconds; the exercise's notebook runs the check on the real MLP.
"""

from __future__ import annotations

import chex
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import course_lib as grain
from course_lib import checks
from course_lib.checks import recompilation

RECORDS, BATCH = 50, 16  # three full batches, then a short one of two records
SOURCE = grain.ArrayDataSource({
    "image": np.random.default_rng(0).random((RECORDS, 8, 8), dtype=np.float32),
    "label": np.arange(RECORDS) % 10})


class Tiny(nnx.Module):
    def __init__(self):
        self.scale = nnx.Param(jnp.ones(()))


def update(model, optimizer, images, labels):
    return model.scale * images.mean() + labels.mean()


def make_model():
    return Tiny(), None


def make_loader(drop_remainder: bool):
    sampler = grain.IndexSampler(RECORDS, shuffle=True, seed=0, num_epochs=1)
    return grain.DataLoader(data_source=SOURCE, sampler=sampler,
                            operations=[grain.Batch(BATCH, drop_remainder=drop_remainder)])


def epochs(step, model, optimizer, drop_remainder, catch=True) -> int:
    """Two epochs through `step`; 1 plus the number of chex errors caught."""
    traces = 1
    for _ in range(2):
        for batch in make_loader(drop_remainder):
            if not catch:
                step(model, optimizer, batch["image"], batch["label"])
                continue
            try:
                step(model, optimizer, batch["image"], batch["label"])
            except AssertionError:
                traces += 1
    return traces


def count_traces(drop_remainder: bool) -> int:
    chex.clear_trace_counter()
    model, optimizer = make_model()
    step = nnx.jit(chex.assert_max_traces(update, n=1))
    return epochs(step, model, optimizer, drop_remainder)


def test_a_correct_count_passes(capsys):
    checks.check_count_traces(count_traces)
    assert "3 traces" in capsys.readouterr().out
    checks.check_count_traces(count_traces)  # and again: the same verdict


def test_stopping_at_the_first_retrace_passes_too():
    def count_traces_until_caught(drop_remainder):
        chex.clear_trace_counter()
        model, optimizer = make_model()
        step = nnx.jit(chex.assert_max_traces(update, n=1))
        for _ in range(2):
            for batch in make_loader(drop_remainder):
                try:
                    step(model, optimizer, batch["image"], batch["label"])
                except AssertionError:
                    return 2
        return 1

    checks.check_count_traces(count_traces_until_caught)


def test_the_stub_is_not_solved_yet():
    def stub(drop_remainder):
        raise NotImplementedError("run two epochs and count the traces")

    with pytest.raises(NotImplementedError, match="two epochs"):
        checks.check_count_traces(stub)


def test_forgetting_clear_trace_counter_is_caught():
    def without_clearing(drop_remainder):
        model, optimizer = make_model()
        step = nnx.jit(chex.assert_max_traces(update, n=1))
        return epochs(step, model, optimizer, drop_remainder)

    with pytest.raises(AssertionError, match=r"second call.*clear_trace_counter\(\)"):
        checks.check_count_traces(without_clearing)


def test_chex_outside_the_jit_is_caught():
    def chex_outside(drop_remainder):
        chex.clear_trace_counter()
        model, optimizer = make_model()
        step = chex.assert_max_traces(nnx.jit(update), n=1)
        return epochs(step, model, optimizer, drop_remainder)

    with pytest.raises(AssertionError, match=r"chex outside the jit.*jit outside and chex "
                                             r"inside"):
        checks.check_count_traces(chex_outside)


def test_a_constant_is_caught():
    with pytest.raises(AssertionError, match="JAX never traced `update`"):
        checks.check_count_traces(lambda drop_remainder: 1 if drop_remainder else 2)


def test_a_count_that_ignores_the_errors_is_caught():
    def always_one(drop_remainder):
        count_traces(drop_remainder)
        return 1

    with pytest.raises(AssertionError, match=r"returned 1, but JAX traced `update` 3 times"):
        checks.check_count_traces(always_one)


def test_letting_the_chex_error_escape_is_caught():
    def not_catching(drop_remainder):
        chex.clear_trace_counter()
        model, optimizer = make_model()
        step = nnx.jit(chex.assert_max_traces(update, n=1))
        return epochs(step, model, optimizer, drop_remainder, catch=False)

    with pytest.raises(AssertionError, match=r"let chex's AssertionError escape.*try/except "
                                             r"AssertionError"):
        checks.check_count_traces(not_catching)


def test_dropping_the_remainder_for_false_too_is_caught():
    def always_dropping(drop_remainder):
        return count_traces(True)

    with pytest.raises(AssertionError, match=r"drop_remainder=False JAX traced `update` only "
                                             r"once.*make_loader\(drop_remainder\)"):
        checks.check_count_traces(always_dropping)


def test_never_dropping_is_caught():
    with pytest.raises(AssertionError, match=r"drop_remainder=True, one call of count_traces "
                                             r"traced `update` 3 times and returned 3.*give "
                                             r"make_loader the drop_remainder"):
        checks.check_count_traces(lambda drop_remainder: count_traces(False))


def test_a_step_kept_from_an_earlier_call_is_caught():
    model, optimizer = make_model()
    step = nnx.jit(chex.assert_max_traces(update, n=1))

    def module_level(drop_remainder):
        chex.clear_trace_counter()
        return epochs(step, model, optimizer, drop_remainder)

    with pytest.raises(AssertionError, match=r"reused the step compiled in the first call.*"
                                             r"inside count_traces"):
        checks.check_count_traces(module_level)


def test_a_step_jitted_anew_each_epoch_is_caught():
    def jit_per_epoch(drop_remainder):
        chex.clear_trace_counter()
        model, optimizer = make_model()
        traces = 1
        for _ in range(2):
            step = nnx.jit(chex.assert_max_traces(update, n=1))
            for batch in make_loader(drop_remainder):
                try:
                    step(model, optimizer, batch["image"], batch["label"])
                except AssertionError:
                    traces += 1
        return traces

    with pytest.raises(AssertionError, match=r"jit the step once per call, before the loop"):
        checks.check_count_traces(jit_per_epoch)


def test_a_non_integer_is_caught():
    with pytest.raises(AssertionError, match=r"returned '1' \(str\).*as an int"):
        checks.check_count_traces(lambda drop_remainder: str(count_traces(drop_remainder)))


def test_another_error_names_count_traces():
    def broken(drop_remainder):
        raise KeyError("image")

    with pytest.raises(AssertionError, match=r"count_traces\(True\) raised KeyError"):
        checks.check_count_traces(broken)


def test_this_jax_reports_failed_traces():
    assert recompilation._jax_reports_traces()  # so the tests above judge by JAX's counts


@pytest.fixture
def jax_silent(monkeypatch):
    """A JAX that would not report traces: the check judges by the counts alone."""
    monkeypatch.setattr(recompilation, "_jax_reports_traces", lambda: False)


def test_without_jax_reports_a_correct_count_passes(jax_silent, capsys):
    checks.check_count_traces(count_traces)
    assert "one for each epoch's short batch" in capsys.readouterr().out


def test_without_jax_reports_wrong_counts_are_caught(jax_silent):
    def without_clearing(drop_remainder):
        model, optimizer = make_model()
        step = nnx.jit(chex.assert_max_traces(update, n=1))
        return epochs(step, model, optimizer, drop_remainder)

    with pytest.raises(AssertionError, match=r"second call.*returned 7.*clear_trace_counter"):
        checks.check_count_traces(without_clearing)
    with pytest.raises(AssertionError, match=r"count_traces\(False\) returned 1: chex caught no "
                                             r"retrace.*jit outside and chex inside"):
        checks.check_count_traces(lambda drop_remainder: count_traces(True))
    with pytest.raises(AssertionError, match=r"drop_remainder=True, one call of count_traces "
                                             r"returned 3, "):
        checks.check_count_traces(lambda drop_remainder: count_traces(False))
