"""Lesson 12's data, what its training job wrote, and its picture.

The capstone runs `course_lib/scripts/train_lm.py` as a real multi-process job. This module
writes its data (two corpora that ship with Python, cut into row-length pieces, in sharded
ArrayRecord files: the docstrings of the standard library's top-level modules, and the
source code of those modules), shows the script's own code, reads back what the job wrote
(`steps.jsonl` and one `rank<r>.json` per process) and draws the resumed run's losses.
Lesson 13 reads the same corpora through `text_pieces` and `code_pieces`.
"""

from __future__ import annotations

import inspect
import json
import math
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path

from course_lib.course.variable_length import _stdlib_docstrings

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "train_lm.py"
CORPORA = ("docstrings", "code")  # the script's file prefixes, in the order of --mix


def _cut(texts: Sequence[bytes], row_length: int) -> list[bytes]:
    return [text[start:start + row_length]
            for text in texts for start in range(0, len(text), row_length)]


def text_pieces(row_length: int, limit: int | None = None) -> list[bytes]:
    """Every docstring of a top-level stdlib module cut into pieces of at most `row_length`
    bytes, in order; the first `limit` documents only (None: all)."""
    return _cut(_stdlib_docstrings()[:limit], row_length)


def _stdlib_sources() -> list[bytes]:
    """The source of every top-level stdlib module (the `.py` files directly in its folder),
    files sorted by name."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return [path.read_bytes() for path in sorted(root.glob("*.py"))]


def code_pieces(row_length: int, limit: int | None = None) -> list[bytes]:
    """The source of the first `limit` top-level stdlib modules (None: all), in file order,
    cut into pieces of at most `row_length` bytes."""
    return _cut(_stdlib_sources()[:limit], row_length)


def write_corpora(directory: str | Path, row_length: int, num_shards: int,
                  limits: Mapping[str, int | None]) -> dict[str, dict[str, int]]:
    """Both corpora of the capstone, each in its own `num_shards` ArrayRecord files named
    after it; `limits` gives each corpus's number of documents (docstrings) or files (code),
    None for all. Returns, per corpus, its documents, how many of them were longer than a
    row (and so cut into several records), its records, tokens (bytes) and files."""
    from course_lib.array_record import write_array_record_shards

    documents = {"docstrings": _stdlib_docstrings(), "code": _stdlib_sources()}
    sizes = {}
    for name in CORPORA:
        kept = documents[name][:limits[name]]
        pieces = _cut(kept, row_length)
        paths = write_array_record_shards(pieces, directory, num_shards, prefix=name)
        sizes[name] = {"documents": len(kept),
                       "documents_cut": sum(len(text) > row_length for text in kept),
                       "records": len(pieces), "tokens": sum(map(len, pieces)),
                       "files": len(paths)}
    return sizes


# -- the script, as written ----------------------------------------------------------------
def script_function(name: str) -> str:
    """The source of one function of the training script, read from the file itself."""
    from course_lib.scripts import train_lm

    function = getattr(train_lm, name, None)
    if not inspect.isfunction(function):
        raise ValueError(f"name={name!r} is not a function of {SCRIPT.name}; pass one of "
                         f"{[n for n, f in vars(train_lm).items() if inspect.isfunction(f)]}.")
    return inspect.getsource(function)


def script_outline(script: str | Path = SCRIPT) -> str:
    """The training loop of the script, as written there (from the loop to the checkpoint),
    with its bookkeeping (checksums, counts, rank 0's log line) replaced by one comment."""
    lines = [line[4:] for line in Path(script).read_text().splitlines()]
    start = next(i for i, line in enumerate(lines) if "for local in profiler.wrap" in line)
    stop = next(i for i, line in enumerate(lines) if "save_spans.append" in line)
    counted = next(i for i in range(start, stop) if lines[i].strip() == "step += 1")
    saving = next(i for i in range(counted, stop) if "args.checkpoint_every" in lines[i])
    indent = lines[saving][:len(lines[saving]) - len(lines[saving].lstrip())]
    return "\n".join([*lines[start:counted + 1],
                      f"{indent}...  # bookkeeping: checksums, counts, rank 0's log line",
                      *lines[saving:stop + 1]])


# -- what the job wrote --------------------------------------------------------------------
def read_steps(run: str | Path) -> list[dict]:
    """Rank 0's log: one dict per step, in the order written (a resumed run appends)."""
    path = Path(run) / "steps.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_reports(run: str | Path) -> list[dict]:
    """Every rank's end-of-run report, by rank."""
    paths = sorted(Path(run).glob("rank*.json"), key=lambda p: int(p.stem[4:]))
    return [json.loads(path.read_text()) for path in paths]


def resumed_lines(steps: Sequence[Mapping], resumed_from: int) -> list[dict]:
    """The lines a resumed run appended to the log: from the last line of step
    `resumed_from + 1` on (the killed run wrote its own before it)."""
    starts = [i for i, step in enumerate(steps) if step["step"] == resumed_from + 1]
    if not starts:
        raise ValueError(f"no line of step {resumed_from + 1} in the log: the run did not "
                         f"resume from step {resumed_from}.")
    return list(steps[starts[-1]:])


CHECKSUMS = {"same_batches": "checksum", "same_segments": "segment_checksum",
             "same_positions": "position_checksum"}


def compare_runs(reference: Sequence[Mapping], resumed: Sequence[Mapping],
                 from_step: int) -> dict[str, object]:
    """Step by step after `from_step`: the steps both runs logged, those only one did
    (`missing`), and the steps whose tokens, segment ids, positions and loss match bit for
    bit."""
    ref = {step["step"]: step for step in reference if step["step"] > from_step}
    new = {step["step"]: step for step in resumed if step["step"] > from_step}
    common = sorted(set(ref) & set(new))
    comparison: dict[str, object] = {"steps": len(common),
                                     "missing": sorted(set(ref) ^ set(new))}
    for name, key in CHECKSUMS.items():
        comparison[name] = [s for s in common if ref[s][key] == new[s][key]]
    comparison["same_losses"] = [s for s in common if ref[s]["loss"] == new[s]["loss"]]
    return comparison


def global_batch_check(steps: Sequence[Mapping], reports: Sequence[Mapping]) -> dict:
    """Measured, not assumed: the global batch's shape, each process's local shape, and at
    how many steps the global batch's rows of process r have the checksum of the local
    batch process r built."""
    matching = [
        all(step["process_checksums"][report["rank"]] == report["local_checksums"][i]
            for report in reports)
        for i, step in enumerate(steps)]
    return {"global_shape": reports[0]["global_shape"],
            "local_shapes": [report["local_shape"] for report in reports],
            "steps": len(steps), "matching": sum(matching),
            "counted": [len(report["local_checksums"]) for report in reports]}


def step_times(report: Mapping) -> dict[int, float]:
    """Step number -> seconds from the end of the step before to the end of this one, as
    the process timed them: the wait for data, the step, the log line and any save. The
    compiling step and the first timed one have no entry."""
    ends = [end for _, end in report["step_spans"]]
    first = report["start_step"] + 2  # the first timed step (the compiling one is left out)
    return {first + i: ends[i] - ends[i - 1] for i in range(1, len(ends))}


def plot_resume(steps: Sequence[Mapping], resumed: Sequence[Mapping],
                control: Sequence[Mapping] | None, killed_after: int, resumed_from: int):
    """Above, the loss per step of the uninterrupted run (a line), of the resumed run (dots),
    and of `control`, a resume that ignored the data position (dashed), with the SIGKILL and
    the checkpoint the resume started from marked. Below, each resumed run's loss minus the
    uninterrupted run's at the same step."""
    import matplotlib.pyplot as plt

    figure, (ax, below) = plt.subplots(2, 1, figsize=(9, 4.8), sharex=True,
                                       gridspec_kw={"height_ratios": [3, 1.3]})
    reference = {s["step"]: s["loss"] for s in steps}
    ax.plot([s["step"] for s in steps], [s["loss"] for s in steps], color="grey",
            linewidth=4, alpha=0.5, label="uninterrupted run")
    drawn = [(resumed, dict(marker="o", linestyle="none", markersize=3.5, color="tab:orange",
                            label=f"resumed run, steps {resumed[0]['step']}-"
                            f"{resumed[-1]['step']}"))]
    if control:
        drawn.append((control, dict(linestyle="--", color="tab:blue", linewidth=1.2,
                                    label="control: resumed without the data position")))
    for run, style in drawn:
        ax.plot([s["step"] for s in run], [s["loss"] for s in run], **style)
        style = {key: value for key, value in style.items() if key != "label"}
        below.plot([s["step"] for s in run],
                   [s["loss"] - reference[s["step"]] for s in run], **style)
    for axes in (ax, below):
        axes.axvline(killed_after + 0.5, color="tab:red", linestyle="--",
                     label=f"rank 1 killed (SIGKILL) after step {killed_after}")
        axes.axvline(resumed_from + 0.5, color="black", linestyle=":",
                     label=f"checkpoint restored: step {resumed_from}")
    ax.axhline(math.log(256), color="grey", linestyle=":", linewidth=1,
               label="uniform guess over 256 bytes")
    below.axhline(0, color="grey", linewidth=1)
    below.set_xlabel("step")
    below.set_ylabel("minus the\nuninterrupted")
    ax.set_ylabel("next-byte loss (nats)")
    ax.set_title(f"Loss per step: rank 1 killed after step {killed_after}, the job resumed "
                 f"from step {resumed_from}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, fontsize=8)
    figure.tight_layout()
    return figure
