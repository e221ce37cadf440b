"""Lessons 7 and 8: their pictures and tables show what they are given, and the lessons
write their model, loops and checks in cells."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import course_lib as grain
from course_lib.course import resume, training_loop


# -- lesson 7 -------------------------------------------------------------------------------
class _Run:
    """What median_run reads of a StepProfiler: its steps and its wall time."""

    def __init__(self, num_steps, wall_time):
        self.num_steps, self.wall_time = num_steps, wall_time


def test_median_run_picks_the_run_with_the_median_rate():
    runs = [_Run(30, 1.0), _Run(30, 3.0), _Run(30, 2.0)]  # 30, 10 and 15 steps/s
    assert training_loop.median_run(runs) == 2
    assert training_loop.median_run(runs[:2]) == 1  # even count: the lower middle rate
    assert training_loop.median_run([_Run(5, 1.0)]) == 0
    with pytest.raises(ValueError, match="profilers is empty"):
        training_loop.median_run([])


def test_feed_timelines_draw_each_setup_with_its_median_run():
    import matplotlib

    matplotlib.use("Agg")
    runs = {}
    for label, seconds in (("slow", 2e-3), ("fast", 1e-4)):
        runs[label] = [grain.StepProfiler(warmup_steps=1).measure(
            range(10), lambda batch, seconds=seconds: time.sleep(seconds), 6)
            for _ in range(3)]
    figure = training_loop.plot_feed_timelines(runs, max_steps=4)
    # titled with the setup's name only: the numbers are the lesson's tables'
    assert [ax.get_title() for ax in figure.axes] == ["slow", "fast"]
    assert "first 4 measured steps of each setup's median run" in figure.axes[-1].get_xlabel()


def test_plot_training_says_when_the_last_point_is_short_of_its_epoch():
    import matplotlib

    matplotlib.use("Agg")
    whole = training_loop.plot_training([2.0, 1.0], {0: 0.1, 2: 0.8}).axes[1].get_title()
    assert "short" not in whole
    short = training_loop.plot_training([2.0, 1.0], {0: 0.1, 2: 0.8}, short=32)
    assert "(the run ends 32 records short of its last epoch)" in short.axes[1].get_title()
    with pytest.raises(ValueError, match="short=-1"):
        training_loop.plot_training([2.0], {0: 0.1, 1: 0.5}, short=-1)


def test_lesson7_writes_the_model_the_step_the_loaders_and_the_loop_in_its_cells():
    code = lesson_code("07_training_loop.ipynb")
    assert "class MLP(nnx.Module):" in code and "optax.adam(" in code
    assert "@nnx.jit\ndef train_step(" in code and "nnx.value_and_grad(" in code
    assert "course_lib.training" not in code and "from course_lib import training" not in code
    assert "grain.DataLoader(" in code and "def naive_batches(" in code
    assert "profiler.wrap(batches" in code and "with profiler.step():" in code
    assert "print(\"JAX runs on:\", jax.default_backend())" in code
    # the feeds are judged by the course's one table, against the naive loop
    assert ('table.compare(steps_per_s, baseline="naive", unit="steps/s", '
            'higher_is_better=True)') in code
    assert ('table.compare(idle, baseline="naive", unit="% idle", '
            'words=("less idle", "more idle"))') in code
    # the batch thread is read against the row it adds to, prefetch against its own
    assert 'pair = ("0 workers, no threads", "0 workers, batch thread")' in code
    assert 'baseline="2 workers"' in code
    assert "step % steps_per_epoch == 0" in code
    assert "highlight=" not in code  # no setup is coloured as a winner
    assert "parallel_workers" not in code and "bottleneck" not in code


# -- lesson 8 -------------------------------------------------------------------------------
def test_skipped_batches_are_the_records_read_ahead():
    sampler = grain.IndexSampler(100, shuffle=True, seed=0, num_epochs=1)
    skipped = resume.skipped_batches(sampler, 30, 60, batch_size=10)
    assert skipped == [[sampler[i].record_key for i in range(s, s + 10)] for s in (30, 40, 50)]
    assert resume.skipped_batches(sampler, 30, 30, batch_size=10) == []
    with pytest.raises(ValueError, match="behind"):
        resume.skipped_batches(sampler, 30, 20, batch_size=10)


def _rows(batches, losses):
    return [{"step": step, "batch": batch, "loss": loss}
            for step, (batch, loss) in enumerate(zip(batches, losses, strict=True), 1)]


def test_fingerprint_table_marks_each_batch_equal_or_not():
    whole = _rows(["aa11", "bb22", "cc33", "dd44"], [4.0, 3.0, 2.0, 1.0])
    resumed = _rows(["aa11", "bb22", "cc33", "dd44"], [4.0, 3.0, 2.0, 1.0])
    forgot = _rows(["aa11", "bb22", "aa11", "bb22"], [4.0, 3.0, 2.5, 2.0])
    table = resume.fingerprint_table(whole, {"resumed": resumed, "forgot": forgot},
                                     steps=[2, 3])
    assert table.splitlines() == [
        "step  uninterrupted  resumed  forgot",
        "   2  bb22           bb22 =   bb22 =",
        "   3  cc33           cc33 =   aa11 x",
        "(= the uninterrupted run's batch at that step, x another batch)"]
    with pytest.raises(ValueError, match="no step 9 in the run 'uninterrupted'"):
        resume.fingerprint_table(whole, {"resumed": resumed}, steps=[9])


def test_plot_resume_draws_the_control_dashed_only_when_given():
    import matplotlib

    matplotlib.use("Agg")
    whole = _rows("abcd", [2.0, 1.5, 1.2, 1.0])
    forgot = _rows("abab", [2.0, 1.5, 1.4, 1.3])[2:]
    ax = resume.plot_resume(whole, whole[:2], whole[2:], control=forgot).axes[0]
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert "control: resumed without the data position" in labels
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and list(dashed[0].get_xdata()) == [3, 4]
    assert list(dashed[0].get_ydata()) == [1.4, 1.3]
    ax = resume.plot_resume(whole, whole[:2], whole[2:]).axes[0]
    assert not [line for line in ax.get_lines() if line.get_linestyle() == "--"]


def test_checkpoint_listing_is_relative_and_summarises_deep_folders(tmp_path):
    (tmp_path / "20" / "model" / "d").mkdir(parents=True)
    (tmp_path / "20" / "model" / "d" / "a").write_text("x")
    (tmp_path / "20" / "data").mkdir()
    (tmp_path / "20" / "data" / "process_0-of-1.json").write_text("{}")
    listing = resume.checkpoint_listing(tmp_path, max_depth=3)
    assert listing.splitlines() == ["20/", "  data/", "    process_0-of-1.json",
                                    "  model/", "    d/  (1 file)"]
    assert str(tmp_path) not in listing


def lesson_code(name):
    notebook = json.loads((Path(__file__).parent.parent / "notebooks" / name).read_text())
    return "\n".join("".join(cell["source"]) for cell in notebook["cells"]
                     if cell["cell_type"] == "code")


def test_lesson8_shows_a_refusal_and_a_wrong_resume_as_controls():
    code = lesson_code("08_resume.ipynb")
    assert "for worker_count in (0, 2):" in code and "resumed.set_state(state)" in code
    # one refusal shown, then every change tried: the control restores, the rest differ
    assert "squares_loader(seed=1)) as other, course.must_raise(ValueError" in code
    assert 'course.check_raised(ValueError, "seed=1")' in code
    for change in ("squares_loader()", "SquaresSource(length=12)",
                   "grain.RangeDataSource(0, 10, 1)", "SquaresSource(shift=100)"):
        assert change in code
    # Orbax's current option for what to keep, not the deprecated max_to_keep
    assert "preservation_policy=ocp.checkpoint_managers.LatestN(3)" in code
    assert "max_to_keep" not in code
    assert '"--forget-data-position"' in code and "hashlib.sha1(" in code
    assert "control=forgot)" in code
    assert "ahead.get_state()" in code and "underneath.get_state()" in code
