"""Grain's packing `IterDataset`s: `FirstFitPackIterDataset` and `BestFitPackIterDataset`.

The packing itself is `packing.py`'s, the `DataLoader`'s `PackAndBatchOperation`: a group
of `num_packing_bins` rows is open, each sequence in stream order goes into a row with room
for it (the first such row, or the fullest: best fit), and the first sequence that fits in
none closes the group. What differs is the shape of the output, which follows Grain's: one
row per element, not a batch, with the segment ids and positions beside each feature,

    {"tokens": [a a a b b 0], "tokens_segment_ids": [1 1 1 2 2 0],
     "tokens_positions": [0 1 2 0 1 0]}

(batch the rows afterwards with `.batch(...)`). Rows that hold no sequence are left out, and
with `shuffle_bins=True` (Grain's default) the rows of a group come out in a seeded order.

Packing runs in the main process, on the stream its parent gives, so its rows do not
depend on the number of worker processes under it: the promise Grain's `mp_prefetch` does
not make for packing. The state is the parent's state before the group being handed out,
how many of its rows were handed out, and how many groups came before: a restored iterator
packs that group again, the same way, and skips the rows already handed out.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from course_lib._checks import check_bool, check_int
from course_lib.dataset_iterator import DatasetIterator, check_state
from course_lib.iter_dataset import IterDataset
from course_lib.packing import BestFitPacker, FirstFitPacker, PackAndBatchOperation


def _rows_of(group, length_struct) -> list:
    """The non-empty rows of a packed group, as Grain names their parts."""
    data, segment_ids, positions = group
    first = segment_ids if not isinstance(segment_ids, dict) else next(iter(
        segment_ids.values()))
    filled = int(np.count_nonzero(np.asarray(first).any(axis=1)))
    rows = []
    for row in range(filled):
        if isinstance(length_struct, dict):
            element = {}
            for key in length_struct:
                element[key] = data[key][row]
                element[f"{key}_segment_ids"] = segment_ids[key][row]
                element[f"{key}_positions"] = positions[key][row]
        else:
            element = (data[row], segment_ids[row], positions[row])
        rows.append(element)
    return rows


class _PackIterator(DatasetIterator):
    def __init__(self, parent: DatasetIterator, operation: PackAndBatchOperation,
                 packer_type: type[FirstFitPacker], seed: int, shuffle_bins: bool):
        super().__init__(parent)
        self._operation, self._packer_type = operation, packer_type
        self._seed, self._shuffle = seed, shuffle_bins
        self._restart(parent.get_state(), groups=0, rows_taken=0)

    def _restart(self, parent_state, groups: int, rows_taken: int) -> None:
        self._packer = self._packer_type(self._operation)
        self._open_state = parent_state  # the parent before the open group's first record
        self._group_state = parent_state  # ... before the group being handed out
        self._groups, self._rows_taken = groups, rows_taken
        self._rows: list = []
        self._handing_out = False  # a group is being handed out (its rows may be used up)
        self._exhausted = False
        self._records = 0

    def _hand_out(self, group) -> None:
        rows = _rows_of(group, self._operation.length_struct)
        if self._shuffle:
            order = np.random.default_rng([self._seed, self._groups]).permutation(len(rows))
            rows = [rows[i] for i in order]
        self._rows = rows[self._rows_taken:]  # after a restore: skip those handed out

    def __next__(self):
        while not self._rows:
            if self._handing_out:  # the group handed out has no rows left: the next one
                self._handing_out = False
                self._groups, self._rows_taken = self._groups + 1, 0
                self._group_state = self._open_state
            self._pack_one_group()
            self._handing_out = True
        self._rows_taken += 1
        return self._rows.pop(0)

    def _pack_one_group(self) -> None:
        while True:
            if self._exhausted:
                raise StopIteration
            before = self._parent.get_state()
            try:
                record = next(self._parent)
            except StopIteration:
                self._exhausted = True
                finished = self._packer.flush(self._records)
                if finished:
                    self._group_state = self._open_state
                    self._hand_out(finished[0][0])
                    return
                raise
            length_struct = self._operation.length_struct
            if isinstance(length_struct, dict) and isinstance(record, dict):
                record = {key: record[key] for key in length_struct if key in record}
            finished = self._packer.extend([self._records], [record])
            self._records += 1
            if finished:  # `record` fit nowhere: it opened the next group
                self._group_state, self._open_state = self._open_state, before
                self._hand_out(finished[0][0])
                return

    def get_state(self) -> dict[str, Any]:
        return {"parent": self._group_state, "rows_taken": self._rows_taken,
                "groups": self._groups}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, ["parent", "rows_taken", "groups"], "a packing step")
        self._parent.set_state(state["parent"])
        self._restart(state["parent"], state["groups"], state["rows_taken"])


class _PackIterDataset(IterDataset):
    _packer_type: type[FirstFitPacker] = FirstFitPacker

    def __init__(self, parent: IterDataset, *, length_struct: Any, num_packing_bins: int,
                 seed: int = 0, shuffle_bins: bool = True,
                 shuffle_bins_group_by_feature: str | None = None,
                 meta_features=(), pack_alignment_struct: Any = None,
                 padding_struct: Any = None, max_sequences_per_bin: int | None = None):
        super().__init__(parent)
        unsupported = {"shuffle_bins_group_by_feature": shuffle_bins_group_by_feature,
                       "meta_features": tuple(meta_features) or None,
                       "pack_alignment_struct": pack_alignment_struct,
                       "padding_struct": padding_struct}
        given = [name for name, value in unsupported.items() if value is not None]
        if given:
            raise ValueError(
                f"{', '.join(given)} are Grain options that course_lib's packing does not "
                "have: it packs every feature of length_struct with zero padding and no "
                "alignment. Leave them out, or pack on Grain itself.")
        num_packing_bins = check_int("num_packing_bins", num_packing_bins, minimum=1,
                                     fix="Pass how many rows a group packs, e.g. 8.")
        self._operation = PackAndBatchOperation(length_struct, num_packing_bins,
                                                max_sequences_per_bin)
        self._seed = check_int("seed", seed, minimum=0, fix="Pass a seed such as 0.")
        self._shuffle = check_bool("shuffle_bins", shuffle_bins)

    def __iter__(self) -> DatasetIterator:
        return self._iterator(None)

    def _iterator(self, workers):
        return _PackIterator(self._parent._iterator(workers), self._operation,
                             self._packer_type, self._seed, self._shuffle)


class FirstFitPackIterDataset(_PackIterDataset):
    """Packs each sequence into the first of `num_packing_bins` rows with room for it."""


class BestFitPackIterDataset(_PackIterDataset):
    """Packs each sequence into the fullest of `num_packing_bins` rows with room for it."""

    _packer_type = BestFitPacker
