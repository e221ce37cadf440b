"""Lesson 13, mixing data sets: the two corpora as records, counts read from the records,
and the lesson's picture.

The corpora are the capstone's (`capstone.text_pieces`, the standard library's docstrings,
and `capstone.code_pieces`, its source), cut into pieces of at most `ROW_LENGTH` bytes. A
record is a dict of the piece's bytes padded to one row (`tokens`), the corpus it comes from
(`corpus`, 0 or 1) and its index in that corpus (`key`), so that every count in the lesson
is read from the records themselves. The loaders and loops the lesson measures are written
in its cells.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

ROW_LENGTH = 128  # bytes per piece, as in lessons 10 and 12
MIX_BATCH = 32  # records per batch in this lesson
CORPUS_NAMES = ("docstrings", "code")


class CorpusPieces:
    """A data source over one corpus's pieces: record `i` is `{"tokens": the piece's bytes
    padded with 0 to row_length, "corpus": corpus, "key": i}` (int32 arrays). Picklable, so
    worker processes can read it."""

    def __init__(self, pieces: Sequence[bytes], corpus: int, row_length: int = ROW_LENGTH):
        longest = max((len(piece) for piece in pieces), default=0)
        if longest > row_length:
            raise ValueError(f"a piece of {longest} bytes does not fit row_length={row_length}:"
                             " cut the corpus with the same row length.")
        self.pieces, self.corpus, self.row_length = list(pieces), int(corpus), row_length

    def __len__(self) -> int:
        return len(self.pieces)

    def __getitem__(self, key: int) -> dict[str, np.ndarray]:
        piece = self.pieces[key]
        tokens = np.zeros(self.row_length, np.int32)
        tokens[:len(piece)] = np.frombuffer(piece, np.uint8)
        return {"tokens": tokens, "corpus": np.int32(self.corpus), "key": np.int32(key)}


def no_docstring_quote(record: Mapping[str, np.ndarray]) -> bool:
    """True for a piece with no triple quote in it: the lesson's example filter keeps these
    and drops the pieces that hold one."""
    return b'"""' not in np.asarray(record["tokens"], np.uint8).tobytes()


def corpus_ids(records: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """The corpus of each record (or of each row of each batch), in stream order."""
    return np.concatenate([np.atleast_1d(np.asarray(record["corpus"])) for record in records])


def per_batch(components: np.ndarray, batch_size: int, component: int = 0) -> np.ndarray:
    """How many elements of each whole batch belong to `component`."""
    whole = len(components) // batch_size * batch_size
    return (np.asarray(components[:whole]) == component).reshape(-1, batch_size).sum(axis=1)


def prefix_deviation(components: np.ndarray, share: float, component: int = 0) -> np.ndarray:
    """For every prefix of the stream (the first 1, 2, ... elements), how many elements
    `component` holds beyond (or short of) `share` of the prefix, in elements."""
    held = np.cumsum(np.asarray(components) == component)
    return np.abs(held - share * np.arange(1, len(held) + 1))


def reads_per_corpus(records: Sequence[Mapping[str, Any]],
                     lengths: Sequence[int]) -> list[dict[str, int]]:
    """For each corpus, from the records a run handed out: how many it read and how many
    distinct records those were."""
    corpora = corpus_ids(records)
    keys = np.concatenate([np.atleast_1d(np.asarray(record["key"])) for record in records])
    return [{"read": int(np.sum(corpora == corpus)),
             "distinct": len(np.unique(keys[corpora == corpus]))}
            for corpus in range(len(lengths))]


def equal_batches(batches: Sequence[Mapping[str, np.ndarray]],
                  reference: Sequence[Mapping[str, np.ndarray]]) -> list[bool]:
    """For each batch of `reference`, whether every array of the batch at the same place in
    `batches` equals it (a missing batch counts as different)."""
    return [place < len(batches) and set(batches[place]) == set(wanted)
            and all(np.array_equal(batches[place][key], wanted[key]) for key in wanted)
            for place, wanted in enumerate(reference)]


def plot_batch_shares(mix_counts: np.ndarray, coin_counts: np.ndarray,
                      mix_deviation: np.ndarray, coin_deviation: np.ndarray,
                      batch_size: int, share: float):
    """Left: how many batches held each count of docstring records, for the mix and a coin
    per record. Right: how far every prefix strays from the share, for both."""
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    values = np.arange(min(mix_counts.min(), coin_counts.min()),
                       max(mix_counts.max(), coin_counts.max()) + 1)
    for offset, counts, color, label in ((-0.2, coin_counts, "tab:orange", "a coin per record"),
                                         (0.2, mix_counts, "tab:blue", "the mix's rule")):
        left.bar(values + offset, [int(np.sum(counts == value)) for value in values],
                 width=0.4, color=color, label=label)
    left.axvline(share * batch_size, color="black", linestyle=":",
                 label=f"{share:.2%} of {batch_size}")
    left.set(xlabel=f"docstring records in a batch of {batch_size}", ylabel="batches",
             title=f"What each of {len(mix_counts)} batches holds")
    left.legend(fontsize="small")
    positions = np.arange(1, len(mix_deviation) + 1)
    right.plot(positions, coin_deviation, color="tab:orange",
               label=f"a coin per record (at most {coin_deviation.max():.1f})")
    right.plot(positions, mix_deviation, color="tab:blue", linewidth=0.6,
               label=f"the mix's rule (at most {mix_deviation.max():.3f})")
    right.set(xlabel="prefix length (records from the start)",
              ylabel="docstring records off the share",
              title="How far every prefix strays from the share")
    right.legend(fontsize="small")
    figure.tight_layout()
    return figure
