"""Exercise 8's checks: `check_pack_first_fit`, then positions, the causal mask and the
next-token loss mask from segment ids: the answers pass, each near miss gets its own advice."""

from __future__ import annotations

import numpy as np
import pytest

from course_lib import checks


def first_fit(lengths, row_length):
    rows, used = [], []
    for index, length in enumerate(lengths):
        for row in range(len(rows)):
            if used[row] + length <= row_length:
                rows[row].append(index)
                used[row] += length
                break
        else:
            rows.append([index])
            used.append(length)
    return rows


def unsolved(lengths, row_length):
    raise NotImplementedError("first fit")


def no_room_check(lengths, row_length):
    return [list(range(len(lengths)))]


def overflow_by_one(lengths, row_length):
    return first_fit(lengths, row_length + 1)


def drops_the_last(lengths, row_length):
    rows = first_fit(lengths, row_length)
    rows[-1] = rows[-1][:-1]
    return [row for row in rows if row] if len(lengths) > 1 else [[]]


def no_break(lengths, row_length):
    """Puts a sequence in every row with room, not only the first."""
    rows, used = [], []
    for index, length in enumerate(lengths):
        placed = False
        for row in range(len(rows)):
            if used[row] + length <= row_length:
                rows[row].append(index)
                used[row] += length
                placed = True
        if not placed:
            rows.append([index])
            used.append(length)
    return rows


def best_fit(lengths, row_length):
    rows, used = [], []
    for index, length in enumerate(lengths):
        fits = [(row_length - used[row], row) for row in range(len(rows))
                if used[row] + length <= row_length]
        if fits:
            row = min(fits)[1]
            rows[row].append(index)
            used[row] += length
        else:
            rows.append([index])
            used.append(length)
    return rows


def sorted_first(lengths, row_length):
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
    rows = first_fit([lengths[index] for index in order], row_length)
    return [[order[position] for position in row] for row in rows]


def next_fit(lengths, row_length):
    """Only ever looks at the last row."""
    rows, used = [], 0
    for index, length in enumerate(lengths):
        if rows and used + length <= row_length:
            rows[-1].append(index)
            used += length
        else:
            rows.append([index])
            used = length
    return rows


def lengths_not_indices(lengths, row_length):
    return [[lengths[index] for index in row] for row in first_fit(lengths, row_length)]


def a_number(lengths, row_length):
    return len(first_fit(lengths, row_length))


def test_first_fit_passes(capsys):
    checks.check_pack_first_fit(first_fit)
    assert capsys.readouterr().out.startswith("\N{CHECK MARK} pack_first_fit is first fit")


def test_unsolved_pack_passes_through_as_not_implemented():
    with pytest.raises(NotImplementedError):
        checks.check_pack_first_fit(unsolved)


@pytest.mark.parametrize(("wrong", "message"), [
    (no_room_check, r"which holds only .*check that the tokens already there"),
    (overflow_by_one, r"which holds only"),
    (drops_the_last, r"left out sequences .*put every sequence in some row"),
    (no_break, r"more than one row.*stop looking"),
    (best_fit, r"best fit.*FIRST row with room"),
    (sorted_first, r"longest first.*without sorting"),
    (next_fit, r"not first fit .*belongs in row .*scan the rows from row 0"),
    (lengths_not_indices, r"(holds index|not first fit|holds only|left out|more than one)"),
    (a_number, r"returned int, not a list of rows"),
])
def test_a_wrong_packing_is_refused_with_advice(wrong, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_pack_first_fit(wrong)


# -- part 2 ----------------------------------------------------------------------------------
def positions(segment_ids):
    slots = np.arange(segment_ids.shape[-1])
    starts = np.ones(segment_ids.shape, bool)
    starts[..., 1:] = segment_ids[..., 1:] != segment_ids[..., :-1]
    first = np.maximum.accumulate(np.where(starts, slots, 0), axis=-1)
    return np.where(segment_ids > 0, slots - first, 0)


def positions_unsolved(segment_ids):
    raise NotImplementedError("positions")


def positions_not_reset(segment_ids):
    return np.broadcast_to(np.arange(segment_ids.shape[-1]), segment_ids.shape).copy()


def positions_from_one(segment_ids):
    return np.where(segment_ids > 0, positions(segment_ids) + 1, 0)


def positions_on_padding(segment_ids):
    slots = np.arange(segment_ids.shape[-1])
    return np.where(segment_ids > 0, positions(segment_ids), slots)


def positions_as_floats(segment_ids):
    return positions(segment_ids).astype(np.float32)


def test_the_positions_pass(capsys):
    checks.check_segment_positions(positions)
    out = capsys.readouterr().out
    assert out.startswith("\N{CHECK MARK} segment_positions") and "[0, 1, 0, 1, 2, 0]" in out


def test_unsolved_positions_pass_through_as_not_implemented():
    with pytest.raises(NotImplementedError):
        checks.check_segment_positions(positions_unsolved)


@pytest.mark.parametrize(("wrong", "message"), [
    (positions_not_reset, r"slots of the row .*never restart.*restart at 0"),
    (positions_from_one, r"count from 1"),
    (positions_on_padding, r"padding slots have positions.*position 0"),
    (positions_as_floats, r"dtype float32, not an integer dtype"),
])
def test_wrong_positions_are_refused_with_advice(wrong, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_segment_positions(wrong)


def causal(segment_ids):
    length = segment_ids.shape[-1]
    same = segment_ids[..., :, None] == segment_ids[..., None, :]
    return same & (segment_ids[..., :, None] > 0) & np.tril(np.ones((length, length), bool))


def mask_unsolved(segment_ids):
    raise NotImplementedError("the mask")


def not_causal(segment_ids):
    """Lesson 10's segment mask alone: the old part 2's answer."""
    return (segment_ids[..., :, None] == segment_ids[..., None, :]) & (
        segment_ids[..., :, None] > 0)


def padding_attends(segment_ids):
    length = segment_ids.shape[-1]
    return (segment_ids[..., :, None] == segment_ids[..., None, :]) & np.tril(
        np.ones((length, length), bool))


def across_boundaries(segment_ids):
    length = segment_ids.shape[-1]
    real = segment_ids > 0
    return real[..., :, None] & real[..., None, :] & np.tril(np.ones((length, length), bool))


def strictly_earlier(segment_ids):
    length = segment_ids.shape[-1]
    return causal(segment_ids) & np.tril(np.ones((length, length), bool), -1)


def upper_triangle(segment_ids):
    return np.swapaxes(causal(segment_ids), -1, -2)


def mask_as_integers(segment_ids):
    return causal(segment_ids).astype(np.int32)


def mask_first_row_only(segment_ids):
    return causal(segment_ids.reshape(-1, segment_ids.shape[-1])[0])


def test_the_causal_mask_passes(capsys):
    checks.check_causal_segment_mask(causal)
    out = capsys.readouterr().out
    assert out.startswith("\N{CHECK MARK} causal_segment_mask is right")
    assert "  2 . . # # . ." in out


def test_unsolved_mask_passes_through_as_not_implemented():
    with pytest.raises(NotImplementedError):
        checks.check_causal_segment_mask(mask_unsolved)


@pytest.mark.parametrize(("wrong", "message"), [
    (not_causal, r"not causal.*later key.*np\.tril"),
    (upper_triangle, r"not causal"),
    (padding_attends, r"lets padding attend.*id 0"),
    (across_boundaries, r"across a segment boundary.*same segment id"),
    (strictly_earlier, r"cannot see itself.*diagonal"),
    (mask_as_integers, r"dtype int32, not bool"),
    (mask_first_row_only, r"shape .* not \(2, 4, 4\)"),
])
def test_a_wrong_mask_is_refused_with_advice(wrong, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_causal_segment_mask(wrong)


def loss_mask(segment_ids):
    return (segment_ids[..., 1:] == segment_ids[..., :-1]) & (segment_ids[..., 1:] > 0)


def loss_unsolved(segment_ids):
    raise NotImplementedError("the loss mask")


def every_real_token(segment_ids):
    """The old cell 11's statement: `segment_ids > 0`."""
    return segment_ids > 0


def real_targets(segment_ids):
    """The length fixed, the boundary not: scores each sequence on its neighbour's start."""
    return segment_ids[..., 1:] > 0


def padding_scored(segment_ids):
    return segment_ids[..., 1:] == segment_ids[..., :-1]


def test_the_loss_mask_passes(capsys):
    checks.check_next_token_loss_mask(loss_mask)
    assert "[1, 0, 1, 1, 0]" in capsys.readouterr().out


def test_unsolved_loss_mask_passes_through_as_not_implemented():
    with pytest.raises(NotImplementedError):
        checks.check_next_token_loss_mask(loss_unsolved)


@pytest.mark.parametrize(("wrong", "message"), [
    (every_real_token, r"shape \(6,\), not \(5,\).*T - 1 entries.*across boundaries"),
    (real_targets, r"crosses a segment boundary.*neighbour's first token"),
    (padding_scored, r"scores padding.*> 0"),
])
def test_a_wrong_loss_mask_is_refused_with_advice(wrong, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_next_token_loss_mask(wrong)


def test_packed_sequences_compute_as_alone_with_the_right_answers(capsys):
    checks.check_packed_like_alone(positions, causal)
    assert "each of the 3 packed sequences gets the outputs it gets alone" in (
        capsys.readouterr().out)


@pytest.mark.parametrize(("wrong_positions", "wrong_mask"), [
    (positions_not_reset, causal),
    (positions, not_causal),
    (positions, across_boundaries),
])
def test_a_near_miss_changes_what_the_model_computes(wrong_positions, wrong_mask):
    with pytest.raises(AssertionError, match=r"outputs up to .* away from the same sequence "
                                             r"alone"):
        checks.check_packed_like_alone(wrong_positions, wrong_mask)


def test_the_reference_packs_streams_first_fit():
    assert checks.packing.first_fit_rows([4, 5, 3, 2, 1], 8) == [[0, 2, 4], [1, 3]]
