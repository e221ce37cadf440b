"""Lesson 8, saving the data position: the resumed run drawn against the uninterrupted one,
the batches' fingerprints side by side at the step where the run stopped, the batches a
resume from the wrong position would skip, and a checkpoint's folders."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def plot_resume(uninterrupted: Sequence[Mapping[str, float]],
                before: Sequence[Mapping[str, float]], after: Sequence[Mapping[str, float]],
                *, control: Sequence[Mapping[str, float]] | None = None):
    """The loss per step of an uninterrupted run, and of a run stopped and resumed in a
    new process (rows are `{"step": ..., "loss": ...}`), on one plot; with `control`, the
    rows of a wrong resume from the same checkpoint, dashed, so the picture shows what a
    resume that goes wrong looks like. The legend sits right of the plot, where it hides no
    line however few steps there are."""
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(10, 3.4))
    ax.plot([row["step"] for row in uninterrupted], [row["loss"] for row in uninterrupted],
            color="grey", linewidth=4, alpha=0.5, label="uninterrupted run")
    ax.plot([row["step"] for row in before], [row["loss"] for row in before], marker=".",
            label="first process, until the save")
    ax.plot([row["step"] for row in after], [row["loss"] for row in after], marker=".",
            label="new process, after the restore")
    if control:
        ax.plot([row["step"] for row in control], [row["loss"] for row in control],
                color="tab:red", linestyle="--", linewidth=1.2,
                label="control: resumed without the data position")
    if before:
        ax.axvline(before[-1]["step"] + 0.5, color="black", linestyle=":",
                   label="checkpoint saved")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title("The loss of every step: a run never stopped, and one stopped and resumed")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")  # off the lines
    figure.tight_layout()
    return figure


def fingerprint_table(uninterrupted: Sequence[Mapping], runs: Mapping[str, Sequence[Mapping]],
                      steps: Sequence[int]) -> str:
    """The batch fingerprints (`row["batch"]`) of the uninterrupted run and of each run in
    `runs` (name -> its rows, in order) at the given steps, one row per step, with "=" where
    a run's batch equals the uninterrupted run's and "x" where it differs."""
    tables = {"uninterrupted": {row["step"]: row["batch"] for row in uninterrupted}}
    tables.update({name: {row["step"]: row["batch"] for row in rows}
                   for name, rows in runs.items()})
    missing = [(name, step) for name, table in tables.items() for step in steps
               if step not in table]
    if missing:
        raise ValueError(f"no step {missing[0][1]} in the run {missing[0][0]!r}: pass steps "
                         "that every run printed.")
    widths = {name: max(len(name), *(len(str(table[step])) + 2 for step in steps))
              for name, table in tables.items()}
    lines = [("step  " + "  ".join(f"{name:<{widths[name]}}" for name in tables)).rstrip()]
    for step in steps:
        cells = []
        for name, table in tables.items():
            mark = "" if name == "uninterrupted" else (
                " =" if table[step] == tables["uninterrupted"][step] else " x")
            cells.append(f"{str(table[step]) + mark:<{widths[name]}}")
        lines.append((f"{step:>4}  " + "  ".join(cells)).rstrip())
    lines.append("(= the uninterrupted run's batch at that step, x another batch)")
    return "\n".join(lines)


# -- the prefetch trap: what saving the wrong position would lose --------------------------
def skipped_batches(sampler, loop_position: int, loader_position: int,
                    batch_size: int) -> list[list[int]]:
    """The record keys of the batches between the position the loop has consumed and the
    position the loader underneath has read to: what a run resumed from the loader's own
    state would never train on. Positions are `next_index` values of the two states."""
    if loader_position < loop_position:
        raise ValueError(f"loader_position={loader_position} is behind loop_position="
                         f"{loop_position}: the loader underneath cannot have read less than "
                         "the loop consumed. Pass the states' next_index in that order.")
    keys = [sampler[index].record_key for index in range(loop_position, loader_position)]
    return [keys[start:start + batch_size] for start in range(0, len(keys), batch_size)]


def checkpoint_listing(directory, *, max_depth: int = 3) -> str:
    """The folders and files of a checkpoint directory, relative to it, as an indented tree.

    Folders deeper than `max_depth` are summarised as a file count, so Orbax's array
    storage stays one line."""
    from pathlib import Path

    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"{root.name} is not a folder: pass a checkpoint directory.")
    lines: list[str] = []

    def walk(folder: Path, depth: int) -> None:
        for path in sorted(folder.iterdir()):
            indent = "  " * depth
            if path.is_dir():
                if depth + 1 >= max_depth:
                    count = sum(1 for item in path.rglob("*") if item.is_file())
                    lines.append(f"{indent}{path.name}/  ({count} file{'' if count == 1 else 's'})")
                else:
                    lines.append(f"{indent}{path.name}/")
                    walk(path, depth + 1)
            else:
                lines.append(f"{indent}{path.name}")

    walk(root, 0)
    return "\n".join(lines)
