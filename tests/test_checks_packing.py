"""Exercise 8's checks: `check_pack_first_fit`, then positions, the causal mask and the
next-token loss mask from segment ids: the answers pass, each near miss gets its own advice."""

from __future__ import annotations

import numpy as np
import pytest

from course_lib import checks


def first_fit(stream, row_length, batch_size):
    """The loader's rule: batch_size open rows, the batch handed out when a sequence fits none."""
    rows, used, index = [[] for _ in range(batch_size)], [0] * batch_size, None
    for index, length in stream:
        row = next((r for r in range(batch_size) if used[r] + length <= row_length), None)
        if row is None:
            yield rows, index
            rows, used, row = [[] for _ in range(batch_size)], [0] * batch_size, 0
        rows[row].append(index)
        used[row] += length
    if index is not None:
        yield rows, index + 1


def unsolved(stream, row_length, batch_size):
    raise NotImplementedError("first fit")


def rows_open_forever(stream, row_length, batch_size):
    """The old exercise's rule: every row stays open until the stream ends."""
    rows, used, index = [], [], None
    for index, length in stream:
        row = next((r for r in range(len(rows)) if used[r] + length <= row_length), None)
        if row is None:
            rows.append([])
            used.append(0)
            row = len(rows) - 1
        rows[row].append(index)
        used[row] += length
    if index is not None:
        yield rows, index + 1


def old_rule_cut_into_batches(stream, row_length, batch_size):
    """Every row open until the end, then the rows dealt out batch_size at a time."""
    [(rows, end)] = list(rows_open_forever(stream, row_length, batch_size))
    for start in range(0, len(rows), batch_size):
        batch = rows[start:start + batch_size]
        batch += [[] for _ in range(batch_size - len(batch))]
        later = [index for row in rows[start + batch_size:] for index in row]
        yield batch, min(later) if later else end


def every_row_open_then_dealt_out(stream, row_length, batch_size):
    """Every row open until the stream ends, then dealt out batch_size at a time, each batch
    reported with the end of the stream: on short streams, the loader's rows."""
    for rows, end in rows_open_forever(stream, row_length, batch_size):
        for start in range(0, len(rows), batch_size):
            batch = rows[start:start + batch_size]
            yield batch + [[] for _ in range(batch_size - len(batch))], end


def never_flushes_the_last(stream, row_length, batch_size):
    batches = list(first_fit(stream, row_length, batch_size))
    yield from batches[:-1]


def flushes_one_row(stream, row_length, batch_size):
    """When a sequence fits no row, hands out the fullest row only and opens one in its place."""
    rows, used, done, index = [[] for _ in range(batch_size)], [0] * batch_size, [], None
    for index, length in stream:
        row = next((r for r in range(batch_size) if used[r] + length <= row_length), None)
        if row is None:
            row = max(range(batch_size), key=lambda r: used[r])
            done.append(rows[row])
            rows[row], used[row] = [], 0
            if len(done) == batch_size:
                yield done, index
                done = []
        rows[row].append(index)
        used[row] += length
    if index is not None:
        left = done + [row for row in rows if row]
        for start in range(0, len(left), batch_size):
            batch = left[start:start + batch_size]
            yield batch + [[] for _ in range(batch_size - len(batch))], index + 1


def flushes_when_a_row_is_full(stream, row_length, batch_size):
    """Hands the batch out as soon as one of its rows is full."""
    rows, used, index = [[] for _ in range(batch_size)], [0] * batch_size, None
    for index, length in stream:
        row = next((r for r in range(batch_size) if used[r] + length <= row_length), None)
        if row is None:
            yield rows, index
            rows, used, row = [[] for _ in range(batch_size)], [0] * batch_size, 0
        rows[row].append(index)
        used[row] += length
        if used[row] == row_length:
            yield rows, index + 1
            rows, used = [[] for _ in range(batch_size)], [0] * batch_size
    if index is not None and any(rows):
        yield rows, index + 1


def empties_the_rows_handed_out(stream, row_length, batch_size):
    """Clears the lists of the batch it yielded, to reuse them for the next batch."""
    rows, used, index = [[] for _ in range(batch_size)], [0] * batch_size, None
    for index, length in stream:
        row = next((r for r in range(batch_size) if used[r] + length <= row_length), None)
        if row is None:
            yield rows, index
            for each in rows:
                each.clear()
            used, row = [0] * batch_size, 0
        rows[row].append(index)
        used[row] += length
    if index is not None:
        yield rows, index + 1


def drops_what_fits_nowhere(stream, row_length, batch_size):
    """Never flushes: a sequence that fits in no row of the one batch is lost."""
    rows, used, index = [[] for _ in range(batch_size)], [0] * batch_size, None
    for index, length in stream:
        row = next((r for r in range(batch_size) if used[r] + length <= row_length), None)
        if row is not None:
            rows[row].append(index)
            used[row] += length
    if index is not None:
        yield rows, index + 1


def best_fit_in_the_batch(stream, row_length, batch_size):
    rows, used, index = [[] for _ in range(batch_size)], [0] * batch_size, None
    for index, length in stream:
        fits = [(row_length - used[r] - length, r) for r in range(batch_size)
                if used[r] + length <= row_length]
        if not fits:
            yield rows, index
            rows, used, fits = [[] for _ in range(batch_size)], [0] * batch_size, [(0, 0)]
        row = min(fits)[1]
        rows[row].append(index)
        used[row] += length
    if index is not None:
        yield rows, index + 1


def resumes_after_the_sequence_read(stream, row_length, batch_size):
    """Reports how far the stream was read: one past the sequence that closed the batch."""
    rows, used, index = [[] for _ in range(batch_size)], [0] * batch_size, None
    for index, length in stream:
        row = next((r for r in range(batch_size) if used[r] + length <= row_length), None)
        if row is None:
            yield rows, index + 1
            rows, used, row = [[] for _ in range(batch_size)], [0] * batch_size, 0
        rows[row].append(index)
        used[row] += length
    if index is not None:
        yield rows, index + 1


def resumes_from_the_batch_start(stream, row_length, batch_size):
    for rows, _ in first_fit(stream, row_length, batch_size):
        yield rows, min(index for row in rows for index in row)


def reads_everything_first(stream, row_length, batch_size):
    pairs = list(stream)
    return list(first_fit(iter(pairs), row_length, batch_size))


def drops_the_empty_rows(stream, row_length, batch_size):
    """Grain's FirstFitPackIterDataset's last batch: the empty rows left out."""
    for rows, resume_from in first_fit(stream, row_length, batch_size):
        yield [row for row in rows if row], resume_from


def asks_the_length(stream, row_length, batch_size):
    lengths = [0] * len(stream)
    return first_fit(enumerate(lengths), row_length, batch_size)


def lengths_not_indices(stream, row_length, batch_size):
    pairs = list(stream)
    lengths = dict(pairs)
    for rows, resume_from in first_fit(iter(pairs), row_length, batch_size):
        yield [[lengths[index] + 1000 for index in row] for row in rows], resume_from


def rows_without_a_position(stream, row_length, batch_size):
    for rows, _ in first_fit(stream, row_length, batch_size):
        yield rows


def test_the_loaders_rule_passes(capsys):
    checks.check_pack_first_fit(first_fit)
    out = capsys.readouterr().out
    assert out.startswith("\N{CHECK MARK} pack_first_fit packs as the loader does")
    assert "[[0], [1]] (resume from 2), then [[2, 3], []] (resume from 4)" in out


def test_unsolved_pack_passes_through_as_not_implemented():
    with pytest.raises(NotImplementedError):
        checks.check_pack_first_fit(unsolved)


@pytest.mark.parametrize(("wrong", "message"), [
    (rows_open_forever, r"has \d+ rows, for batch_size=\d+.*holds every row.*"
                        r"keep exactly batch_size rows open"),
    (old_rule_cut_into_batches, r"fits in no row of the open batch .*tokens used.*"
                                r"yield that batch whole"),
    (never_flushes_the_last, r"left out sequences .*never handed out.*yield the open batch"),
    (drops_what_fits_nowhere, r"left out sequences \[\d.*in no batch.*yield that batch"),
    (empties_the_rows_handed_out, r"was \(\[\[0\]\], 1\) when it was yielded and is "
                                  r"\(\[\[1\]\], 1\) now.*new lists"),
    (flushes_one_row, r"opens the loader's batch 0, where it is in row 0.*hands out the open "
                      r"batch itself.*yield that batch whole"),
    (flushes_when_a_row_is_full, r"but it fits in row \d of the open batch.*keep the batch "
                                 r"open while any of its rows has room"),
    (best_fit_in_the_batch, r"the first row with room for it is row 0"),
    (resumes_after_the_sequence_read, r"resume_from=\d+, but sequence \d+, the one that "
                                      r"closed the batch.*would skip it"),
    (resumes_from_the_batch_start, r"the first sequence of the batch just handed out.*"
                                   r"hand it out again"),
    (reads_everything_first, r"had taken \d+ of the \d+ .* pairs when it handed out batch 0.*"
                             r"endless stream.*inside the loop"),
    # Its positions are wrong from the first stream on, but what it is told is the rule
    # it breaks: rows and streaming are judged on every case before any position.
    (every_row_open_then_dealt_out, r"put sequence 2 \(length 1\) in batch 0, row 0, but it "
                                    r"fits in no row of the open batch \[\[1\]\].*yield that "
                                    r"batch whole"),
    (drops_the_empty_rows, r"has 1 row, for batch_size=2.*Grain's FirstFitPackIterDataset "
                           r"drops them.*as \[\]"),
    (asks_the_length, r"no length and no indexing.*for index, length in stream"),
    (lengths_not_indices, r"not the index of a sequence"),
    (rows_without_a_position, r"not a pair \(rows, resume_from\)"),
])
def test_a_wrong_packer_is_refused_with_advice(wrong, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_pack_first_fit(wrong)


def test_the_loaders_rule_on_the_issues_example():
    """Lengths [5, 5, 5, 3] in rows of 8, 2 rows a batch: the loader hands out [[0], [1]]
    when sequence 2 fits no row, and the old rule (every row open) would give
    [[0, 3], [1], [2]]."""
    assert checks.packing.loader_batches([5, 5, 5, 3], 8, 2) == [
        ([[0], [1]], 2), ([[2, 3], []], 4)]
    assert list(rows_open_forever(enumerate([5, 5, 5, 3]), 8, 2)) == [([[0, 3], [1], [2]], 4)]


def test_the_reference_is_grains_first_fit_too():
    """course_lib's packer, which the check compares with, puts every sequence in the row
    where Grain's FirstFitPackIterDataset (bins not shuffled) puts it; Grain leaves out the
    empty rows of its last batch."""
    grain = pytest.importorskip("grain")
    rng = np.random.default_rng(0)
    for _ in range(50):
        row_length, batch_size = int(rng.integers(8, 40)), int(rng.integers(1, 6))
        lengths = rng.integers(1, row_length + 1, size=int(rng.integers(1, 30))).tolist()
        records = [{"tokens": np.full(length, index + 1, np.int64)}
                   for index, length in enumerate(lengths)]
        packed = grain.experimental.FirstFitPackIterDataset(
            grain.MapDataset.source(records).to_iter_dataset(),
            length_struct={"tokens": row_length}, num_packing_bins=batch_size,
            shuffle_bins=False)
        grains = [[int(value) - 1 for value in dict.fromkeys(row["tokens"][row["tokens"] > 0])]
                  for row in packed]
        ours = [row for rows, _ in checks.packing.loader_batches(lengths, row_length,
                                                                 batch_size) for row in rows]
        assert [row for row in ours if row] == grains


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


def positions_over_the_flattened_batch(segment_ids):
    """Right for one row; over a batch, runs on from a row one sequence fills into the next."""
    return positions(segment_ids.reshape(-1)).reshape(segment_ids.shape)


def test_the_ids_checked_hold_every_kind_of_row_a_packer_makes():
    cases = checks.packing._id_cases()
    rows = [row.tolist() for case in cases for row in case.reshape(-1, case.shape[-1])]
    assert any(set(row) == {1} for row in rows), "a row one sequence fills"
    assert any(0 not in row and max(row) > 1 for row in rows), "a row several sequences fill"
    assert any(set(row) == {0} for row in rows), "an empty row"
    assert any(len(set(row) - {0}) == len(row) for row in rows), "one-token sequences"
    batches = [case for case in cases if case.ndim == 2]
    assert any((batch == batch[0]).all() and batch[0].max() > 1 for batch in batches), (
        "a batch whose rows hold the same ids")
    assert any(case.ndim == 3 for case in cases), "two leading axes"


def test_the_positions_pass(capsys):
    checks.check_segment_positions(positions)
    out = capsys.readouterr().out
    assert out.startswith("\N{CHECK MARK} segment_positions") and "[0, 1, 0, 1, 2, 0]" in out


def test_unsolved_positions_pass_through_as_not_implemented():
    with pytest.raises(NotImplementedError):
        checks.check_segment_positions(positions_unsolved)


def positions_along_axis_one(segment_ids):
    """Right on one row and on a batch of rows, but it works along axis 1, not the last."""
    ids = np.atleast_2d(segment_ids)
    slots = np.arange(ids.shape[-1])
    starts = np.ones(ids.shape, bool)
    starts[:, 1:] = ids[:, 1:] != ids[:, :-1]
    first_slot = np.maximum.accumulate(np.where(starts, slots, 0), axis=1)
    return np.where(ids > 0, slots - first_slot, 0).reshape(segment_ids.shape)


def test_positions_right_on_rows_but_not_on_more_leading_axes_are_told_so():
    with pytest.raises(AssertionError,
                       match=r"right on one row and on a batch of rows.*shape \(2, 3, 6\).*"
                             r"last axis.*segment_ids\[\.\.\., 1:\]"):
        checks.check_segment_positions(positions_along_axis_one)


@pytest.mark.parametrize(("wrong", "message"), [
    (positions_not_reset, r"slots of the row .*never restart.*restart at 0"),
    (positions_from_one, r"count from 1"),
    (positions_on_padding, r"padding slots have positions.*position 0"),
    (positions_as_floats, r"dtype float32, not an integer dtype"),
    (positions_over_the_flattened_batch, r"run on from one row into the next.*slot \[1, 0\] "
                                         r"has position 6.*last axis only"),
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
    (not_causal, r"not causal.*later key.*only when k <= q"),
    (upper_triangle, r"not causal"),
    (padding_attends, r"lets padding attend.*id 0"),
    (across_boundaries, r"across a segment boundary.*same segment id"),
    (strictly_earlier, r"cannot see itself.*includes k == q"),
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
    (padding_scored, r"scores padding.*padding \(id 0\) in either slot is never scored"),
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
