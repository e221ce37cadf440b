"""Exercise 8, pack sequences and mask attention: first fit as the loader packs, then what a
model needs from segment ids (positions, the causal mask inside segments, the next-token loss
mask).

Part 1 is the loader's packing rule. `PackAndBatchOperation` (course_lib/packing.py) and
Grain's `FirstFitPackIterDataset` keep one batch open: `batch_size` rows of `row_length`
slots. Each sequence, in stream order, goes into the first row of the open batch with room
for it; a sequence that fits in none closes the batch, which is handed out whole, and opens
the next batch in its row 0. So the packer holds one batch, whatever the stream's length,
and the position to resume from after a batch is the first sequence of the open batch, the
one that closed it: read already, but in no batch handed out.

`check_pack_first_fit(pack_first_fit)` calls the learner's generator
`pack_first_fit(stream, row_length, batch_size)` on every small case (all streams of up to
five lengths from 1 to 4, rows of 4 and 5 slots, 1 to 3 rows a batch) and on random
long-tailed ones, feeding the `(index, length)` pairs one at a time, and compares each batch
and each resume position with what course_lib's `PackAndBatchOperation` does with sequences
of those lengths. It names the first broken promise:

1. **Pairs `(rows, resume_from)`, each `rows` a list of `batch_size` rows of indices.** A
   batch has a fixed shape; a row left empty is `[]` (course_lib keeps the last batch's empty
   rows, as zeros; Grain's `FirstFitPackIterDataset` drops them).
2. **No row over `row_length`, every sequence exactly once.** The open batch at the end of
   the stream is handed out too.
3. **The loader's rows.** At the first sequence placed differently, the check shows the open
   batch and says what the loader does there: the first row with room, or, when none has
   room, the batch handed out and a new one opened.
4. **A stream.** When a batch is handed out, the packer has read no further than the
   sequence that closed it (where the loader resumes): it yields batches as it goes and keeps
   one batch in memory. This is judged before the positions, so that a packer that read the
   whole stream first is told so, not only that its positions are wrong.
5. **The loader's resume position** (not one past the sequence that closed the batch, which
   would skip it, nor the start of the batch handed out, which would repeat it), and the
   batches that follow when the packer is started again from it.

Part 2 is three functions of `segment_ids` (shape `(..., T)`, any leading axes), each called
on the ids a packer produces (a hand-made row, rows that one sequence fills exactly, rows of
one-token sequences, batches whose rows hold the same ids, a last batch with empty rows, ids
with two leading axes) and compared with the rule. Each check names the near miss it sees,
and an answer right on rows and batches but wrong with two leading axes is told that it
works along a fixed axis instead of the last:

- `check_segment_positions`: positions restart at 0 with each sequence and are 0 on padding.
  Near misses: the slot in the row (not reset), counting from 1, padding with a position, and
  positions that run on from one row into the next (computed over the flattened batch).
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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from course_lib.checks._verdict import expect, fail, learner_code, passed

__all__ = ["check_causal_segment_mask", "check_next_token_loss_mask", "check_pack_first_fit",
           "check_packed_like_alone", "check_segment_positions", "loader_batches"]

SMALL_ROWS, SMALL_MAX_LENGTH, SMALL_MAX_COUNT, SMALL_BATCH_SIZES = (4, 5), 4, 5, (1, 2, 3)
RANDOM_CASES, RANDOM_SEED = 40, 8
EXAMPLE = ([5, 5, 5, 3], 8, 2)  # lengths, row_length, batch_size: the rule in four sequences

Batch = tuple[list[list[int]], int]  # (rows of sequence indices, position to resume from)


def loader_batches(lengths: Sequence[int], row_length: int, batch_size: int,
                   start: int = 0) -> list[Batch]:
    """What course_lib's `PackAndBatchOperation` does with sequences of these lengths, read
    from position `start` on: each batch's rows (the stream index of each sequence in them)
    and the position it reports to resume from."""
    from course_lib.packing import PackAndBatchOperation

    packer = PackAndBatchOperation(row_length, batch_size).start()
    positions = list(range(start, start + len(lengths)))
    # Sequence i is filled with i + 1, so that each row says which sequences it holds.
    records = [np.full(length, position + 1, np.int64)
               for position, length in zip(positions, lengths, strict=True)]
    finished = packer.extend(positions, records) + packer.flush(start + len(lengths))
    return [([_sequences_in(row) for row in data], resume_from)
            for (data, _, _), resume_from in finished]


def _sequences_in(row: np.ndarray) -> list[int]:
    values = row[row > 0]
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]]) if values.size else []
    return [int(values[start]) - 1 for start in starts]


@dataclass
class _Stream:
    """The `(index, length)` pairs a check feeds the learner, counting how many were taken."""

    lengths: Sequence[int]
    start: int = 0
    taken: int = 0

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for offset, length in enumerate(self.lengths):
            self.taken = offset + 1
            yield self.start + offset, int(length)


def _small_cases():
    for row_length in SMALL_ROWS:
        for batch_size in SMALL_BATCH_SIZES:
            for count in range(1, SMALL_MAX_COUNT + 1):
                for lengths in itertools.product(range(1, SMALL_MAX_LENGTH + 1), repeat=count):
                    yield list(lengths), row_length, batch_size


def _random_cases():
    rng = np.random.default_rng(RANDOM_SEED)
    for _ in range(RANDOM_CASES):
        row_length = int(rng.integers(16, 129))
        lengths = np.minimum(rng.lognormal(2.5, 0.9, size=int(rng.integers(5, 60))), row_length)
        yield [max(1, int(length)) for length in lengths], row_length, int(rng.integers(1, 9))


def _call(pack_first_fit, lengths, row_length, batch_size, start=0):
    """The learner's batches, each with how many pairs the packer had taken when it came."""
    stream = _Stream(lengths, start)
    call = (f"pack_first_fit(stream of lengths {list(lengths)}"
            + (f" from index {start}" if start else "")
            + f", row_length={row_length}, batch_size={batch_size})")
    batches, taken, as_yielded = [], [], []
    with learner_code(call):
        try:
            for item in pack_first_fit(iter(stream), row_length, batch_size):
                batches.append(item)
                taken.append(stream.taken)
                as_yielded.append(repr(item))
        except TypeError as error:
            if "len()" not in str(error) and "subscriptable" not in str(error):
                raise
            fail(f"{call} raised TypeError: {error}: the stream is an iterator, with no "
                 "length and no indexing, as a loader's stream is (it can be endless)",
                 "take the (index, length) pairs one at a time: for index, length in stream")
    for number, (item, shown) in enumerate(zip(batches, as_yielded, strict=True)):
        expect(repr(item) == shown,
               f"batch {number} of {call} was {shown:.80} when it was yielded and is "
               f"{item!r:.80} now: the packer went on changing its lists after handing them "
               "out, so whoever keeps a batch sees it change",
               "start each new batch with new lists (rows = [[] for _ in range(batch_size)]) "
               "instead of emptying the ones handed out")
    return call, batches, taken


def _rows(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


def _read_batches(batches, call: str, count: int, start: int,
                  batch_size: int) -> list[Batch]:
    checked = []
    for number, item in enumerate(batches):
        expect(isinstance(item, tuple | list) and len(item) == 2,
               f"{call} yielded {item!r:.60} as batch {number}, not a pair (rows, resume_from)",
               "yield each batch as a pair: the list of its rows, and the index to resume "
               "from after it")
        rows, resume_from = item
        expect(isinstance(rows, list | tuple)
               and all(isinstance(row, list | tuple) for row in rows),
               f"batch {number} of {call} is {rows!r:.60}, not a list of rows",
               "make each batch a list of batch_size rows, each the list of the indices of "
               "its sequences, e.g. [[0, 2], [1]]")
        expect(isinstance(resume_from, int | np.integer) and not isinstance(resume_from, bool),
               f"batch {number} of {call} comes with resume_from={resume_from!r:.40}, not an "
               "index", "yield (rows, the index of the first sequence not handed out yet)")
        for row in rows:
            for index in row:
                expect(isinstance(index, int | np.integer) and not isinstance(index, bool)
                       and start <= index < start + count,
                       f"batch {number} of {call} holds {index!r:.40}, not the index of a "
                       f"sequence of the stream ({start} to {start + count - 1})",
                       "put the index of each (index, length) pair in the rows, not its "
                       "length")
        checked.append(([[int(index) for index in row] for row in rows], int(resume_from)))
    for number, (rows, _) in enumerate(checked):
        if len(rows) > batch_size:
            fail(f"batch {number} of {call} has {_rows(len(rows))}, for batch_size="
                 f"{batch_size}: rows are opened as long as sequences come, so the packer "
                 "holds every row of the stream until it ends",
                 "keep exactly batch_size rows open, the open batch; when a sequence fits in "
                 "none of them, yield that batch and start a new one with the sequence")
        if len(rows) < batch_size:
            fail(f"batch {number} of {call} has {_rows(len(rows))}, for batch_size="
                 f"{batch_size}: every batch of the loader has batch_size rows, so that every "
                 "step sees one shape (course_lib's last batch keeps its empty rows as zeros; "
                 "Grain's FirstFitPackIterDataset drops them)",
                 "yield all batch_size rows of the batch, an empty one as []")
    return checked


def _check_rows(batches: list[Batch], lengths, row_length, start: int, call: str,
                expected: list[Batch]) -> None:
    for number, (rows, _) in enumerate(batches):
        for row_number, row in enumerate(rows):
            used = sum(lengths[index - start] for index in row)
            expect(used <= row_length,
                   f"{call} put sequences {row} (lengths "
                   f"{[lengths[index - start] for index in row]}, {used} tokens) in row "
                   f"{row_number} of batch {number}, which holds only {row_length}",
                   "put a sequence into a row only when the tokens already there plus its "
                   "length are at most row_length")
    counts = Counter(index for rows, _ in batches for row in rows for index in row)
    missing = [index for index in range(start, start + len(lengths)) if index not in counts]
    if missing:
        last = {index for row in expected[-1][0] for index in row}
        handed_out_the_others = len(batches) == len(expected) - 1 and (
            not batches or batches[-1][1] == expected[-2][1])
        if set(missing) == last and handed_out_the_others:
            fail(f"{call} left out sequences {missing[:8]}, the ones in the batch still open "
                 "when the stream ended: that batch was never handed out",
                 "after the loop over the stream, yield the open batch too, if any sequence "
                 "is in it")
        fail(f"{call} left out sequences {missing[:8]}: they are in no batch",
             "put every sequence in a row: when it fits in none of the open batch's rows, "
             "yield that batch and put the sequence into row 0 of a new one")
    repeated = sorted(index for index, times in counts.items() if times > 1)
    expect(not repeated,
           f"{call} put sequences {repeated[:8]} in more than one row (or twice in one)",
           "place each sequence once: stop looking for a row as soon as one has room")
    expect(all(any(rows) for rows, _ in batches), f"{call} yielded a batch with no sequence",
           "yield a batch only when it holds at least one sequence")


def _placements(batches: list[Batch]) -> dict[int, tuple[int, int]]:
    return {index: (number, row_number) for number, (rows, _) in enumerate(batches)
            for row_number, row in enumerate(rows) for index in row}


def _show_batch(rows: list[list[int]], lengths, start: int, row_length: int) -> str:
    used = [sum(lengths[index - start] for index in row) for row in rows]
    return (f"{rows} (tokens used: {', '.join(f'{tokens} of {row_length}' for tokens in used)})")


def _check_loader_rows(batches: list[Batch], expected: list[Batch], lengths, row_length: int,
                       start: int, call: str) -> None:
    theirs, loaders = _placements(batches), _placements(expected)
    differ = [index for index in sorted(loaders) if theirs[index] != loaders[index]]
    if not differ:
        expect([rows for rows, _ in batches] == [rows for rows, _ in expected],
               f"{call} yielded {[rows for rows, _ in batches]}: the right rows, but the "
               f"sequences of a row in another order than the loader's "
               f"{[rows for rows, _ in expected]}",
               "append each sequence at the end of its row, in stream order")
        return
    first = differ[0]
    length = lengths[first - start]
    batch, row = loaders[first]
    their_batch, their_row = theirs[first]
    placed = (f"{call} put sequence {first} (length {length}) in batch {their_batch}, row "
              f"{their_row}")
    earlier = [[index for index in each if index < first] for each in expected[batch][0]]
    opens_a_batch = not any(earlier)
    if opens_a_batch and their_batch < batch:
        shown = _show_batch(expected[batch - 1][0], lengths, start, row_length)
        fail(f"{placed}, but it fits in no row of the open batch {shown}: there the loader "
             f"hands that batch out and starts batch {batch} with sequence {first} in row 0",
             "when a sequence fits in none of the open batch's rows, yield that batch whole "
             "and open a new one of batch_size empty rows, the sequence in row 0")
    if not opens_a_batch and their_batch != batch:
        shown = _show_batch(earlier, lengths, start, row_length)
        fail(f"{placed}, but it fits in row {row} of the open batch {shown}: the loader puts "
             "it there, and hands a batch out only when a sequence fits in none of its rows",
             "keep the batch open while any of its rows has room for the next sequence, "
             "however full the others are")
    if opens_a_batch:
        fail(f"{placed}; it opens the loader's batch {batch}, where it is in row 0: the loader "
             "hands out the open batch itself, its rows in the order they were opened, and "
             "starts the next from batch_size empty rows",
             "when a sequence fits in none of the open batch's rows, yield that batch whole "
             "and open a new one of batch_size empty rows, the sequence in row 0")
    shown = _show_batch(earlier, lengths, start, row_length)
    fail(f"{placed} of the open batch {shown}; the first row with room for it is row {row}, "
         "where the loader puts it",
         "look at the rows from row 0 and put the sequence into the first one with room")


def _check_resume_positions(batches: list[Batch], expected: list[Batch], call: str) -> None:
    for number, ((rows, resume_from), (_, wanted)) in enumerate(
            zip(batches, expected, strict=True)):
        if resume_from == wanted:
            continue
        handed_out = list(itertools.chain(*rows))
        if resume_from == wanted + 1 and number < len(expected) - 1:
            fail(f"after batch {number}, {call} gives resume_from={resume_from}, but sequence "
                 f"{wanted}, the one that closed the batch, is in the open batch, not in a "
                 "batch handed out: a loader resumed there would skip it",
                 "give the index of the first sequence of the open batch: read already, but "
                 "not handed out, so a resumed loader reads it again")
        if handed_out and resume_from == min(handed_out):
            fail(f"after batch {number}, {call} gives resume_from={resume_from}, the first "
                 "sequence of the batch just handed out: a loader resumed there would hand "
                 "it out again", "give the index of the first sequence not handed out yet")
        fail(f"after batch {number}, {call} gives resume_from={resume_from}, where the loader "
             f"reports {wanted}: the first sequence in no batch handed out yet",
             "give the index of the first sequence of the open batch (after the last batch: "
             "one past the last index of the stream)")


def _check_streams(taken: list[int], expected: list[Batch], start: int, count: int,
                   call: str) -> None:
    """Judged against the loader's resume positions, not the learner's: a packer that read
    the whole stream and reports its end as every batch's position is still reading ahead."""
    for number, ((_, resume_from), pairs) in enumerate(zip(expected, taken, strict=True)):
        allowed = resume_from - start + 1
        expect(pairs <= allowed or number == len(expected) - 1,
               f"{call} had taken {pairs} of the {count} (index, length) pairs when it handed "
               f"out batch {number}, which sequence {resume_from} closed: it reads ahead "
               "(the whole stream, say) before it yields, so on an endless stream it would "
               "never yield, and it holds more than one batch",
               "yield each batch as soon as a sequence fits in none of its rows, inside the "
               "loop over the stream, and keep only the open batch")


def _check_resumed(pack_first_fit, batches: list[Batch], lengths, row_length: int,
                   batch_size: int) -> None:
    """Start the packer again from each batch's resume position: the same batches follow."""
    for number, (_, resume_from) in enumerate(batches[:-1]):
        call, resumed, _ = _call(pack_first_fit, lengths[resume_from:], row_length, batch_size,
                                 start=resume_from)
        resumed = _read_batches(resumed, call, len(lengths) - resume_from, resume_from,
                                batch_size)
        expect(resumed == batches[number + 1:],
               f"started again from resume_from={resume_from} after batch {number}, "
               f"{call} gives {resumed[:2]}, not the batches that followed, "
               f"{batches[number + 1:number + 3]}",
               "make the batches depend only on the pairs read, in order, from an empty "
               "open batch")


def check_pack_first_fit(pack_first_fit: Callable[[Iterable[tuple[int, int]], int, int],
                                                   Iterable[Batch]]) -> None:
    """Exercise 8, part 1: the loader's first fit, batch by batch, against the loader."""
    # Rows and streaming are judged on every case before any resume position, so that a
    # packer that holds every row or reads the whole stream first is told that, rather than
    # only that the positions it reports are wrong.
    packed = []
    for lengths, row_length, batch_size in itertools.chain(_small_cases(), _random_cases()):
        expected = loader_batches(lengths, row_length, batch_size)
        call, batches, taken = _call(pack_first_fit, lengths, row_length, batch_size)
        batches = _read_batches(batches, call, len(lengths), 0, batch_size)
        _check_rows(batches, lengths, row_length, 0, call, expected)
        _check_loader_rows(batches, expected, lengths, row_length, 0, call)
        _check_streams(taken, expected, 0, len(lengths), call)
        packed.append((lengths, row_length, batch_size, call, batches, expected))
    for lengths, row_length, batch_size, call, batches, expected in packed:
        _check_resume_positions(batches, expected, call)
        if len(lengths) > SMALL_MAX_COUNT:
            _check_resumed(pack_first_fit, batches, lengths, row_length, batch_size)
    count = len(packed)
    lengths, row_length, batch_size = EXAMPLE
    _, example, _ = _call(pack_first_fit, lengths, row_length, batch_size)
    shown = ", then ".join(f"{rows} (resume from {resume_from})" for rows, resume_from in example)
    passed(f"pack_first_fit packs as the loader does in all {count} cases (every small one and "
           "random long-tailed ones), yields each batch as soon as a sequence fits in none of "
           "its rows, and resumes exactly from the position it gives. For lengths "
           f"{lengths} in rows of {row_length}, {batch_size} rows a batch: {shown}")


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


# Rows of 6, 3 a batch: rows one sequence fills exactly, batches whose rows hold the same
# ids, rows two or more sequences fill exactly, one-token sequences, and a last batch with an
# empty row, as PackAndBatchOperation packs these lengths.
EVERY_KIND_OF_ROW = ([6, 6, 6] + [3] * 6 + [4, 2, 5, 1, 6] + [1] * 6 + [2], 6, 3)


def _packed_segment_ids(lengths: Sequence[int], row_length: int,
                        batch_size: int) -> list[np.ndarray]:
    """The segment ids of every batch course_lib's packer makes of these lengths."""
    from course_lib.packing import PackAndBatchOperation

    packer = PackAndBatchOperation(row_length, batch_size).start()
    sequences = [np.ones(length, np.int32) for length in lengths]
    finished = (packer.extend(range(len(sequences)), sequences)
                + packer.flush(len(sequences)))
    return [segmentations for (_, segmentations, _), _ in finished]


def _id_cases() -> list[np.ndarray]:
    rng = np.random.default_rng(RANDOM_SEED)
    every_kind = _packed_segment_ids(*EVERY_KIND_OF_ROW)
    random = _packed_segment_ids([int(n) for n in rng.integers(1, 9, size=30)], 12, 3)
    return [np.array([1, 1, 2, 2, 2, 0], np.int32),
            np.array([[1, 2, 3, 0], [0, 0, 0, 0]], np.int32),
            *every_kind,
            *random[:3],
            np.stack(every_kind[:2]),  # two leading axes
            np.stack(random[:2])]


def _where(segment_ids: np.ndarray) -> str:
    if segment_ids.ndim == 1:
        return f"for segment ids {segment_ids.tolist()}"
    if segment_ids.ndim == 2 and segment_ids.size <= 24:
        return f"for the batch of segment ids {segment_ids.tolist()}"
    return f"for ids of shape {segment_ids.shape}"


def _expect_leading_axes_kept(segment_ids: np.ndarray, name: str) -> None:
    """The cases come one row first, then batches of rows, then ids with two leading axes,
    each a stack of batches already checked: an answer wrong only there works along a fixed
    axis instead of the last one."""
    expect(segment_ids.ndim <= 2,
           f"{name} is right on one row and on a batch of rows, but not on ids of shape "
           f"{segment_ids.shape}, a stack of batches it got right: it works along a fixed axis "
           "(axis 1, say) instead of the last axis",
           "index from the end, so that any leading axes work: segment_ids[..., 1:] and "
           "segment_ids[..., :-1], axis=-1")


def _flattened_positions(segment_ids: np.ndarray) -> np.ndarray:
    """Positions computed over the whole batch as one long row: they run on across rows."""
    return reference_positions(segment_ids.reshape(-1)).reshape(segment_ids.shape)


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
           "return a boolean array, True or False per entry, not 0 and 1" if dtype_kind == "b"
           else "return integer positions, not floats")
    return answer


def _positions_verdict(positions: np.ndarray, segment_ids: np.ndarray) -> None:
    expected = reference_positions(segment_ids)
    if np.array_equal(positions, expected):
        return
    _expect_leading_axes_kept(segment_ids, "segment_positions")
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
             "give padding (id 0) position 0, as PackAndBatchOperation does")
    if segment_ids.ndim > 1 and np.array_equal(positions, _flattened_positions(segment_ids)):
        at = tuple(int(i) for i in np.argwhere(positions != expected)[0])
        fail(f"the positions run on from one row into the next {where}: slot {list(at)} has "
             f"position {positions[at]}, where its sequence, the first of its row, is at "
             f"{expected[at]}. A row that one sequence fills ends with the same id (1) that "
             "starts the next row, so the batch read as one long row shows no change there",
             "compute along the last axis only: every row starts a new sequence at slot 0, "
             "whatever the row before it ends with")
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
    _expect_leading_axes_kept(segment_ids, "causal_segment_mask")
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
             "id 0 is padding: a padding query attends to nothing, and no query attends to "
             "a padding key")
    across = wrong & mask & (query_ids != key_ids)
    if across.any():
        fail(f"the mask lets a token attend across a segment boundary {where}: it is True for "
             f"{first(across)}",
             "a query may see a key only when both have the same segment id")
    future = wrong & mask & later
    if future.any():
        fail(f"the mask is not causal {where}: it is True for {first(future)}, a later key "
             "of the same sequence, so each token sees the bytes it is asked to predict",
             "a query at slot q may see a key at slot k only when k <= q, on top of the "
             "same segment")
    hidden = wrong & ~mask
    diagonal = hidden & np.broadcast_to(np.eye(length, dtype=bool), mask.shape)
    if diagonal.any():
        fail(f"a token cannot see itself {where}: the mask is False for {first(diagonal)}",
             "a token sees itself: k <= q includes k == q")
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
                       "return, for every row of ids, one row of T keys for each of its T "
                       "queries: shape (..., T, T), whatever the leading axes")
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
    _expect_leading_axes_kept(segment_ids, "next_token_loss_mask")
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
             "score slot t only when slot t + 1 holds the same segment id")
    padding = wrong & mask
    if padding.any():
        fail(f"the loss scores padding {where}: {first(padding)}",
             "a pair with padding (id 0) in either slot is never scored")
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
