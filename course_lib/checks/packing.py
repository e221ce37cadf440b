"""Exercise 8, pack sequences and mask attention: first fit, then what a model needs from
segment ids (positions, the causal mask inside segments, the next-token loss mask).

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
   when it arrives, or opens a new row. Best fit (the row the sequence leaves least room in,
   Grain's `BestFitPackIterDataset`) streams just as well, and sorting the lengths first
   (first fit decreasing) packs well too, but they are other rules with other rows; the
   course's `PackAndBatchOperation`, like Grain's `FirstFitPackIterDataset`, is first fit, so
   first fit's rows can be compared with the loader's. The check recognises both and says so.

Part 2 is three functions of `segment_ids` (shape `(..., T)`, any leading axes), each called
on a hand-made row, on packed batches and on ids with two leading axes, and compared with the
rule. Each check names the near miss it sees:

- `check_segment_positions`: positions restart at 0 with each sequence and are 0 on padding.
  Near misses: the slot in the row (not reset), counting from 1, padding with a position.
- `check_causal_segment_mask`: `mask[..., q, k]` is True exactly when both are in the same
  non-padding segment and `k <= q`. Near misses: not causal (a token sees its sequence's
  future), padding attended, attention across a boundary, a token that cannot see itself.
- `check_next_token_loss_mask`: shape `(..., T - 1)`; True at `t` exactly when slots `t` and
  `t + 1` are in the same non-padding segment. Near misses: `segment_ids > 0` (which scores
  each sequence on its neighbour's first token, and has the wrong length), padding scored.
- `check_packed_like_alone`: the learner's positions and mask fed to lesson 10's model: each
  packed sequence's outputs equal its outputs alone in a row, which holds only with both.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from course_lib.checks._verdict import expect, fail, learner_code, passed

__all__ = ["check_causal_segment_mask", "check_next_token_loss_mask", "check_pack_first_fit",
           "check_packed_like_alone", "check_segment_positions", "first_fit_rows"]

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
        fail(f"{call} returned {_show(rows)}, which is best fit (each sequence into the row it "
             "leaves least room in, Grain's BestFitPackIterDataset): a packer too, but not the "
             f"rule asked for; first fit gives {_show(expected)}",
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


# -- part 2: what a model needs from segment ids ---------------------------------------------
def reference_positions(segment_ids: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... inside each segment, restarting where the id changes; 0 on padding."""
    slots = np.arange(segment_ids.shape[-1])
    starts = np.ones(segment_ids.shape, bool)
    starts[..., 1:] = segment_ids[..., 1:] != segment_ids[..., :-1]
    first_slot = np.maximum.accumulate(np.where(starts, slots, 0), axis=-1)
    return np.where(segment_ids > 0, slots - first_slot, 0)


def reference_causal_mask(segment_ids: np.ndarray) -> np.ndarray:
    queries, keys = segment_ids[..., :, None], segment_ids[..., None, :]
    length = segment_ids.shape[-1]
    return (queries == keys) & (queries > 0) & np.tril(np.ones((length, length), bool))


def reference_loss_mask(segment_ids: np.ndarray) -> np.ndarray:
    return (segment_ids[..., 1:] == segment_ids[..., :-1]) & (segment_ids[..., 1:] > 0)


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


def _where(segment_ids: np.ndarray) -> str:
    return (f"for segment ids {segment_ids.tolist()}" if segment_ids.ndim == 1 else
            f"for ids of shape {segment_ids.shape}")


def _answer(function: Callable, name: str, segment_ids: np.ndarray, shape: tuple,
            dtype_kind: str, shape_fix: str) -> np.ndarray:
    call = f"{name}(segment_ids of shape {segment_ids.shape})"
    with learner_code(call):
        answer = np.asarray(function(segment_ids.copy()))
    expect(answer.shape == shape,
           f"{call} returned shape {answer.shape}, not {shape}", shape_fix)
    kinds = {"b": "bool", "i": "an integer dtype"}
    expect(answer.dtype.kind == dtype_kind or (dtype_kind == "i" and answer.dtype.kind == "u"),
           f"{call} returned dtype {answer.dtype}, not {kinds[dtype_kind]}",
           "return the comparison itself (==, &), which is boolean" if dtype_kind == "b" else
           "compute positions with integer arithmetic (np.arange, subtraction), no floats")
    return answer


def _positions_verdict(positions: np.ndarray, segment_ids: np.ndarray) -> None:
    expected = reference_positions(segment_ids)
    if np.array_equal(positions, expected):
        return
    where = _where(segment_ids)
    slots = np.broadcast_to(np.arange(segment_ids.shape[-1]), segment_ids.shape)
    real = segment_ids > 0
    if np.array_equal(positions[real], slots[real]):
        fail(f"the positions are the slots of the row {where}: they never restart, so the "
             "second sequence of a row is embedded as if it went on from the first, and its "
             "output differs from its output alone",
             "restart at 0 wherever the segment id changes: subtract, from each slot, the slot "
             "where its segment starts")
    if np.array_equal(positions[real], expected[real] + 1):
        fail(f"the positions count from 1 {where}",
             "the first token of each sequence has position 0, as in a row of its own")
    if np.array_equal(positions[real], expected[real]):
        fail(f"padding slots have positions {sorted(set(positions[~real].tolist()))[:5]} "
             f"{where}",
             "give padding position 0, as PackAndBatchOperation does: np.where(segment_ids "
             "> 0, positions, 0)")
    at = tuple(int(i) for i in np.argwhere(positions != expected)[0])
    fail(f"position {positions[at]} at slot {list(at)} {where}, where the sequence's own "
         f"position is {expected[at]}",
         "count 0, 1, 2, ... inside each sequence, restarting where the id changes")


def check_segment_positions(segment_positions: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise 8, part 2a: positions that restart with each packed sequence."""
    cases = _id_cases()
    for segment_ids in cases:
        positions = _answer(segment_positions, "segment_positions", segment_ids,
                            segment_ids.shape, "i",
                            "return one position per slot: an array of the ids' own shape")
        _positions_verdict(positions, segment_ids)
    shown = cases[0]
    passed(f"segment_positions restarts with each sequence on {len(cases)} sets of ids. For "
           f"ids {shown.tolist()}: {segment_positions(shown.copy()).tolist()}")


def _mask_verdict(mask: np.ndarray, segment_ids: np.ndarray) -> None:
    expected = reference_causal_mask(segment_ids)
    if np.array_equal(mask, expected):
        return
    where = _where(segment_ids)
    query_ids = np.broadcast_to(segment_ids[..., :, None], mask.shape)
    key_ids = np.broadcast_to(segment_ids[..., None, :], mask.shape)
    length = segment_ids.shape[-1]
    later = np.broadcast_to(np.triu(np.ones((length, length), bool), 1), mask.shape)
    wrong = mask != expected

    def first(selection):
        at = tuple(int(i) for i in np.argwhere(selection)[0])
        return (f"query slot {at[-2]} (id {query_ids[at]}) and key slot {at[-1]} "
                f"(id {key_ids[at]})")

    padding = wrong & mask & ((query_ids == 0) | (key_ids == 0))
    if padding.any():
        fail(f"the mask lets padding attend or be attended to {where}: it is True for "
             f"{first(padding)}",
             "leave out id 0: and the comparison with segment_ids[..., :, None] > 0")
    across = wrong & mask & (query_ids != key_ids)
    if across.any():
        fail(f"the mask lets a token attend across a segment boundary {where}: it is True for "
             f"{first(across)}",
             "a query may see a key only when both have the same segment id: "
             "segment_ids[..., :, None] == segment_ids[..., None, :]")
    future = wrong & mask & later
    if future.any():
        fail(f"the mask is not causal {where}: it is True for {first(future)}, a later key "
             "of the same sequence, so each token sees the bytes it is asked to predict",
             "and the segment mask with the lower triangle, np.tril(np.ones((T, T), bool)): "
             "key slot k <= query slot q")
    hidden = wrong & ~mask
    diagonal = hidden & np.broadcast_to(np.eye(length, dtype=bool), mask.shape)
    if diagonal.any():
        fail(f"a token cannot see itself {where}: the mask is False for {first(diagonal)}",
             "keep the diagonal: np.tril includes it (k <= q), np.tril(..., -1) does not")
    fail(f"the mask hides an earlier token of the same sequence {where}: it is False for "
         f"{first(hidden)}",
         "every key at or before the query, in the query's own non-padding segment, must be "
         "True")


def check_causal_segment_mask(causal_segment_mask: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise 8, part 2b: the causal attention mask inside segments."""
    cases = _id_cases()
    for segment_ids in cases:
        wanted = (*segment_ids.shape, segment_ids.shape[-1])
        mask = _answer(causal_segment_mask, "causal_segment_mask", segment_ids, wanted, "b",
                       "compare segment_ids[..., :, None] with segment_ids[..., None, :], which "
                       "broadcasts to (..., T, T) for any leading axes: one row of keys per "
                       "query")
        _mask_verdict(mask, segment_ids)
    shown = cases[0]
    mask = np.asarray(causal_segment_mask(shown.copy()))
    picture = "\n".join(f"  {int(query)} " + " ".join("#" if allowed else "." for allowed in row)
                        for query, row in zip(shown, mask, strict=True))
    passed(f"causal_segment_mask is right on {len(cases)} sets of segment ids. For ids "
           f"{shown.tolist()} (# = may attend, rows are queries, keys left to right):\n"
           f"{picture}")


def _loss_verdict(mask: np.ndarray, segment_ids: np.ndarray) -> None:
    expected = reference_loss_mask(segment_ids)
    if np.array_equal(mask, expected):
        return
    where = _where(segment_ids)
    current, following = segment_ids[..., :-1], segment_ids[..., 1:]
    wrong = mask != expected

    def first(selection):
        at = tuple(int(i) for i in np.argwhere(selection)[0])
        return (f"slot {at[-1]} (id {current[at]}) predicting slot {at[-1] + 1} "
                f"(id {following[at]})")

    boundary = wrong & mask & (current != following) & (current > 0) & (following > 0)
    if boundary.any():
        fail(f"the loss crosses a segment boundary {where}: it scores {first(boundary)}, so "
             "each sequence is trained to predict its neighbour's first token, which it "
             "cannot see and has nothing to do with it",
             "score slot t only when slot t + 1 has the same segment id: "
             "segment_ids[..., 1:] == segment_ids[..., :-1]")
    padding = wrong & mask
    if padding.any():
        fail(f"the loss scores padding {where}: {first(padding)}",
             "and the comparison with segment_ids[..., 1:] > 0, so that no padding target "
             "counts")
    fail(f"the loss leaves out {first(wrong)} {where}, two tokens of one sequence",
         "every pair of neighbours in the same non-padding segment counts")


def check_next_token_loss_mask(next_token_loss_mask: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise 8, part 2c: the next-token loss mask."""
    cases = _id_cases()
    for segment_ids in cases:
        wanted = (*segment_ids.shape[:-1], segment_ids.shape[-1] - 1)
        mask = _answer(next_token_loss_mask, "next_token_loss_mask", segment_ids, wanted, "b",
                       "one entry per prediction: slot t predicts slot t + 1 for t = 0 .. T-2, "
                       "so T - 1 entries (the last slot predicts nothing); segment_ids > 0 has "
                       "T, and also scores predictions across boundaries")
        _loss_verdict(mask, segment_ids)
    shown = cases[0]
    scored = np.asarray(next_token_loss_mask(shown.copy())).astype(int).tolist()
    passed(f"next_token_loss_mask is right on {len(cases)} sets of segment ids. For ids "
           f"{shown.tolist()}: {scored} (slot t predicts slot t + 1)")


def check_packed_like_alone(segment_positions: Callable[[np.ndarray], np.ndarray],
                            causal_segment_mask: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise 8, part 2d: with the learner's positions and mask, lesson 10's model computes
    each packed sequence exactly as it computes that sequence alone in a row."""
    from course_lib import sequence_model

    row_length = 16
    lengths = (6, 4, 5)
    rng = np.random.default_rng(RANDOM_SEED)
    sequences = [rng.integers(1, 256, size=length).astype(np.int32) for length in lengths]
    tokens = np.zeros((1, row_length), np.int32)
    segment_ids = np.zeros((1, row_length), np.int32)
    start = 0
    for number, sequence in enumerate(sequences, start=1):
        tokens[0, start:start + len(sequence)] = sequence
        segment_ids[0, start:start + len(sequence)] = number
        start += len(sequence)
    model = sequence_model.create_model(row_length, seed=0)
    with learner_code("segment_positions and causal_segment_mask on a packed row"):
        positions = np.asarray(segment_positions(segment_ids.copy()))
        mask = np.asarray(causal_segment_mask(segment_ids.copy()))[:, None]  # a heads axis
    packed = np.asarray(model(tokens, segment_ids, positions, mask=mask))[0]
    start = 0
    for sequence in sequences:
        alone_ids = np.zeros((1, row_length), np.int32)
        alone_ids[0, :len(sequence)] = 1
        alone_tokens = np.where(alone_ids > 0, np.resize(sequence, row_length), 0)
        alone_positions = reference_positions(alone_ids)
        alone = np.asarray(model(alone_tokens, alone_ids, alone_positions))[0, :len(sequence)]
        difference = float(np.abs(packed[start:start + len(sequence)] - alone).max())
        expect(difference <= 1e-5,
               f"packed with your positions and mask, the sequence in slots {start} to "
               f"{start + len(sequence) - 1} gives outputs up to {difference:.3g} away from "
               "the same sequence alone in a row",
               "run check_segment_positions and check_causal_segment_mask first: a position "
               "that does not restart or a mask that lets a token see another sequence or "
               "its own future changes the outputs")
        start += len(sequence)
    passed(f"with your positions and mask, each of the {len(sequences)} packed sequences gets "
           "the outputs it gets alone in a row (every difference below 1e-05): packing "
           "changes nothing the model computes")
