"""Lesson 5, sharding: the steps each process runs, and what each way of dealing records to
processes puts in a local batch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def plot_shard_policies(policies: Mapping[str, np.ndarray], labels: np.ndarray, *,
                        batch_size: int, num_steps: int):
    """For each policy (name -> one shard's keys in reading order): the labels of that
    shard's first local batches as a heatmap, and where in the file its reads land."""
    import matplotlib.pyplot as plt

    classes = int(labels.max()) + 1
    figure, axes = plt.subplots(2, len(policies), figsize=(5.2 * len(policies), 6.4),
                                squeeze=False)
    tables = {name: label_counts(keys, labels, batch_size=batch_size, num_steps=num_steps)
              for name, keys in policies.items()}
    # One colour scale for every panel: the same colour is the same count in all of them.
    largest = max(int(counts.max()) for counts in tables.values())
    for column, (name, keys) in enumerate(policies.items()):
        counts = tables[name]
        steps = len(counts)
        heat = axes[0, column].imshow(counts, aspect="auto", cmap="viridis", vmin=0,
                                      vmax=largest)
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
    figure.suptitle("Process 0 of 2: what its local batches hold (one colour scale for both), "
                    "and where it reads")
    figure.tight_layout()
    return figure


def label_counts(keys: np.ndarray, labels: np.ndarray, *, batch_size: int,
                 num_steps: int) -> np.ndarray:
    """How many records of each label the first `num_steps` local batches hold, shape
    `(steps, number of labels)`, for one shard's `keys` in reading order."""
    classes = int(labels.max()) + 1
    steps = min(num_steps, len(keys) // batch_size)
    if steps < 1:
        raise ValueError(f"{len(keys)} keys make no batch of batch_size={batch_size}: pass "
                         "more keys or a smaller batch.")
    return np.array([np.bincount(labels[keys[step * batch_size:(step + 1) * batch_size]],
                                 minlength=classes) for step in range(steps)])


def plot_step_counts(counts: Sequence[int]):
    """One row per process, one marker per step it would run in an epoch (`counts[i]`:
    process i's steps). The first step that some process enters without its peers is a
    cross: its collective waits there for ever, so the steps after it are never reached."""
    import matplotlib.pyplot as plt

    counts = [int(count) for count in counts]
    if not counts:
        raise ValueError("counts is empty: pass the steps of every process.")
    figure, ax = plt.subplots(figsize=(9, 1.6 + 0.45 * len(counts)))
    shared = min(counts)
    labelled = set()

    def mark(steps, process, style, label, **options):
        if len(steps):
            ax.plot(steps, [process] * len(steps), style, label=None if label in labelled
                    else label, **options)
            labelled.add(label)

    for process, count in enumerate(counts):
        mark(range(shared), process, "o", "every process runs it", color="tab:blue")
        mark(range(shared, min(shared + 1, count)), process, "x",
             "entered alone: its collective waits for ever", color="tab:red", markersize=10,
             markeredgewidth=2)
        mark(range(shared + 1, count), process, "o", "never reached", color="grey",
             markerfacecolor="none")
    ax.set_yticks(range(len(counts)), [f"process {index}" for index in range(len(counts))])
    ax.set_ylim(len(counts) - 0.4, -0.6)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.set_title("Steps each process would run in one epoch")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    figure.tight_layout()
    return figure
