"""Lesson 12's helpers: the corpora, reading the job's logs, comparing runs, the picture."""

from __future__ import annotations

import json

import pytest

from course_lib.course import capstone


def _steps(losses, checksums, start=1):
    return [{"step": start + i, "loss": loss, "checksum": checksum,
             "segment_checksum": 10 * checksum, "position_checksum": 100 * checksum,
             "real_tokens": 100, "time": float(i)}
            for i, (loss, checksum) in enumerate(zip(losses, checksums, strict=True))]


def test_an_exact_resume_matches_at_every_step():
    reference = _steps([3.0, 2.5, 2.25, 2.0], [1, 2, 3, 4])
    resumed = _steps([2.25, 2.0], [3, 4], start=3)
    comparison = capstone.compare_runs(reference, resumed, from_step=2)
    assert comparison == {"steps": 2, "missing": [], "same_batches": [3, 4],
                          "same_segments": [3, 4], "same_positions": [3, 4],
                          "same_losses": [3, 4]}


def test_a_different_loss_batch_or_position_is_found_at_its_step():
    reference = _steps([3.0, 2.5, 2.25, 2.0], [1, 2, 3, 4])
    resumed = _steps([2.25, 2.0000001], [3, 5], start=3)
    comparison = capstone.compare_runs(reference, resumed, from_step=2)
    assert comparison["same_batches"] == [3] and comparison["same_losses"] == [3]
    moved = [{**step, "position_checksum": 7} for step in reference]
    comparison = capstone.compare_runs(reference, moved, from_step=0)
    assert comparison["same_batches"] == [1, 2, 3, 4] and comparison["same_positions"] == []


def test_steps_only_one_run_logged_are_missing():
    reference = _steps([3.0, 2.5, 2.25], [1, 2, 3])
    comparison = capstone.compare_runs(reference, _steps([2.5], [2], start=2), from_step=1)
    assert comparison["steps"] == 1 and comparison["missing"] == [3]


def test_the_resumed_lines_are_found_by_step_number_not_by_count(tmp_path):
    killed = _steps([3.0, 2.5, 2.25, 2.0, 1.9], [1, 2, 3, 4, 5])  # killed after step 5
    appended = _steps([2.1, 2.0, 1.9], [4, 5, 6], start=4)  # resumed from step 3
    assert capstone.resumed_lines(killed + appended, 3) == appended
    with pytest.raises(ValueError, match="did not resume from step 6"):
        capstone.resumed_lines(killed, 6)
    (tmp_path / "steps.jsonl").write_text("\n".join(json.dumps(s) for s in killed))
    assert capstone.read_steps(tmp_path) == killed


def test_the_global_batch_check_matches_each_process_block_to_its_local_batch():
    steps = [{"process_checksums": [11, 21]}, {"process_checksums": [12, 22]}]
    reports = [{"rank": 0, "local_checksums": [11, 12], "local_shape": [8, 128],
                "global_shape": [16, 128]},
               {"rank": 1, "local_checksums": [21, 22], "local_shape": [8, 128],
                "global_shape": [16, 128]}]
    assert capstone.global_batch_check(steps, reports)["matching"] == 2
    reports[1]["local_checksums"] = [21, 99]  # process 1's second batch is not its block
    assert capstone.global_batch_check(steps, reports)["matching"] == 1


def test_step_times_run_from_one_step_end_to_the_next_by_step_number():
    # resumed from step 30: step 31 compiles (not timed); steps 32, 33, 34 end at 1, 2.5, 3
    report = {"start_step": 30, "step_spans": [[0.5, 1.0], [2.0, 2.5], [2.75, 3.0]]}
    assert capstone.step_times(report) == {33: 1.5, 34: 0.5}


def test_text_pieces_cover_every_docstring_byte_in_row_length_pieces():
    pieces = capstone.text_pieces(64, limit=30)
    assert max(len(piece) for piece in pieces) == 64
    assert b"".join(pieces) == b"".join(capstone._stdlib_docstrings()[:30])
    assert b"".join(capstone.code_pieces(64, 1)) == capstone._stdlib_sources()[0]


def test_both_corpora_are_written_in_their_own_files(tmp_path):
    from course_lib.array_record import ArrayRecordDataSource

    sizes = capstone.write_corpora(tmp_path, 64, 2, {"docstrings": 10, "code": 1})
    assert list(sizes) == list(capstone.CORPORA)
    for name in capstone.CORPORA:
        paths = sorted(tmp_path.glob(f"{name}-*.array_record"))
        assert len(paths) == sizes[name]["files"] == 2
        assert len(ArrayRecordDataSource(paths)) == sizes[name]["records"]
    assert sizes["code"]["tokens"] == len(capstone._stdlib_sources()[0])
    assert sizes["code"]["documents"] == sizes["code"]["documents_cut"] == 1


def test_the_picture_marks_the_kill_and_shows_the_difference_below():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [{"step": i, "loss": 5.0 - 0.01 * i} for i in range(1, 61)]
    control = [dict(step, loss=step["loss"] + 0.5) for step in steps[30:]]
    figure = capstone.plot_resume(steps, steps[30:], control, killed_after=37,
                                  resumed_from=30)
    labels = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    resumed, broken = figure.axes[1].get_lines()[:2]
    plt.close(figure)
    assert "resumed run, steps 31-60" in labels
    assert "rank 1 killed (SIGKILL) after step 37" in labels
    assert "checkpoint restored: step 30" in labels
    assert len(figure.axes) == 2
    assert list(resumed.get_xdata()) == list(range(31, 61))
    assert all(difference == 0 for difference in resumed.get_ydata())
    assert all(abs(difference - 0.5) < 1e-12 for difference in broken.get_ydata())
