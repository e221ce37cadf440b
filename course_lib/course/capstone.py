"""Lesson 12's data, run reports, pictures and sentences.

The capstone runs `course_lib/train_lm.py` as a real multi-process job. This module writes
its data (the standard library's docstrings, long ones cut into row-length pieces, in
sharded ArrayRecord files), reads back what the job wrote (`steps.jsonl` and one
`rank<r>.json` per process), draws it, and prints the sentences that depend on it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from course_lib.course.variable_length import _stdlib_docstrings

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "train_lm.py"


def text_pieces(row_length: int, limit: int | None = None) -> list[bytes]:
    """Every stdlib docstring cut into pieces of at most `row_length` bytes, in order; the
    first `limit` documents only (None: all)."""
    pieces = []
    for text in _stdlib_docstrings()[:limit]:
        pieces.extend(text[start:start + row_length]
                      for start in range(0, len(text), row_length))
    return pieces


def write_corpus(directory: str | Path, row_length: int, num_shards: int,
                 limit: int | None = None) -> dict[str, int]:
    """Write the pieces into `num_shards` ArrayRecord files; return their sizes."""
    from course_lib.array_record import write_array_record_shards

    pieces = text_pieces(row_length, limit)
    paths = write_array_record_shards(pieces, directory, num_shards, prefix="docstrings")
    return {"documents": len(_stdlib_docstrings()[:limit]), "records": len(pieces),
            "tokens": sum(len(piece) for piece in pieces), "files": len(paths),
            "bytes_on_disk": sum(path.stat().st_size for path in paths)}


def script_outline(script: str | Path = SCRIPT) -> str:
    """The training loop of the script, as written there (from the loop to the checkpoint)."""
    lines = Path(script).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "for tokens, segment_ids, positions" in line)
    stop = next(i for i, line in enumerate(lines) if "save_training(manager, step" in line)
    return "\n".join(line[4:] for line in lines[start:stop + 1])


def read_steps(run: str | Path) -> list[dict]:
    """Rank 0's log: one dict per step, in the order written (a resumed run appends)."""
    path = Path(run) / "steps.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_reports(run: str | Path) -> list[dict]:
    """Every rank's end-of-run report, by rank."""
    paths = sorted(Path(run).glob("rank*.json"), key=lambda p: int(p.stem[4:]))
    return [json.loads(path.read_text()) for path in paths]


def tokens_per_second(steps: Sequence[Mapping], skip: int = 1) -> float:
    """Real (non-padding) tokens of all processes per second of wall time, leaving out the
    first `skip` steps (the compilation)."""
    kept = steps[skip:]
    if len(kept) < 2:
        raise ValueError(f"{len(steps)} steps are too few to time after skipping {skip}.")
    seconds = kept[-1]["time"] - kept[0]["time"]
    return sum(step["real_tokens"] for step in kept[1:]) / max(seconds, 1e-9)


def compare_runs(reference: Sequence[Mapping], resumed: Sequence[Mapping],
                 from_step: int) -> dict[str, object]:
    """Step by step after `from_step`: do the checksums and losses match bit for bit?"""
    ref = {step["step"]: step for step in reference if step["step"] > from_step}
    new = {step["step"]: step for step in resumed if step["step"] > from_step}
    common = sorted(set(ref) & set(new))
    return {"steps": len(common), "missing": sorted(set(ref) ^ set(new)),
            "same_batches": [s for s in common if ref[s]["checksum"] == new[s]["checksum"]],
            "same_losses": [s for s in common if ref[s]["loss"] == new[s]["loss"]]}


def resume_sentence(comparison: Mapping, killed_after: int, resumed_from: int,
                    traces: Sequence[int]) -> str:
    """What the resume proved, or where it failed, from `compare_runs` and the trace counts."""
    steps = comparison["steps"]
    batches, losses = len(comparison["same_batches"]), len(comparison["same_losses"])
    head = (f"Killed after step {killed_after}, resumed from the checkpoint of step "
            f"{resumed_from}: ")
    if steps == 0 or comparison["missing"]:
        return head + (f"the two runs do not cover the same steps (missing in one of them: "
                       f"{comparison['missing']}), so they cannot be compared.")
    parts = []
    if batches == steps and losses == steps:
        parts.append(f"all {steps} steps after the checkpoint have the same global batch "
                     "and the same loss, bit for bit, as the uninterrupted run")
    else:
        parts.append(f"of the {steps} steps after the checkpoint, {batches} have the same "
                     f"global batch and {losses} the same loss as the uninterrupted run; "
                     "the resume is not exact")
    if all(count == 1 for count in traces):
        parts.append("every process traced its step once in each run")
    else:
        parts.append(f"the step was traced {list(traces)} times per process and run, "
                     "so something recompiled")
    return head + "; ".join(parts) + "."


def idle_sentence(reports: Sequence[Mapping], rate: float) -> str:
    """Tokens/s and each process's idle share, with what the share says."""
    shares = [report["idle_share"] for report in reports]
    listed = ", ".join(f"process {report['rank']} {100 * share:.0f}%"
                       for report, share in zip(reports, shares, strict=True))
    worst = max(shares)
    if worst < 0.1:
        verdict = "the loader keeps up: the step, not the data, sets the pace"
    elif worst < 0.3:
        verdict = "some time goes to waiting for data or to the loop around the step"
    else:
        verdict = ("the processes wait a large part of the time: the loader (or the "
                   "checkpoint saves) is the bottleneck, not the step")
    return (f"{rate:,.0f} real tokens per second over both processes; share of the wall "
            f"time not spent in the step: {listed}; {verdict}.")


def plot_run(steps: Sequence[Mapping], reports: Sequence[Mapping],
             resumed: Sequence[Mapping] | None = None, killed_after: int | None = None,
             run: str = "uninterrupted run"):
    """The loss per step (and the resumed run's on top) and each process's timeline in the
    run that `reports` come from (named by `run`)."""
    import matplotlib.pyplot as plt

    from course_lib.profiling import StepProfiler

    figure, axes = plt.subplots(1 + len(reports), 1, figsize=(10, 3 + 1.6 * len(reports)),
                                gridspec_kw={"height_ratios": [3] + [1.2] * len(reports)})
    loss_ax = axes[0]
    loss_ax.plot([s["step"] for s in steps], [s["loss"] for s in steps], color="tab:blue",
                 label="uninterrupted run")
    if resumed:
        loss_ax.plot([s["step"] for s in resumed], [s["loss"] for s in resumed], "o",
                     markersize=3, color="tab:orange", label="killed and resumed run")
    if killed_after is not None:
        loss_ax.axvline(killed_after, color="tab:red", linestyle="--",
                        label=f"SIGKILL after step {killed_after}")
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("next-byte loss (nats)")
    loss_ax.legend(loc="upper right")
    loss_ax.set_title("Training loss")
    for ax, report in zip(axes[1:], reports, strict=True):
        profiler = StepProfiler()
        profiler._wait_spans = [tuple(span) for span in report["wait_spans"]]
        profiler._step_spans = [tuple(span) for span in report["step_spans"]]
        profiler.plot_timeline(ax=ax, max_steps=12)
        ax.set_title(f"{run}, process {report['rank']}: first 12 timed steps, idle "
                     f"{100 * report['idle_share']:.0f}% over the run", fontsize=10)
    figure.tight_layout()
    return figure


def summary_lines(numbers: Mapping[str, object]) -> list[str]:
    """What was built, each part with the lesson it came from and its number in this run."""
    return [
        f"Lesson 9  sharded ArrayRecord files: {numbers['records']:,} records in "
        f"{numbers['files']} files, {numbers['bytes_on_disk']:,} bytes on disk",
        f"Lesson 5  one block of records per process, a global batch of "
        f"{numbers['global_rows']} rows from {numbers['processes']} local batches",
        f"Lesson 10 packed rows of {numbers['row_length']} bytes: "
        f"{100 * numbers['fill']:.0f}% of the slots hold real tokens",
        f"Lesson 6  the step traced {numbers['max_traces']} time per process, resume included",
        f"Lesson 7  {numbers['tokens_per_second']:,.0f} real tokens/s; idle share "
        f"{numbers['idle']}",
        f"Lesson 8  one Orbax checkpoint: model, optimizer, {numbers['processes']} data "
        f"positions; killed after step {numbers['killed_after']}, resumed from step "
        f"{numbers['resumed_from']}, {numbers['equal_steps']} steps equal bit for bit",
    ]
