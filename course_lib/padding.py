"""Fixed-shape batches without losing a record: pad the last batch and say which rows count.

A jitted step is compiled once per input shape, so a short final batch costs a second
compilation. For training, dropping that batch is fine (`Batch(..., drop_remainder=True)`):
the next epoch reshuffles and the records come back. For evaluation every record must be
counted exactly once, so instead the last batch is padded to full size and a boolean mask
marks the real rows: every batch has the same shape, and a metric weighted by the mask is
the metric of the unpadded data.

    operations = [..., grain.PadAndMask(batch_size=64)]   # in place of Batch(64)
    correct = (predictions == batch["label"]) & batch["mask"]

Grain's own answer is `experimental.batch_and_pad`, a `batch_fn` that pads the last batch
with `pad_value` and adds no mask: the step must then tell padding from data itself (a label
of -1, say). It is here too, with Grain's arguments:

    ds.batch(64, batch_fn=functools.partial(grain.experimental.batch_and_pad, batch_size=64))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from course_lib._checks import check_int
from course_lib.transforms import Batch, stack_records


def _padding_like(record: Any) -> Any:
    """A record of zeros with the structure, shapes and dtypes of `record`."""
    if isinstance(record, dict):
        return {key: _padding_like(value) for key, value in record.items()}
    if isinstance(record, tuple | list):
        return type(record)(_padding_like(value) for value in record)
    return np.zeros_like(np.asarray(record))


def _map_tree(function, tree):
    """`function` applied to each array of a stacked batch, keeping dicts, lists and tuples."""
    if isinstance(tree, dict):
        return {key: _map_tree(function, value) for key, value in tree.items()}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # a namedtuple
        return type(tree)(*(_map_tree(function, value) for value in tree))
    if isinstance(tree, tuple | list):
        return type(tree)(_map_tree(function, value) for value in tree)
    return function(tree)


def _padded(leaf: np.ndarray, rows: int, pad_value: Any) -> np.ndarray:
    try:
        padding = np.full((rows, *leaf.shape[1:]), pad_value, dtype=leaf.dtype)
    except (TypeError, ValueError, OverflowError) as error:
        raise ValueError(
            f"pad_value={pad_value!r} does not fit an array of dtype {leaf.dtype}: {error}. "
            "Pass a pad_value every field can hold, e.g. 0.") from error
    return np.concatenate([leaf, padding])


def batch_and_pad(values: Sequence[Any], *, batch_size: int, pad_value: Any = 0) -> Any:
    """`values` stacked as `Batch` stacks them, then padded with `pad_value` to
    `batch_size` rows (Grain's `grain.experimental.batch_and_pad`, a `batch_fn`).

    Every field gets `batch_size - len(values)` rows of `pad_value`, in its own dtype; a
    full batch is stacked as it is. Nothing marks the padding rows (`PadAndMask` adds a mask).
    """
    batch_size = check_int("batch_size", batch_size, minimum=1,
                           fix="Pass the rows every batch should have, e.g. batch_size=64.")
    if len(values) == 0:
        raise ValueError("Cannot batch 0 values: batch_and_pad needs at least one value to "
                         "know the batch's fields, shapes and dtypes.")
    if len(values) > batch_size:
        raise ValueError(
            f"Cannot batch {len(values)} values to {batch_size}: batch_and_pad pads a short "
            "batch, it never cuts one. Pass the same batch_size to ds.batch and to "
            "batch_and_pad (functools.partial(batch_and_pad, batch_size=n)).")
    batch = stack_records(values)
    rows = batch_size - len(values)
    if rows == 0:
        return batch
    return _map_tree(lambda leaf: _padded(np.asarray(leaf), rows, pad_value), batch)


class _PadAndStack:
    """The batch function of `PadAndMask`: stack, pad to `batch_size`, add the mask."""

    def __init__(self, batch_size: int, mask_key: str):
        self.batch_size, self.mask_key = batch_size, mask_key

    def __call__(self, records: Sequence[Any]) -> dict:
        records = list(records)
        first = records[0]
        if not isinstance(first, dict):
            raise TypeError(
                f"PadAndMask needs records that are dicts (to add the {self.mask_key!r} "
                f"entry), got {type(first).__name__}. Wrap each record, e.g. "
                "{'image': image, 'label': label}.")
        if self.mask_key in first:
            raise ValueError(
                f"records already have a {self.mask_key!r} entry. Pass another "
                "mask_key= to PadAndMask.")
        count = len(records)
        records += [_padding_like(first)] * (self.batch_size - count)
        batch = stack_records(records)
        batch[self.mask_key] = np.arange(self.batch_size) < count
        return batch


class PadAndMask(Batch):
    """`Batch(batch_size)` whose every batch has `batch_size` rows and a boolean mask.

    Full batches get a mask of all True; the last, short batch is padded with zeros and its
    padding rows are False in the mask. Use it for evaluation, where every record counts;
    for training, `Batch(batch_size, drop_remainder=True)` is simpler.

    Args:
      batch_size: rows in every batch.
      mask_key: the entry added to each batch dict; True for real rows.
    """

    def __init__(self, batch_size: int, mask_key: str = "mask"):
        batch_size = check_int("batch_size", batch_size, minimum=1,
                               fix="Pass batch_size>=1, e.g. PadAndMask(batch_size=64).")
        if not isinstance(mask_key, str) or not mask_key:
            raise TypeError(f"mask_key={mask_key!r} must be a non-empty string, e.g. 'mask'.")
        super().__init__(batch_size, drop_remainder=False,
                         batch_fn=_PadAndStack(batch_size, mask_key))
        self.mask_key = mask_key

    def __repr__(self) -> str:
        return f"PadAndMask(batch_size={self.batch_size}, mask_key={self.mask_key!r})"
