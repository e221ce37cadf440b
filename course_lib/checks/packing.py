"""Exercise 8, pack sequences and mask attention: first fit, and the mask from segment ids.

`check_pack_first_fit(pack_first_fit)` calls the learner's `pack_first_fit(lengths,
row_length)` on every small case (all lists of up to five lengths from 1 to 4, rows of 4 and
5: brute force over the whole space) and on random long-tailed ones, and compares each
answer with first fit computed here. Before comparing, it reads the answer the way a packer
would and names the first broken promise:

1. **A list of rows, each a list of sequence indices.**
2. **No row over `row_length`.** A row that overflows would not fit the batch's shape.
3. **Every sequence exactly once.** A dropped sequence is data never trained on; a repeated
   one is seen twice as often as the others.
4. **First fit, in the given order.** Each sequence goes into the first row with room for it
   when it arrives, or opens a new row. Best fit (the fullest row with room) and sorting the
   lengths first (first fit decreasing) pack well too, but they are other algorithms: a
   streaming loader cannot sort a stream it has not seen, and the course's operation, like
   Grain's, is first fit. The check recognises both and says so.

`check_segment_mask(segment_mask)` calls `segment_mask(segment_ids)` on a hand-made row, on
packed batches with a leading batch axis and on ids with two leading axes, and compares with
the rule: `mask[..., q, k]` is True exactly when query `q` and key `k` have the same segment
id and that id is not 0 (padding). It names the mistake: padding that attends or is attended
to, attention across a segment boundary, a token that cannot see its own segment, or a mask
of the wrong shape.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from course_lib.checks._verdict import expect, fail, learner_code, passed

__all__ = ["check_pack_first_fit", "check_segment_mask", "first_fit_rows"]

SMALL_ROWS, SMALL_MAX_LENGTH, SMALL_MAX_COUNT = (4, 5), 4, 5
RANDOM_CASES, RANDOM_SEED = 40, 8
SHOWN_ROWS = 4


def first_fit_rows(lengths: Sequence[int], row_length: int) -> list[list[int]]:
    """The reference: each sequence into the first row with room, else a new row."""
    rows, room = [], []
    for index, length in enumerate(lengths):
        row = next((r for r, free in enumerate(room) if free >= length), None)
        if row is None:
            rows.append([])
            room.append(row_length)
            row = len(rows) - 1
        rows[row].append(index)
        room[row] -= length
    return rows


def _best_fit_rows(lengths: Sequence[int], row_length: int) -> list[list[int]]:
    rows, room = [], []
    for index, length in enumerate(lengths):
        fits = [(free, r) for r, free in enumerate(room) if free >= length]
        if not fits:
            rows.append([])
            room.append(row_length)
            fits = [(row_length, len(rows) - 1)]
        row = min(fits)[1]
        rows[row].append(index)
        room[row] -= length
    return rows


def _decreasing_rows(lengths: Sequence[int], row_length: int) -> list[list[int]]:
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
    rows = first_fit_rows([lengths[index] for index in order], row_length)
    return [[order[position] for position in row] for row in rows]


def _small_cases():
    for row_length in SMALL_ROWS:
        for count in range(1, SMALL_MAX_COUNT + 1):
            for lengths in itertools.product(range(1, SMALL_MAX_LENGTH + 1), repeat=count):
                yield list(lengths), row_length


def _random_cases():
    rng = np.random.default_rng(RANDOM_SEED)
    for _ in range(RANDOM_CASES):
        row_length = int(rng.integers(16, 129))
        lengths = np.minimum(rng.lognormal(2.5, 0.9, size=int(rng.integers(5, 60))), row_length)
        yield [max(1, int(length)) for length in lengths], row_length


def _rows_of(result, call: str, count: int) -> list[list[int]]:
    expect(isinstance(result, list | tuple),
           f"{call} returned {type(result).__name__}, not a list of rows",
           "return a list with one list of sequence indices per row, e.g. [[0, 2], [1]]")
    rows = []
    for position, row in enumerate(result):
        expect(isinstance(row, list | tuple | np.ndarray),
               f"row {position} of what {call} returned is {type(row).__name__} {row!r:.40}, "
               "not a list of sequence indices",
               "make each row the list of the indices of the sequences in it, e.g. [0, 2]")
        indices = []
        for index in row:
            expect(isinstance(index, int | np.integer) and not isinstance(index, bool),
                   f"row {position} of what {call} returned holds {index!r:.40}, not a "
                   "sequence index",
                   "put indices into lengths in the rows (0 for the first sequence), not the "
                   "lengths themselves or the tokens")
            expect(0 <= index < count,
                   f"row {position} of what {call} returned holds index {index}, but there "
                   f"are only {count} sequences (indices 0 to {count - 1})",
                   "put indices into lengths in the rows, counting from 0")
            indices.append(int(index))
        rows.append(indices)
    return rows


def _show(rows: list[list[int]]) -> str:
    shown = ", ".join(map(str, rows[:SHOWN_ROWS]))
    return f"[{shown}{', ...' if len(rows) > SHOWN_ROWS else ''}]"


def _check_rows(rows, lengths, row_length, call: str) -> None:
    for position, row in enumerate(rows):
        used = sum(lengths[index] for index in row)
        expect(used <= row_length,
               f"{call} put sequences {row} (lengths {[lengths[i] for i in row]}, {used} "
               f"tokens) in row {position}, which holds only {row_length}",
               "before putting a sequence in a row, check that the tokens already there plus "
               "its length are at most row_length; when no row has room, open a new row")
    counts = Counter(index for row in rows for index in row)
    missing = [index for index in range(len(lengths)) if index not in counts]
    expect(not missing,
           f"{call} left out sequences {missing[:8]}: they are in no row",
           "put every sequence in some row: when none of the rows has room, append a new row")
    repeated = sorted(index for index, times in counts.items() if times > 1)
    expect(not repeated,
           f"{call} put sequences {repeated[:8]} in more than one row (or twice in one)",
           "place each sequence once: stop looking for a row as soon as one has room (break)")
    expect(all(rows), f"{call} returned an empty row",
           "open a new row only for a sequence that fits in none of the rows so far")


def _check_first_fit(rows, lengths, row_length, call: str) -> None:
    expected = first_fit_rows(lengths, row_length)
    if rows == expected:
        return
    if rows == _best_fit_rows(lengths, row_length):
        fail(f"{call} returned {_show(rows)}, which is best fit (each sequence into the fullest "
             f"row with room); first fit gives {_show(expected)}",
             "put each sequence into the FIRST row with room, scanning rows from row 0, not "
             "the one it fills best")
    if rows == _decreasing_rows(lengths, row_length) or sorted(map(sorted, rows)) == sorted(
            map(sorted, _decreasing_rows(lengths, row_length))):
        fail(f"{call} returned {_show(rows)}, which packs the sequences longest first; "
             f"first fit in the given order gives {_show(expected)}",
             "take the sequences in the order of lengths, as a stream arrives, without "
             "sorting them")
    if sorted(map(sorted, rows)) == sorted(map(sorted, expected)):
        fail(f"{call} returned {_show(rows)}: the right groups, but not in first fit's order "
             f"{_show(expected)}",
             "keep rows in the order they were opened, and each row's indices in the order "
             "they were added")
    placed = {index: r for r, row in enumerate(rows) for index in row}
    wanted = {index: r for r, row in enumerate(expected) for index in row}
    first = next(index for index in range(len(lengths)) if placed[index] != wanted[index])
    fail(f"{call} returned {_show(rows)}, not first fit {_show(expected)}: sequence {first} "
         f"(length {lengths[first]}) belongs in row {wanted[first]}, the first with room when "
         "it arrives",
         "for each sequence in order, scan the rows from row 0 and put it in the first with "
         "room for it; when none has room, append a new row")


def check_pack_first_fit(pack_first_fit: Callable[[list[int], int], list[list[int]]]) -> None:
    """Exercise 8, part 1: every small case and random ones against first fit."""
    cases = itertools.chain(_small_cases(), _random_cases())
    count = 0
    for lengths, row_length in cases:
        call = f"pack_first_fit({lengths}, row_length={row_length})"
        with learner_code(call):
            result = pack_first_fit(list(lengths), row_length)
        rows = _rows_of(result, call, len(lengths))
        _check_rows(rows, lengths, row_length, call)
        _check_first_fit(rows, lengths, row_length, call)
        count += 1
    example = [4, 5, 3, 2, 1]
    passed(f"pack_first_fit is first fit on all {count} cases (every small one and random "
           f"long-tailed ones). For lengths {example} and rows of 8: "
           f"{pack_first_fit(example, 8)}")


def _reference_mask(segment_ids: np.ndarray) -> np.ndarray:
    same = segment_ids[..., :, None] == segment_ids[..., None, :]
    return same & (segment_ids[..., :, None] > 0)


def _id_cases() -> list[np.ndarray]:
    from course_lib.packing import PackAndBatchOperation

    rng = np.random.default_rng(RANDOM_SEED)
    sequences = [np.ones(int(n), np.int32) for n in rng.integers(1, 9, size=30)]
    packer = PackAndBatchOperation(12, 3).start()
    packed = [batch[1] for batch, _ in packer.extend(range(len(sequences)), sequences)]
    return [np.array([1, 1, 2, 2, 2, 0], np.int32),
            np.array([[1, 2, 3, 0], [0, 0, 0, 0]], np.int32),
            *packed[:3],
            np.stack(packed[:2])]  # two leading axes


def _mask_of(segment_mask: Callable, segment_ids: np.ndarray) -> np.ndarray:
    call = f"segment_mask(segment_ids of shape {segment_ids.shape})"
    with learner_code(call):
        mask = np.asarray(segment_mask(segment_ids.copy()))
    wanted = (*segment_ids.shape, segment_ids.shape[-1])
    expect(mask.shape == wanted,
           f"{call} returned a mask of shape {mask.shape}, not {wanted} (the ids' shape with "
           "one more axis of T: one row of keys per query)",
           "compare segment_ids[..., :, None] with segment_ids[..., None, :], which "
           "broadcasts to (..., T, T) for any leading axes")
    expect(mask.dtype == np.bool_,
           f"{call} returned a mask of dtype {mask.dtype}, not bool",
           "return the comparison itself (==, &), which is boolean, without casting it")
    return mask


def _check_mask(mask: np.ndarray, segment_ids: np.ndarray) -> None:
    expected = _reference_mask(segment_ids)
    if np.array_equal(mask, expected):
        return
    query_ids = np.broadcast_to(segment_ids[..., :, None], mask.shape)
    key_ids = np.broadcast_to(segment_ids[..., None, :], mask.shape)
    wrong = mask != expected
    at = tuple(int(i) for i in np.argwhere(wrong)[0])
    pair = f"query id {query_ids[at]}, key id {key_ids[at]} (at mask{list(at)})"
    where = f"for segment ids {segment_ids.tolist()}" if segment_ids.ndim == 1 else (
        f"for ids of shape {segment_ids.shape}")
    if mask[at] and (query_ids[at] == 0 or key_ids[at] == 0):
        fail(f"the mask lets padding attend or be attended to {where}: it is True for {pair}",
             "padding (segment id 0) must be masked out: and the comparison with "
             "segment_ids[..., :, None] > 0")
    if mask[at]:
        fail(f"the mask lets a token attend across a segment boundary {where}: it is True for "
             f"{pair}",
             "a query may see a key only when both have the same segment id: compare the ids "
             "themselves, segment_ids[..., :, None] == segment_ids[..., None, :]")
    fail(f"the mask hides a token's own segment {where}: it is False for {pair}",
         "every pair of non-padding tokens with the same segment id must be True, in both "
         "directions, the diagonal included")


def check_segment_mask(segment_mask: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise 8, part 2: the mask from segment ids, on hand-made and packed ids."""
    cases = _id_cases()
    for segment_ids in cases:
        _check_mask(_mask_of(segment_mask, segment_ids), segment_ids)
    shown = cases[0]
    mask = _mask_of(segment_mask, shown)
    picture = "\n".join(f"  {int(query)} " + " ".join("#" if allowed else "." for allowed in row)
                        for query, row in zip(shown, mask, strict=True))
    passed(f"segment_mask is right on {len(cases)} sets of segment ids, packed ones "
           f"included. For ids {shown.tolist()} (# = may attend, rows are queries):\n{picture}")
