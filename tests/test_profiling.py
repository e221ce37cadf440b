"""The profiler tells a data-bound loop from a compute-bound one, and draws both."""

from __future__ import annotations

import time

import matplotlib
import numpy as np
import pytest

from course_lib.profiling import StepProfiler

matplotlib.use("Agg")

STEPS = 12


def slow_batches(delay: float = 0.005):
    step = 0
    while True:
        time.sleep(delay)
        yield np.full(3, step)
        step += 1


def fast_batches():
    step = 0
    while True:
        yield np.full(3, step)
        step += 1


def slow_step(batch, delay: float = 0.005):
    time.sleep(delay)
    return batch.sum()


def test_slow_data_means_a_mostly_idle_accelerator():
    profiler = StepProfiler().measure(slow_batches(), lambda batch: batch * 2, STEPS)
    assert profiler.num_steps == STEPS
    assert profiler.idle_fraction > 0.5
    assert np.all(profiler.wait_times >= 0.004)


def test_slow_step_means_a_mostly_busy_accelerator():
    profiler = StepProfiler().measure(fast_batches(), slow_step, STEPS)
    assert profiler.idle_fraction < 0.5
    assert np.all(profiler.step_times >= 0.004)


def test_wrap_and_step_record_a_hand_written_loop():
    profiler = StepProfiler(warmup_steps=1)
    total = 0
    for batch in profiler.wrap(fast_batches(), num_steps=5):
        with profiler.step():
            total = profiler.sync(total + slow_step(batch))
    assert profiler.num_steps == 4 and len(profiler.wait_times) == 4
    assert "4 steps" in profiler.summary() and "idle" in profiler.summary()


def test_step_synchronises_on_jax_output():
    import jax.numpy as jnp

    profiler = StepProfiler().measure(fast_batches(), lambda batch: jnp.asarray(batch) + 1, 3)
    assert profiler.num_steps == 3


def test_forgetting_sync_warns_once():
    profiler = StepProfiler()
    with pytest.warns(UserWarning, match=r"without profiler.sync\(output\)"):
        for _ in profiler.wrap(fast_batches(), num_steps=2):
            with profiler.step():
                pass


def test_wrap_stops_when_the_data_ends():
    profiler = StepProfiler().measure([np.zeros(2)] * 3, lambda batch: batch, num_steps=10)
    assert profiler.num_steps == 3


def test_timeline_has_one_bar_per_wait_and_per_step():
    from matplotlib.figure import Figure

    profiler = StepProfiler().measure(slow_batches(0.001), slow_step, 6)
    figure = profiler.plot_timeline()
    assert isinstance(figure, Figure)
    lanes = [container.patches for container in figure.axes[0].containers]
    assert [len(patches) for patches in lanes] == [6, 6]  # computing lane, waiting lane
    figure = profiler.plot_timeline(max_steps=2)
    assert [len(container.patches) for container in figure.axes[0].containers] == [2, 2]
    matplotlib.pyplot.close("all")


def test_timeline_draws_back_to_back_steps_as_separate_outlined_bars():
    from matplotlib.colors import to_rgba

    profiler = StepProfiler()  # made-up spans: four steps with no gap between them
    profiler._wait_spans = [(0.01 * k, 0.01 * k) for k in range(4)]
    profiler._step_spans = [(0.01 * k, 0.01 * (k + 1)) for k in range(4)]
    figure = profiler.plot_timeline()
    computing = figure.axes[0].containers[0].patches
    assert [bar.get_x() for bar in computing] == pytest.approx([0.0, 10.0, 20.0, 30.0])
    assert [bar.get_width() for bar in computing] == pytest.approx([10.0] * 4)
    for bar in computing:
        assert bar.get_linewidth() > 0
        assert bar.get_edgecolor() != bar.get_facecolor()
        assert bar.get_edgecolor() == to_rgba("black")
    matplotlib.pyplot.close("all")


def test_progress_bar_option_runs(capsys):
    profiler = StepProfiler().measure(fast_batches(), lambda batch: batch, 3, progress=True)
    assert profiler.num_steps == 3
    assert "3/3" in capsys.readouterr().err


def test_idle_fraction_before_any_step_explains_itself():
    with pytest.raises(ValueError, match="No steps recorded yet"):
        StepProfiler().idle_fraction  # noqa: B018


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: StepProfiler(warmup_steps=-1), ValueError, "warmup_steps=-1 must be >= 0"),
        (lambda: StepProfiler().wrap(5), TypeError, "batches=5 is not iterable"),
        (lambda: StepProfiler().wrap([], num_steps=0), ValueError, "num_steps=0 must be"),
        (lambda: StepProfiler().measure([], "step"), TypeError, "step_fn='step' must be"),
    ],
)
def test_bad_arguments_are_named_in_the_error(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_now_is_the_clock_of_the_recorded_spans():
    profiler = StepProfiler(warmup_steps=1)
    before = profiler.now()
    for batch in profiler.wrap(slow_batches(0.002), num_steps=3):
        with profiler.step():
            profiler.sync(slow_step(batch, 0.002))
    after = profiler.now()
    assert before == 0.0
    spans = np.concatenate([profiler.wait_spans, profiler.step_spans])
    assert spans.shape == (4, 2) and np.all(spans[:, 0] <= spans[:, 1])
    assert before <= spans.min() and spans.max() <= after
    assert np.allclose(profiler.wait_spans[:, 1] - profiler.wait_spans[:, 0],
                       profiler.wait_times)
    assert np.allclose(profiler.step_spans[:, 1] - profiler.step_spans[:, 0],
                       profiler.step_times)


def test_the_spans_leave_out_the_warmup_steps_and_follow_each_other():
    profiler = StepProfiler(warmup_steps=2)
    for batch in profiler.wrap(fast_batches(), num_steps=5):
        with profiler.step():
            profiler.sync(batch)
    waits, steps = profiler.wait_spans, profiler.step_spans
    assert len(waits) == len(steps) == 3
    assert np.all(waits[:, 1] <= steps[:, 0])  # each step starts after its wait
    assert np.all(steps[:-1, 1] <= waits[1:, 0])  # ... and the next wait after the step
