"""Lesson 5, sharding: the keys each policy deals to a process, and their pictures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def contiguous_shard_keys(num_records: int, *, shard_index: int, shard_count: int,
                          seed: int) -> np.ndarray:
    """One epoch of the keys a shard reads when each shard is a contiguous block, shuffled
    within the block (what `IndexSampler` with `ShardOptions` does)."""
    from course_lib.sampler import IndexSampler
    from course_lib.sharding import ShardOptions

    sampler = IndexSampler(num_records, shard_options=ShardOptions(shard_index, shard_count),
                           shuffle=True, seed=seed, num_epochs=1)
    return np.array([sampler[index].record_key for index in range(sampler.shard_size)])


def strided_shard_keys(num_records: int, *, shard_index: int, shard_count: int,
                       seed: int) -> np.ndarray:
    """One epoch of the keys a shard reads when the whole data set is shuffled once (the
    same seed on every process) and dealt out by stride: positions shard_index,
    shard_index + shard_count, ..."""
    from course_lib.sampler import IndexSampler

    everyone = IndexSampler(num_records, shuffle=True, seed=seed, num_epochs=1)
    return np.array([everyone[index].record_key
                     for index in range(shard_index, num_records, shard_count)])


def plot_shard_sizes(sizes: Mapping[bool, Mapping[int, Sequence[int]]], num_records: int):
    """Smallest and largest shard, and records read by no shard, per shard count, for
    `drop_remainder` False and True (`sizes[drop][count]` lists the shard sizes)."""
    import matplotlib.pyplot as plt

    figure, (size_ax, lost_ax) = plt.subplots(1, 2, figsize=(10, 3.4))
    for drop, marker in ((False, "o"), (True, "s")):
        counts = sorted(sizes[drop])
        spread = [max(sizes[drop][count]) - min(sizes[drop][count]) for count in counts]
        lost = [num_records - sum(sizes[drop][count]) for count in counts]
        label = f"drop_remainder={drop}"
        size_ax.plot(counts, spread, marker=marker, label=label)
        lost_ax.plot(counts, lost, marker=marker, label=label)
    size_ax.set_xlabel("number of shards (processes)")
    size_ax.set_ylabel("largest minus smallest shard")
    size_ax.set_title("Do all shards have the same size?")
    lost_ax.set_xlabel("number of shards (processes)")
    lost_ax.set_ylabel("records read by no shard")
    lost_ax.set_title(f"Records left out, of {num_records}")
    for ax in (size_ax, lost_ax):
        ax.legend()
        ax.set_ylim(bottom=-0.2)
    figure.tight_layout()
    return figure


def plot_shard_policies(policies: Mapping[str, np.ndarray], labels: np.ndarray, *,
                        batch_size: int, num_steps: int):
    """For each policy (name -> one shard's keys in reading order): the labels of that
    shard's first local batches as a heatmap, and where in the file its reads land."""
    import matplotlib.pyplot as plt

    classes = int(labels.max()) + 1
    figure, axes = plt.subplots(2, len(policies), figsize=(5.2 * len(policies), 6.4),
                                squeeze=False)
    for column, (name, keys) in enumerate(policies.items()):
        steps = min(num_steps, len(keys) // batch_size)
        counts = np.array([np.bincount(labels[keys[step * batch_size:(step + 1) * batch_size]],
                                       minlength=classes) for step in range(steps)])
        heat = axes[0, column].imshow(counts, aspect="auto", cmap="viridis")
        axes[0, column].set_title(name, fontsize="medium")
        axes[0, column].set_xlabel("label")
        axes[0, column].set_ylabel("step")
        axes[0, column].set_xticks(range(classes))
        axes[0, column].yaxis.set_major_locator(plt.MaxNLocator(integer=True))
        figure.colorbar(heat, ax=axes[0, column], label="records in the local batch")
        shown = keys[:steps * batch_size]
        axes[1, column].plot(np.arange(len(shown)), shown, ".", markersize=2)
        axes[1, column].set_xlabel("read number (in this process)")
        axes[1, column].set_ylabel("record key (position in the file)")
        axes[1, column].set_ylim(0, len(labels))
    figure.suptitle("Process 0 of 2: what its local batches hold, and where it reads")
    figure.tight_layout()
    return figure


