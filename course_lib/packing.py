"""Packing: several variable-length sequences per row, so that every batch has one shape.

A jitted step compiles once per input shape. Padding every sequence to one length keeps the
shape fixed but fills most of the batch with zeros when lengths vary; packing puts several
sequences end to end in one row of length `T`, and says with two integer arrays which
sequence each slot belongs to:

    data          [a a a b b c c c c 0]
    segmentations [1 1 1 2 2 3 3 3 3 0]    # 1, 2, 3, ... per row; 0 only on padding
    positions     [0 1 2 0 1 0 1 2 3 0]    # the position inside its own sequence

From `segmentations` the model builds its attention mask (a token attends only to earlier
tokens of its own segment) and its next-token loss mask (a token is scored only where the
next slot holds the next token of the same segment, never across a boundary or on padding),
so that packed sequences never see each other; `positions` restart at 0 in each segment.

The algorithm is Grain's online first fit: a batch of `batch_size` empty rows is open; each
sequence, in stream order, goes into the first row with room for it; the first sequence that
fits in no row closes the batch, which is handed out, and opens the next one.

Resuming exactly needs the rows still being filled. They are not written into the state:
they hold exactly the records from the first record of the open batch on, and the packer is
a pure function of the records it is given. So the position this packer reports after each
batch is that first record's position, and a loader resumed from it reads those records
again and rebuilds the same rows. The state stays one number, and it restores under any
worker count, because packing always runs in the main process, in stream order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from course_lib._checks import check_bool, check_int, check_optional_int


def _flatten(tree, where: str = "") -> list[tuple[str, Any]]:
    """The leaves of a tree of dicts, tuples and lists, with where each one is."""
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in _flatten(tree[key], f"{where}[{key!r}]")]
    if isinstance(tree, tuple | list):
        return [leaf for i, item in enumerate(tree) for leaf in _flatten(item, f"{where}[{i}]")]
    return [(where, tree)]


def _unflatten(structure, leaves: list):
    """Rebuild `structure` (a tree like `length_struct`) with `leaves` in flatten order."""
    leaves = iter(leaves)

    def build(tree):
        if isinstance(tree, dict):
            built = {key: build(tree[key]) for key in sorted(tree)}
            return {key: built[key] for key in tree}
        if isinstance(tree, tuple | list):
            return type(tree)(build(item) for item in tree)
        return next(leaves)

    return build(structure)


def _same_structure(tree, structure) -> bool:
    if isinstance(structure, dict):
        return isinstance(tree, dict) and set(tree) == set(structure) and all(
            _same_structure(tree[key], structure[key]) for key in structure)
    if isinstance(structure, tuple | list):
        return isinstance(tree, tuple | list) and len(tree) == len(structure) and all(
            _same_structure(a, b) for a, b in zip(tree, structure, strict=True))
    return not isinstance(tree, dict | tuple | list)


class PackAndBatchOperation:
    """Pack variable-length sequences into `batch_size` rows per batch, first fit.

    Place it last in `operations`, instead of `Batch`. Each batch is a tuple
    `(data, segmentations, positions)` of trees shaped like `length_struct`: `data` leaves
    have shape `(batch_size, T, ...)` and the records' dtype, zeros on padding;
    `segmentations` and `positions` leaves are int32 of shape `(batch_size, T)`.

    Args:
      length_struct: the row length `T` of each feature, in the records' structure: an int
        for records that are arrays, `{"tokens": 128}` for dict records.
      batch_size: rows per batch.
      max_sequences_per_bin: at most this many sequences in one row (None: no limit).
      truncate: keyword only, not in Grain. A sequence longer than its row is an error by
        default; `truncate=True` keeps its first `T` tokens instead.
    """

    def __init__(self, length_struct: Any, batch_size: int,
                 max_sequences_per_bin: int | None = None, *, truncate: bool = False):
        self.batch_size = check_int(
            "batch_size", batch_size, minimum=1,
            fix="Pass how many rows each batch has, e.g. PackAndBatchOperation(128, 8).")
        self.max_sequences_per_bin = check_optional_int(
            "max_sequences_per_bin", max_sequences_per_bin, minimum=1,
            fix="Pass None for no limit, or at least 1 sequence per row.")
        self.truncate = check_bool("truncate", truncate)
        leaves = _flatten(length_struct)
        for where, length in leaves:
            check_int(f"length_struct{where}", length, minimum=1,
                      fix="Give each packed feature its row length, a positive int, e.g. "
                          "length_struct={'tokens': 128}.")
        self.length_struct = length_struct
        self._where = [where for where, _ in leaves]
        self._row_lengths = [int(length) for _, length in leaves]
        self._count = np.arange(max(self._row_lengths), dtype=np.int32)  # positions, sliced

    def start(self) -> FirstFitPacker:
        """The per-iterator packer, with its open batch (see the module docstring)."""
        return FirstFitPacker(self)

    def __repr__(self) -> str:
        return (f"PackAndBatchOperation(length_struct={self.length_struct!r}, "
                f"batch_size={self.batch_size}, "
                f"max_sequences_per_bin={self.max_sequences_per_bin})")


class _OpenBatch:
    """The rows being filled: their buffers, how full each row is, how many sequences."""

    def __init__(self, operation: PackAndBatchOperation, leaves: list[np.ndarray],
                 first_position: int):
        rows = operation.batch_size
        self.first_position = first_position
        self.data = [np.zeros((rows, length, *leaf.shape[1:]), leaf.dtype)
                     for leaf, length in zip(leaves, operation._row_lengths, strict=True)]
        self.segmentations = [np.zeros((rows, length), np.int32)
                              for length in operation._row_lengths]
        self.positions = [np.zeros((rows, length), np.int32) for length in operation._row_lengths]
        self.fill = [[0] * rows for _ in operation._row_lengths]
        self.sequences = [0] * rows
        self.count = operation._count

    def first_fit(self, lengths: list[int], row_lengths: list[int],
                  max_sequences: int | None) -> int:
        """The first row with room for every feature of the sequence, or -1."""
        if len(lengths) == 1:  # the usual case, one packed feature: a plain loop
            room, length, fill = row_lengths[0], lengths[0], self.fill[0]
            for row, used in enumerate(fill):
                if used + length <= room and (max_sequences is None
                                              or self.sequences[row] < max_sequences):
                    return row
            return -1
        for row, count in enumerate(self.sequences):
            if max_sequences is not None and count >= max_sequences:
                continue
            if all(fill[row] + length <= room for fill, length, room
                   in zip(self.fill, lengths, row_lengths, strict=True)):
                return row
        return -1

    def best_fit(self, lengths: list[int], row_lengths: list[int],
                 max_sequences: int | None) -> int:
        """The fullest row that still has room for every feature of the sequence, or -1:
        Grain's best fit, which keeps the emptier rows for longer sequences."""
        best, best_used = -1, -1
        for row, count in enumerate(self.sequences):
            if max_sequences is not None and count >= max_sequences:
                continue
            if all(fill[row] + length <= room for fill, length, room
                   in zip(self.fill, lengths, row_lengths, strict=True)):
                used = sum(fill[row] for fill in self.fill)
                if used > best_used:
                    best, best_used = row, used
        return best

    def add(self, leaves: list[np.ndarray], row: int) -> None:
        self.sequences[row] += 1
        segment = self.sequences[row]
        for feature, leaf in enumerate(leaves):
            start = self.fill[feature][row]
            stop = start + len(leaf)
            self.data[feature][row, start:stop] = leaf
            self.segmentations[feature][row, start:stop] = segment
            self.positions[feature][row, start:stop] = self.count[:stop - start]
            self.fill[feature][row] = stop

    def finish(self, structure):
        return (_unflatten(structure, self.data), _unflatten(structure, self.segmentations),
                _unflatten(structure, self.positions))


class FirstFitPacker:
    """One iterator's packer: takes records in stream order, hands out full batches.

    Same interface as `pipeline.Batcher`: `extend(positions, records)` returns the batches
    that the records completed, each with the stream position to resume from, and
    `flush(next_index)` the last, partly filled batch at the end of the stream (a list of
    one, or empty).
    """

    fit = "first_fit"  # the _OpenBatch method that picks a row (BestFitPacker: best_fit)

    def __init__(self, operation: PackAndBatchOperation):
        self._operation = operation
        self._open: _OpenBatch | None = None

    def _leaves(self, record, position: int) -> list[np.ndarray]:
        operation = self._operation
        structure = operation.length_struct
        if not _same_structure(record, structure):
            raise ValueError(
                f"the record at index {position} is a {type(record).__name__}, which does not "
                f"have the structure of length_struct={structure!r}. Give length_struct the "
                "records' structure, with a row length for each sequence, e.g. 128 for "
                "records that are arrays, {'tokens': 128} for {'tokens': array} records.")
        leaves = [np.asarray(leaf) for _, leaf in _flatten(record)]
        for feature, leaf in enumerate(leaves):
            room = operation._row_lengths[feature]
            if leaf.ndim == 0:
                raise ValueError(
                    f"the record at index {position} has a scalar at "
                    f"{operation._where[feature] or 'its top level'}, but packing needs "
                    "sequences: arrays of shape (length, ...).")
            if len(leaf) > room:
                if not operation.truncate:
                    raise ValueError(
                        f"the sequence at index {position} has length {len(leaf)} at "
                        f"length_struct{operation._where[feature]}, longer than its row of "
                        f"{room}: a sequence must fit in one row. Cut sequences before "
                        f"packing (split them into rows, or keep the first {room} tokens "
                        "with a map before the packer), raise the row length, or pass "
                        "truncate=True (PackAndBatchOperation only) to let the packer cut.")
                leaves[feature] = leaf[:room]
        return leaves

    def extend(self, positions: Sequence[int], records: Sequence[Any]) -> list[tuple[Any, int]]:
        operation, finished = self._operation, []
        row_lengths, most = operation._row_lengths, operation.max_sequences_per_bin
        for position, record in zip(positions, records, strict=True):
            leaves = self._leaves(record, position)
            lengths = [len(leaf) for leaf in leaves]
            if self._open is None:
                self._open = _OpenBatch(operation, leaves, position)
            row = getattr(self._open, self.fit)(lengths, row_lengths, most)
            if row < 0:  # fits nowhere: hand out the batch, resume from this record
                finished.append((self._open.finish(operation.length_struct), position))
                self._open = _OpenBatch(operation, leaves, position)
                row = 0
            self._open.add(leaves, row)
        return finished

    def flush(self, next_index: int) -> list[tuple[Any, int]]:
        """The partly filled batch at the end of a finite stream, if it holds anything."""
        if self._open is None:
            return []
        batch, self._open = self._open.finish(self._operation.length_struct), None
        return [(batch, next_index)]


class BestFitPacker(FirstFitPacker):
    """The packer of `experimental.BestFitPackIterDataset`: each sequence goes into the
    fullest row with room for it."""

    fit = "best_fit"
