"""`checks.check_pack_first_fit` and `checks.check_segment_mask`: the answers pass, each
typical mistake gets its own advice."""

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


def mask(segment_ids):
    return (segment_ids[..., :, None] == segment_ids[..., None, :]) & (
        segment_ids[..., :, None] > 0)


def mask_unsolved(segment_ids):
    raise NotImplementedError("the mask")


def padding_attends(segment_ids):
    return segment_ids[..., :, None] == segment_ids[..., None, :]


def padding_keys_visible(segment_ids):
    return mask(segment_ids) | ((segment_ids[..., :, None] > 0) & (segment_ids[..., None, :] == 0))


def ignores_boundaries(segment_ids):
    real = segment_ids > 0
    return real[..., :, None] & real[..., None, :]


def causal_only(segment_ids):
    length = segment_ids.shape[-1]
    return mask(segment_ids) & np.tril(np.ones((length, length), bool))


def flattened(segment_ids):
    return mask(segment_ids).reshape(-1, segment_ids.shape[-1])


def as_integers(segment_ids):
    return mask(segment_ids).astype(np.int32)


def first_row_only(segment_ids):
    return mask(segment_ids.reshape(-1, segment_ids.shape[-1])[0])


def test_the_mask_passes(capsys):
    checks.check_segment_mask(mask)
    out = capsys.readouterr().out
    assert out.startswith("\N{CHECK MARK} segment_mask is right") and "# # ." in out


def test_unsolved_mask_passes_through_as_not_implemented():
    with pytest.raises(NotImplementedError):
        checks.check_segment_mask(mask_unsolved)


@pytest.mark.parametrize(("wrong", "message"), [
    (padding_attends, r"lets padding attend.*segment id 0"),
    (padding_keys_visible, r"lets padding attend.*key id 0"),
    (ignores_boundaries, r"across a segment boundary.*compare the ids"),
    (causal_only, r"hides a token's own segment.*both directions"),
    (flattened, r"shape \(\d+, 6\), not \(6, 6\)|shape .* not .*broadcasts"),
    (as_integers, r"dtype int32, not bool"),
    (first_row_only, r"shape .* not \(2, 4, 4\)"),
])
def test_a_wrong_mask_is_refused_with_advice(wrong, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_segment_mask(wrong)


def test_the_reference_packs_streams_first_fit():
    assert checks.packing.first_fit_rows([4, 5, 3, 2, 1], 8) == [[0, 2, 4], [1, 3]]
