"""Lesson 7, the training loop: the naive feed of lesson 1 and the training curves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np


def naive_batches(folder: str | Path, batch_size: int, *, num_records: int | None = None,
                  seed: int = 0):
    """Endless batches made the way lesson 1's first training script makes them: in Python,
    one file at a time (read, decode, random shift of up to 8 pixels, scale to 0..1),
    in the calling process. Only the first `num_records` files are used, if given."""
    from PIL import Image

    folder = Path(folder)
    files = sorted(folder.glob("*.png"))[:num_records]
    labels = np.load(folder / "labels.npy")
    rng = np.random.default_rng(seed)
    while True:
        images, batch_labels = [], []
        for key in rng.integers(0, len(files), size=batch_size).tolist():
            with Image.open(files[key]) as picture:
                padded = np.pad(np.asarray(picture), 8)
            top, left = rng.integers(0, 17, size=2)
            side_y, side_x = padded.shape[0] - 16, padded.shape[1] - 16
            images.append(padded[top:top + side_y, left:left + side_x] / np.float32(255))
            batch_labels.append(labels[key])
        yield {"image": np.stack(images), "label": np.array(batch_labels, np.int32)}


def plot_training(losses: Sequence[float], accuracies: Mapping[int, float], *,
                  title: str = "Training on the digits"):
    """Two panels: the loss of every step, and the held-out accuracy after each epoch."""
    import matplotlib.pyplot as plt

    figure, (loss_ax, accuracy_ax) = plt.subplots(1, 2, figsize=(10, 3.4))
    loss_ax.plot(np.arange(1, len(losses) + 1), losses, linewidth=1)
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("training loss (cross-entropy)")
    loss_ax.set_title("loss per step")
    steps = sorted(accuracies)
    accuracy_ax.plot(steps, [100 * accuracies[step] for step in steps], marker="o")
    accuracy_ax.set_xlabel("step")
    accuracy_ax.set_ylabel("held-out accuracy (%)")
    accuracy_ax.set_ylim(0, 100)
    accuracy_ax.set_title("accuracy on the held-out digits, after each epoch")
    figure.suptitle(title)
    figure.tight_layout()
    return figure


