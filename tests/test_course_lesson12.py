"""Lesson 12's sentences and helpers, with made-up numbers for every outcome."""

from __future__ import annotations

import json

import pytest

from course_lib.course import capstone


def _steps(losses, checksums, start=1):
    return [{"step": start + i, "loss": loss, "checksum": checksum, "real_tokens": 100,
             "time": float(i)} for i, (loss, checksum) in enumerate(zip(losses, checksums,
                                                                     strict=True))]


def test_an_exact_resume_is_said_to_be_exact():
    reference = _steps([3.0, 2.5, 2.25, 2.0], [1, 2, 3, 4])
    resumed = _steps([2.25, 2.0], [3, 4], start=3)
    comparison = capstone.compare_runs(reference, resumed, from_step=2)
    assert comparison == {"steps": 2, "missing": [], "same_batches": [3, 4],
                          "same_losses": [3, 4]}
    sentence = capstone.resume_sentence(comparison, killed_after=3, resumed_from=2,
                                        traces=[1, 1, 1, 1])
    assert "all 2 steps after the checkpoint have the same global batch" in sentence
    assert "traced its step once" in sentence and "not exact" not in sentence


def test_a_different_loss_or_batch_is_reported_as_not_exact():
    reference = _steps([3.0, 2.5, 2.25, 2.0], [1, 2, 3, 4])
    resumed = _steps([2.25, 2.0000001], [3, 5], start=3)
    comparison = capstone.compare_runs(reference, resumed, from_step=2)
    sentence = capstone.resume_sentence(comparison, 3, 2, [1, 1, 1, 1])
    assert "1 have the same global batch and 1 the same loss" in sentence
    assert "not exact" in sentence


def test_a_second_trace_and_missing_steps_are_reported():
    reference = _steps([3.0, 2.5, 2.25], [1, 2, 3])
    comparison = capstone.compare_runs(reference, _steps([2.25], [3], start=3), 2)
    assert "[1, 2, 1, 1] times" in capstone.resume_sentence(comparison, 3, 2, [1, 2, 1, 1])
    short = capstone.compare_runs(reference, _steps([2.5], [2], start=2), 1)
    assert "cannot be compared" in capstone.resume_sentence(short, 3, 1, [1, 1])


@pytest.mark.parametrize(("shares", "verdict"), [
    ([0.02, 0.05], "the loader keeps up"),
    ([0.02, 0.2], "some time goes to waiting"),
    ([0.5, 0.1], "the processes wait a large part"),
])
def test_the_idle_sentence_follows_the_worst_process(shares, verdict):
    reports = [{"rank": rank, "idle_share": share} for rank, share in enumerate(shares)]
    sentence = capstone.idle_sentence(reports, 12345.0)
    assert verdict in sentence and "12,345 real tokens per second" in sentence
    assert f"process 1 {100 * shares[1]:.0f}%" in sentence


def test_tokens_per_second_leaves_out_the_compiling_step():
    steps = [{"time": t, "real_tokens": 50} for t in (0.0, 10.0, 11.0, 12.0)]
    assert capstone.tokens_per_second(steps) == pytest.approx(100 / 2.0)
    with pytest.raises(ValueError, match="too few"):
        capstone.tokens_per_second(steps[:2])


def test_text_pieces_cover_every_docstring_byte_in_row_length_pieces(tmp_path):
    pieces = capstone.text_pieces(64, limit=30)
    assert max(len(piece) for piece in pieces) == 64
    joined = b"".join(capstone._stdlib_docstrings()[:30])
    assert b"".join(pieces) == joined
    (tmp_path / "steps.jsonl").write_text("\n".join(json.dumps(s) for s in _steps([1.0], [7])))
    assert capstone.read_steps(tmp_path)[0]["checksum"] == 7
