"""Lesson 8, saving the data position: the resumed run drawn against the uninterrupted one,
and the batches' fingerprints side by side at the step where the run stopped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def plot_resume(uninterrupted: Sequence[Mapping[str, float]],
                before: Sequence[Mapping[str, float]], after: Sequence[Mapping[str, float]],
                *, control: Sequence[Mapping[str, float]] | None = None):
    """The loss per step of an uninterrupted run, and of a run stopped and resumed in a
    new process (rows are `{"step": ..., "loss": ...}`), on one plot; with `control`, the
    rows of a wrong resume from the same checkpoint, dashed, so the picture shows what a
    resume that goes wrong looks like."""
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(8, 3.4))
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
    ax.set_title("Stopped, restarted, resumed: " + losses_verdict(uninterrupted, [*before, *after]))
    ax.legend()
    figure.tight_layout()
    return figure


def losses_verdict(uninterrupted: Sequence[Mapping[str, float]],
                   resumed: Sequence[Mapping[str, float]]) -> str:
    """Whether a stopped and resumed run (`resumed`: its rows before and after the stop, in
    order) had the uninterrupted run's loss at every step: a title for the picture."""
    if [row["step"] for row in resumed] != [row["step"] for row in uninterrupted]:
        return "not the same steps as the run without a stop"
    differ = [row["step"] for row, other in zip(resumed, uninterrupted, strict=True)
              if row["loss"] != other["loss"]]
    if not differ:
        return "the same losses as without a stop"
    return (f"the losses differ from the run without a stop at {len(differ)} of "
            f"{len(uninterrupted)} steps (from step {differ[0]})")


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


def read_ahead_sentence(loop_position: int, loader_position: int,
                        skipped: Sequence[Sequence[int]]) -> str:
    """What resuming from each of the two positions would do, from the positions themselves."""
    if loader_position == loop_position:
        return (f"At this moment both stood at record {loop_position}: the thread had not "
                "read ahead, so this run does not show the trap. It reads ahead whenever the "
                "loop is slower than the loader, as it is during training.")
    if loader_position < loop_position:
        raise ValueError(f"loader_position={loader_position} is behind loop_position="
                         f"{loop_position}; pass the loop's position first.")
    shown = "\n".join(f"  {keys}" for keys in skipped[:4])
    more = f"\n  ... and {len(skipped) - 4} more" if len(skipped) > 4 else ""
    first = loop_position // len(skipped[0]) + 1 if skipped and skipped[0] else None
    which = (f" (batches {first} to {first + len(skipped) - 1} of the stream)"
             if first and len(skipped) > 1 else f" (batch {first} of the stream)" if first else "")
    return (f"Resumed from the loop's position ({loop_position}), the next batch is the one "
            f"the loop has not trained on yet. Resumed from the loader's own position "
            f"({loader_position}), the run would skip the {len(skipped)} batch"
            f"{'es' if len(skipped) != 1 else ''} read ahead{which}, never training on "
            f"these records:\n{shown}{more}")


# -- course_lib's saved state against Grain's ------------------------------------------------
def _position_keys(state: Mapping) -> str:
    keys = [f"`{key}`" for key in state if "index" in key or "indices" in key]
    return " and ".join(keys) or "no index"


def state_formats_sentence(course_state: str | bytes, grain_state: str | bytes | None) -> str:
    """How course_lib's saved data position differs from Grain's, from two real states."""
    import json

    ours = json.loads(course_state)
    ours_text = (f"course_lib saves version {ours.get('version')}, its position as "
                 f"{_position_keys(ours)}")
    if grain_state is None:
        return (f"{ours_text}. Grain is not installed here to compare; Grain 0.2.18 saves "
                "another format, so a checkpoint does not carry across between the two.")
    theirs = json.loads(grain_state)
    if theirs.get("version") == ours.get("version") and set(theirs) == set(ours):
        return (f"{ours_text}; Grain saves version {theirs.get('version')} with the same keys: "
                "the same format, so a state saved by one should restore in the other.")
    parts = []
    if "last_seen_indices" in theirs:
        parts.append(f"`last_seen_indices` ({json.dumps(theirs['last_seen_indices'])}: for each "
                     "worker, the stream position of the last record it has handed out; at "
                     "worker_count=0 the one entry is the process itself)")
    if "last_worker_index" in theirs:
        parts.append(f"`last_worker_index` ({theirs['last_worker_index']}: one less than the "
                     "worker whose turn comes next, since workers hand out elements in turn; "
                     "-1 when it is worker 0's turn, as always at worker_count=0)")
    theirs_text = (f"Grain saves version {theirs.get('version')}, its position as "
                   + (" and ".join(parts) or _position_keys(theirs)))
    return (f"{ours_text} (the next record to read); {theirs_text}. The formats differ: the "
            "next cells give each library's state to the other's loader. Switching libraries "
            "means starting the data position afresh, or converting it. Lesson 11 moves this "
            "loop to Grain and saves its position with Grain's own checkpoint handler.")


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
