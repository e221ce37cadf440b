"""Lesson 9, formats read only in order: tf.data's shuffle buffer, and the picture of how
well each shuffle mixes a file written class by class.

A reader of a stream (TFRecord, Parquet, tar shards) mixes only what it holds. A *shuffle
buffer* keeps `buffer_size` records and hands out a random one, putting the stream's next
record in its place: no record leaves more than `buffer_size - 1` places early, and at every
step a record in the buffer stays with chance `1 - 1/buffer_size`, so old records trickle
out late. Grain has no shuffle buffer; its `WindowShuffleIterDataset` shuffles one window
at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np


def shuffle_buffer(stream: Iterable, buffer_size: int, seed: int) -> Iterator:
    """tf.data's shuffle: fill a buffer of `buffer_size` elements, then for every new element
    hand out a random one of the buffer and put the new one in its place; at the end, hand
    out what is left in random order."""
    if int(buffer_size) != buffer_size or buffer_size < 1:
        raise ValueError(f"buffer_size={buffer_size!r} must be a whole number of records, at "
                         "least 1; 1 keeps the file's order, the data set's size shuffles it all.")
    generator = np.random.default_rng(seed)
    buffer: list = []
    for element in stream:
        if len(buffer) < buffer_size:
            buffer.append(element)
            continue
        slot = int(generator.integers(buffer_size))
        yield buffer[slot]
        buffer[slot] = element
    for slot in generator.permutation(len(buffer)):
        yield buffer[slot]


def labels_per_batch(labels: Sequence[int], batch_size: int) -> np.ndarray:
    """How many different labels each full batch of `batch_size` consecutive records holds."""
    labels = np.asarray(labels)
    full = len(labels) // batch_size * batch_size
    return np.array([len(np.unique(batch)) for batch in labels[:full].reshape(-1, batch_size)])


def plot_label_orders(orders: Mapping[str, Sequence[int]], batch_size: int):
    """One strip per order: the label of every record along the epoch, coloured by label,
    with the mean number of labels per batch beside the order's name."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import BoundaryNorm, ListedColormap

    names = list(orders)
    strips = np.stack([np.asarray(orders[name]) for name in names])
    figure, ax = plt.subplots(figsize=(9, 0.7 * len(names) + 1.6))
    image = ax.imshow(strips, aspect="auto", interpolation="nearest",
                      cmap=ListedColormap(plt.get_cmap("tab10").colors),
                      norm=BoundaryNorm(np.arange(-0.5, 10.5), 10))
    ax.set_yticks(range(len(names)), [
        f"{name}\n{labels_per_batch(orders[name], batch_size).mean():.1f} labels per batch"
        for name in names], fontsize="small")
    ax.set_xlabel("position in the epoch (records, in the order they come out)")
    ax.set_title(f"The label of every record, in the order each shuffle hands it out "
                 f"(batches of {batch_size})")
    figure.colorbar(image, ax=ax, ticks=range(10), pad=0.01).set_label("label")
    figure.tight_layout()
    return figure
