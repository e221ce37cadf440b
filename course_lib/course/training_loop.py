"""Lesson 7, the training loop: the training curves, and one timeline per way of feeding
the step.

The lesson writes the model, the step, the loaders and the timed loop in its cells; this
module keeps only the two pictures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def plot_training(losses: Sequence[float], accuracies: Mapping[int, float], *,
                  title: str = "Training on the digits", short: int = 0):
    """Two panels: the loss of every step, and the held-out accuracy measured every epoch's
    worth of steps (`accuracies` maps a step to the accuracy measured after it, step 0
    before training).
    `short` is how many records of the last epoch the run never trained on (full batches
    run on across epochs): the right panel's title says so when it is not 0."""
    import matplotlib.pyplot as plt

    if short < 0:
        raise ValueError(f"short={short!r}: pass the records of the last epoch not trained on.")
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
    accuracy_ax.set_title("accuracy on the held-out digits, every epoch's worth of steps" + (
        f"\n(the run ends {short} record{'s' if short > 1 else ''} short of its last epoch)"
        if short else ""))
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def median_run(profilers: Sequence[Any]) -> int:
    """The index of the run with the median steps per second (the lower middle one of an
    even count): the run a timeline draws, so the picture shows a typical run."""
    if not profilers:
        raise ValueError("profilers is empty: pass one StepProfiler per run.")
    rates = [profiler.num_steps / profiler.wall_time for profiler in profilers]
    return int(np.argsort(rates)[(len(rates) - 1) // 2])


def plot_feed_timelines(runs: Mapping[str, Sequence[Any]], max_steps: int = 12):
    """One timeline per setup (`runs`: setup -> one `StepProfiler` per run), of its median
    run (`median_run`), titled with the setup's name only: the lesson's tables give the
    numbers, so no title carries a second figure."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(runs), 1, figsize=(10, 1.8 * len(runs)), sharex=True,
                                squeeze=False)
    for ax, (label, profilers) in zip(axes[:, 0], runs.items(), strict=True):
        profilers[median_run(profilers)].plot_timeline(ax=ax, max_steps=max_steps)
        ax.set_title(label, fontsize="medium")
        ax.set_xlabel("")
    axes[-1, 0].set_xlabel(f"time (ms); first {max_steps} measured steps of each setup's "
                           "median run")
    figure.tight_layout()
    return figure
