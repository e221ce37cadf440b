"""Lesson 8, saving the data position: the resumed run drawn against the uninterrupted one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def plot_resume(uninterrupted: Sequence[Mapping[str, float]],
                before: Sequence[Mapping[str, float]], after: Sequence[Mapping[str, float]]):
    """The loss per step of an uninterrupted run, and of a run stopped and resumed in a
    new process (rows are `{"step": ..., "loss": ...}`), on one plot."""
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(8, 3.4))
    ax.plot([row["step"] for row in uninterrupted], [row["loss"] for row in uninterrupted],
            color="grey", linewidth=4, alpha=0.5, label="uninterrupted run")
    ax.plot([row["step"] for row in before], [row["loss"] for row in before], marker=".",
            label="first process, until the save")
    ax.plot([row["step"] for row in after], [row["loss"] for row in after], marker=".",
            label="new process, after the restore")
    if before:
        ax.axvline(before[-1]["step"] + 0.5, color="black", linestyle=":",
                   label="checkpoint saved")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title("Stopped, restarted, resumed: the same losses as without a stop")
    ax.legend()
    figure.tight_layout()
    return figure
