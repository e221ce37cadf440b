"""Lesson 10, variable-length sequences: real sequences, the measurements, and their sentences.

The sequences are the docstrings of the installed Python's own standard library, read with
`ast` from its source files and tokenised at the byte level: every machine has them, nothing
is downloaded, and their lengths have the long tail of real text. How many there are
changes with the Python version, so no checked cell prints their count. The lesson keeps
those that fit a row and says how many that leaves out; `split_into_rows` shows what a real
pipeline does with the others (cut into row-length pieces, nothing dropped).

Each way of batching them (pad to the longest, pad to a fixed length, buckets, packing) is
measured the same way: the batches of one pass are built first, then a jitted training
step (loss, gradients, Optax update) runs over them, so that the time is the model's,
counted in real tokens per second (padding does not count). Grain's own
`PackAndBatchOperation` runs in a new Python process, because Python's resource tracker
reports leaked shared memory only when the process that started the workers exits; its
Dataset API packers run in the notebook's process.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import statistics
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from course_lib.course.basics import (
    BETTER,
    NOISE_FLOOR,
    SAME,
    TOO_NOISY_TO_TELL,
    WORSE,
    Estimate,
    format_duration,
    format_rate,
    format_seconds,
    format_times,
    judge,
    relative_margin,
)
from course_lib.course.determinism import format_bytes

ROW_LENGTH = 128  # bytes per row, and the longest sequence the lesson keeps
BATCH_SIZE = 8


@functools.cache
def _stdlib_docstrings() -> tuple[bytes, ...]:
    """Every docstring (modules, classes, functions) of the top-level stdlib modules, in a
    fixed order: files sorted by name, nodes in `ast.walk` order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for path in sorted(root.glob("*.py")):
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):  # a test file written to be broken
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                text = ast.get_docstring(node, clean=True)
                if text:
                    found.append(text.encode("utf-8"))
    return tuple(found)


def docstring_sequences(max_length: int = ROW_LENGTH,
                        limit: int | None = None) -> list[np.ndarray]:
    """The stdlib's docstrings of at most `max_length` bytes, as int32 byte tokens (never 0:
    text has no NUL byte, so 0 is free for padding); the first `limit` of them."""
    kept = [text for text in _stdlib_docstrings() if len(text) <= max_length]
    return [np.frombuffer(text, np.uint8).astype(np.int32) for text in kept[:limit]]


def docstring_counts(max_length: int = ROW_LENGTH) -> tuple[int, int]:
    """How many of the stdlib's docstrings fit in `max_length` bytes, and how many there are."""
    texts = _stdlib_docstrings()
    return sum(len(text) <= max_length for text in texts), len(texts)


def kept_sentence(kept: int, total: int, row_length: int = ROW_LENGTH) -> str:
    """How many docstrings the lesson keeps, and what leaving out the rest means."""
    dropped = total - kept
    if dropped == 0:
        return f"All {total:,} docstrings fit in a row of {row_length} bytes: none is left out."
    return (f"{kept:,} of the {total:,} docstrings fit in a row of {row_length} bytes; the "
            f"other {dropped:,} ({dropped / total:.0%}) are longer and are left out, so the "
            "padding figures below are measured on the shorter ones, except in part 4's "
            "\"Split long documents\", which cuts them into row-length pieces, as a real "
            "pipeline does, and measures again.")


def split_into_rows(tokens: np.ndarray, row_length: int = ROW_LENGTH) -> list[np.ndarray]:
    """A sequence cut into consecutive pieces of at most `row_length` tokens: every token
    kept, none repeated. Each piece is trained on as a sequence of its own, so the model
    never sees context across a cut."""
    if row_length < 1:
        raise ValueError(f"row_length={row_length} must be at least 1: pass the row length "
                         "of the packer, e.g. 128.")
    return [tokens[start:start + row_length] for start in range(0, len(tokens), row_length)]


def all_docstrings(limit: int | None = None) -> list[np.ndarray]:
    """Every docstring (the first `limit`), whole, as int32 byte tokens: long ones too."""
    return [np.frombuffer(text, np.uint8).astype(np.int32)
            for text in _stdlib_docstrings()[:limit]]


def all_docstring_pieces(row_length: int = ROW_LENGTH,
                         limit: int | None = None) -> list[np.ndarray]:
    """Every docstring (the first `limit`), the long ones split into row-length pieces."""
    texts = _stdlib_docstrings()[:limit]
    return [piece for text in texts for piece in
            split_into_rows(np.frombuffer(text, np.uint8).astype(np.int32), row_length)]


def kept_of(document: np.ndarray, rows: Iterable[Any]) -> int:
    """How many of `document`'s first tokens reached the packed rows: the length of the
    longest segment that is a prefix of it (0 if none is). `rows`: packed rows, each a
    `(tokens, segment_ids, ...)` tuple (`rows_of(batches)`) or a dict with Grain's keys
    (`tokens`, `tokens_segment_ids`), as the packers hand them out."""
    document, kept = np.asarray(document), 0
    for row in rows:
        tokens, segments = ((row["tokens"], row["tokens_segment_ids"])
                            if isinstance(row, Mapping) else (row[0], row[1]))
        tokens, segments = np.asarray(tokens), np.asarray(segments)
        for segment in np.unique(segments[segments > 0]):
            piece = tokens[segments == segment]
            if len(piece) > kept and np.array_equal(piece, document[:len(piece)]):
                kept = len(piece)
    return kept


@contextlib.contextmanager
def messages_emitted() -> Iterator[list[str]]:
    """Collect what the block warns (`warnings`), logs (at WARNING and above, through
    `logging` and absl) or writes to stderr: the list is filled when the block ends."""
    import io
    import logging
    import warnings

    found: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            found.append(f"{record.levelname}: {record.getMessage()}")

    handler, root, stderr = Collect(logging.WARNING), logging.getLogger(), io.StringIO()
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught, \
                contextlib.redirect_stderr(stderr):
            warnings.simplefilter("always")
            yield found
    finally:
        root.removeHandler(handler)
    found.extend(f"{warning.category.__name__}: {warning.message}" for warning in caught)
    found.extend(line for line in stderr.getvalue().splitlines() if line.strip())


def truncate_sentence(length: int, kept: Mapping[str, int], row_length: int = ROW_LENGTH,
                      emitted: Sequence[str] = ()) -> str:
    """What each way of cutting (`kept`: bytes of the sequence that reached the rows, as
    counted by `kept_of`) kept of a sequence of `length` bytes, against splitting it.
    `emitted`: what the packer warned, logged or wrote to stderr while it cut
    (`messages_emitted`)."""
    listing = "; ".join(
        f"{how} kept all of them" if count >= length else
        f"{how} kept {count:,} and threw away {length - count:,} ({(length - count) / length:.0%})"
        for how, count in kept.items())
    head = f"Of the long docstring's {length:,} bytes, {listing}"
    if all(count >= length for count in kept.values()):
        return f"{head}: a sequence that fits a row of {row_length} is not cut."
    said = ("it raised no error and warned, logged or printed nothing: the cut is silent"
            if not emitted else
            f"it raised no error, but said so: {emitted[0]!r}" +
            (f" (and {len(emitted) - 1} more message{'s' if len(emitted) > 2 else ''})"
             if len(emitted) > 1 else ""))
    pieces = -(-length // row_length)
    return (f"{head}. While the packer cut with truncate=True, {said}. Split into rows of "
            f"{row_length} instead, it is {pieces} sequences of at most one row each: every "
            "byte is trained on, each piece without the pieces before it.")


def error_index_sentence(message: str, record_key: int, stream_position: int) -> str:
    """Which index a packer's error names: the sequence's position in the shuffled stream
    the packer reads, or its record key in the source."""
    import re

    found = re.search(r"at index (\d+)", message)
    index = int(found.group(1)) if found else None
    where = (f"the long docstring is record key {record_key} of the source, and the shuffle "
             f"put it at position {stream_position} of the stream the packer reads")
    if index == stream_position and index != record_key:
        return (f"The error's index, {index}, is a position in the stream, not a record key: "
                f"{where}.")
    if index == record_key and index != stream_position:
        return f"The error's index, {index}, is the record key: {where}."
    if index == record_key:
        return (f"The error's index, {index}, is both the record key and the stream "
                "position here (the shuffle left the long docstring in place).")
    return (f"The error names index {index}, which is neither where the long docstring sits: "
            f"{where}.")


def longest_docstring() -> np.ndarray:
    """The longest docstring of the stdlib, as tokens: one that fits no row."""
    return np.frombuffer(max(_stdlib_docstrings(), key=len), np.uint8).astype(np.int32)


def as_text(tokens: np.ndarray, limit: int = 60) -> str:
    """The first bytes of a token sequence, as text on one line."""
    text = bytes(np.asarray(tokens[:limit], np.uint8)).decode("utf-8", "replace")
    return text.replace("\n", " ") + ("..." if len(tokens) > limit else "")


class SequenceSource:
    """A data source of variable-length sequences, stored as one flat array and offsets.

    One flat array (not a list of small ones) is what worker processes map once from shared
    memory instead of unpickling thousands of arrays."""

    def __init__(self, sequences: Sequence[np.ndarray]):
        lengths = [len(sequence) for sequence in sequences]
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.tokens = (np.concatenate(sequences) if sequences else np.zeros(0, np.int32))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, record_key: int) -> np.ndarray:
        return self.tokens[self.offsets[record_key]:self.offsets[record_key + 1]].copy()

    def __repr__(self) -> str:
        return f"SequenceSource({len(self)} sequences)"


def plot_lengths(lengths: Sequence[int], row_length: int = ROW_LENGTH):
    """A histogram of sequence lengths, with the row length marked."""
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(8, 3))
    ax.hist(lengths, bins=range(0, row_length + 1, 4), color="tab:blue")  # last bin ends at T
    ax.axvline(row_length, color="black", linestyle=":", label=f"row length {row_length}")
    ax.set_xlabel("sequence length (bytes)")
    ax.set_ylabel("number of sequences")
    ax.set_title(f"The {len(lengths):,} docstrings of this run: from the standard library's "
                 f"top-level modules,\nthose that fit a row of {row_length} bytes",
                 fontsize="medium")
    ax.legend()
    figure.tight_layout()
    return figure


# -- measuring a way of batching -------------------------------------------------------------
def trace_counter(function: Callable) -> tuple[Callable, list[int]]:
    """`function` wrapped to count how often it is traced (once per new input shape), and
    the one-item list that holds the count. Jit the wrapper: `nnx.jit(counted)`."""
    traces = [0]

    @functools.wraps(function)
    def counted(*args, **kwargs):
        traces[0] += 1
        return function(*args, **kwargs)

    return counted, traces


def fill(batches: Sequence[tuple]) -> float:
    """The share of the batches' slots that hold a real token (segment id > 0): every slot
    the step computes on, the empty rows of a last, shorter batch included."""
    real = sum(int(np.count_nonzero(segments)) for _, segments, _ in batches)
    return real / sum(segments.size for _, segments, _ in batches)


PACKED_FILL = "share of the packed rows' slots holding a real token"
"""The name every sentence gives `packed_fill`, so a learner knows which fill it is."""


def packed_fill(segment_ids: Iterable[np.ndarray]) -> float:
    """The share of the slots of the packed rows that hold a real token (segment id > 0).

    Only rows holding a sequence count. A packer never makes an empty row; the empty rows
    in a batch are the ones a batch function adds to pad out the epoch's last, shorter
    batch to the one shape. Leaving them out gives the same rows the same fill however
    they were batched: course_lib's chain, Grain's packers (which hand out rows, not
    batches) and Grain's `PackAndBatchOperation`. `segment_ids`: 2-D arrays of segment ids,
    one per batch (or one for all the rows)."""
    rows = np.concatenate([np.asarray(segments).reshape(-1, np.shape(segments)[-1])
                           for segments in segment_ids])
    packed = rows[np.any(rows > 0, axis=1)]
    return float(np.mean(packed > 0)) if packed.size else 0.0


def packed_fill_of(batches: Iterable[tuple]) -> float:
    """`packed_fill` of batches of `(tokens, segment_ids, positions)`."""
    return packed_fill(segments for _, segments, _ in batches)


def real_tokens(batches: Sequence[tuple]) -> int:
    return sum(int(np.count_nonzero(segments)) for _, segments, _ in batches)


def segments_of(batches: Iterable[tuple]) -> Iterator[np.ndarray]:
    """The tokens of every segment of every row of packed `(tokens, segment_ids, ...)`
    batches, in order."""
    for tokens, segment_ids, *_ in batches:
        for row_tokens, ids in zip(np.asarray(tokens), np.asarray(segment_ids), strict=True):
            for segment in np.unique(ids[ids > 0]):
                yield row_tokens[ids == segment]


def each_sequence_once(batches: Iterable[tuple], sequences: Sequence[np.ndarray]) -> bool:
    """Whether the packed rows' segments are the sequences themselves, byte for byte, each
    exactly once (compared as multisets: a sequence lost and another doubled is False)."""
    import collections

    def key(tokens: np.ndarray) -> bytes:
        return np.ascontiguousarray(tokens, np.int32).tobytes()

    return (collections.Counter(map(key, segments_of(batches)))
            == collections.Counter(map(key, sequences)))


def segments_well_formed(segment_ids: np.ndarray, positions: np.ndarray) -> dict[str, bool]:
    """Checks of packed rows: `"ids"`, in each row the segment ids are 1, 2, 3, ... in
    order of appearance, each one contiguous, and padding (0) only after the last; and
    `"positions"`, positions start at 0 at each segment's first slot and go up by 1 to its
    end (0 on padding)."""
    ids_ok, positions_ok = True, True
    for ids, where in zip(np.asarray(segment_ids), np.asarray(positions), strict=True):
        real = ids[ids > 0]
        starts = np.flatnonzero(np.diff(ids, prepend=0) != 0)
        starts = starts[ids[starts] > 0]
        count = int(ids.max())
        ids_ok &= (np.array_equal(ids[starts], np.arange(1, count + 1))
                   and bool(np.all(ids[len(real):] == 0)) and len(starts) == count)
        expected = np.zeros_like(where)
        for start, segment in zip(starts, ids[starts], strict=True):
            slots = np.flatnonzero(ids == segment)
            expected[slots] = slots - start
        positions_ok &= bool(np.array_equal(where, expected))
    return {"ids": bool(ids_ok), "positions": bool(positions_ok)}


def run_step(step: Callable, state: tuple, batches: Sequence[tuple]) -> float:
    """Seconds for `step(*state, tokens, segment_ids, positions)` over every batch. `state`
    is what the step takes first: `(model, optimizer)` for `sequence_model.train_step`."""
    import jax

    start = time.perf_counter()
    for tokens, segments, positions in batches:
        jax.block_until_ready(step(*state, tokens, segments, positions))
    return time.perf_counter() - start


def compile_and_run(step_function: Callable, state: tuple, batches: Sequence[tuple]) -> dict:
    """A fresh jit of `step_function` over `batches` twice: the first pass compiles every new
    shape, the second finds them compiled. Returns traces and both times."""
    from flax import nnx

    counted, traces = trace_counter(step_function)
    step = nnx.jit(counted)
    first = run_step(step, state, batches)
    second = run_step(step, state, batches)
    return {"traces": traces[0], "first_pass_s": first, "compiled_pass_s": second,
            "shapes": len({batch[0].shape for batch in batches})}




def plot_compile_passes(result: Mapping[str, Any], num_batches: int, title: str):
    """The two passes of `compile_and_run` side by side: the first (traces and compiles
    each new shape) and the same batches once compiled. Labels on two lines, so that they
    never run into each other."""
    import matplotlib.pyplot as plt

    from course_lib.course.basics import bar_chart

    figure, ax = plt.subplots(figsize=(5.6, 3.4))
    bar_chart({"first pass\n(traces and compiles)": result["first_pass_s"],
               f"the same {num_batches} batches,\nalready compiled": result["compiled_pass_s"]},
              ylabel="seconds", value_format=format_duration, title=title, ax=ax)
    figure.tight_layout()
    return figure


def compile_sentence(traces: int, first_pass_s: float, compiled_pass_s: float,
                     batches: int) -> str:
    """What tracing and compiling cost in the first pass (their sum: the difference of the
    two passes holds both), from the two passes' times (each timed once,
    so the course's one margin rule judges them with its 5% floor)."""
    compiling = first_pass_s - compiled_pass_s
    head = (f"{batches} batches gave {traces} trace{'s' if traces != 1 else ''}: the first "
            f"pass took {format_duration(first_pass_s)}, the same batches once compiled "
            f"{format_duration(compiled_pass_s)}.")
    outcome = judge(Estimate(first_pass_s, np.nan, 1), Estimate(compiled_pass_s, np.nan, 1))
    if outcome == BETTER:
        return (f"{head} The first pass was the faster one, by more than the {NOISE_FLOOR:.0%} "
                "margin of two single timings: the machine was busier during the second; "
                "run the cell again.")
    if outcome != WORSE:
        return (f"{head} Tracing and compiling cost nothing measurable here: the two passes "
                f"are the same within the noise (margin {NOISE_FLOOR:.0%} for two single timings).")
    share = compiling / first_pass_s
    if share >= 0.5:
        return (f"{head} Tracing and compiling took {share:.1%} of the first pass: this loop "
                "spends more time tracing and compiling than computing.")
    return (f"{head} Tracing and compiling took {share:.0%} of the first pass, a cost paid "
            "again for every new shape.")


def shown_percent(share: float, decimals: int = 0) -> float:
    """A share as the lesson prints it, in percent: `shown_percent(0.8664, 1)` is 86.6, the
    number behind "86.6%"."""
    return float(f"{share:.{decimals}%}".rstrip("%"))


def points_between(larger: float, smaller: float, decimals: int = 0) -> float:
    """The difference of two shares in percentage points, from the figures as printed (each
    rounded to `decimals`), so that a difference printed beside them adds up: 87.5% and
    86.6% are 0.9 points apart even when the unrounded shares are 0.8 apart."""
    return round(shown_percent(larger, decimals) - shown_percent(smaller, decimals), decimals)


def shown_times(ratio: float) -> float:
    """A ratio as `format_times` prints it, as a number: `shown_times(1.2947)` is 1.29, the
    number behind "1.29x", so that a ratio of printed ratios agrees with them."""
    return float(format_times(ratio).removeprefix("about ").rstrip("x").replace(",", ""))


def format_points(points: float, decimals: int = 0) -> str:
    """ "1 point", "27 points", "0.9 points": a difference of percentages, as printed."""
    return f"{points:.{decimals}f} point{'' if points == 1 else 's'}"


def _possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def _step_size(larger: float, name: str) -> str:
    """What may explain a way of batching that gains less than its padding says, from how
    large its steps are (`larger`: its slots per step over `name`'s). Nothing here isolates
    the cause, and the sentence says so."""
    if larger > 1.05:
        return (f"its steps hold {format_times(larger)} the slots of {_possessive(name)}, and "
                "attention's work per slot grows with the row length, so its slots may cost "
                "more; this run does not isolate that cause.")
    return (f"its steps are no larger than {_possessive(name)}, so neither padding nor row "
            "length explains it, and this run does not say what does; run the cell again.")


def speed_ratio(rates: Sequence[float], baseline: Sequence[float]) -> Estimate:
    """How many times `baseline`'s throughput `rates` is, with its standard error. Passes
    timed in turn (as many of each, `interleaved_tokens_per_second`) are paired round by
    round, and the median of the rounds' ratios is taken, so that a machine slower in one
    round than in another moves both sides of that round's ratio alike; otherwise the ratio
    of the medians, with their errors combined."""
    if len(rates) == len(baseline) and len(rates) > 1:
        ratio = Estimate.median_of([a / b for a, b in zip(rates, baseline, strict=True)])
        return dataclasses.replace(ratio, statistic="median of the rounds' ratios")
    return Estimate.median_of(rates).ratio(Estimate.median_of(baseline))


def _faster(rates: Sequence[float], baseline: Sequence[float]) -> tuple[str, float]:
    """The course's one verdict on two throughputs (higher is better), from `speed_ratio`
    set against 1 (the same speed), and the margin it used."""
    measured, same = speed_ratio(rates, baseline), Estimate.once(1.0)
    return (judge(measured, same, lower_is_better=False), relative_margin(measured, same))


def feed_summary(batches: Sequence[tuple]) -> dict[str, Any]:
    """What `throughput_sentence` and `feed_table` need to know of one way of batching, counted
    from its batches: the steps (one per batch), the distinct batch shapes, the real tokens,
    the slots the step computes on, and their ratio, the fill."""
    tokens = real_tokens(batches)
    slots = sum(int(segments.size) for _, segments, _ in batches)
    return {"steps": len(batches), "shapes": sorted({tuple(batch[0].shape) for batch in batches}),
            "tokens": tokens, "slots": slots, "fill": tokens / slots}


def interleaved_tokens_per_second(step: Callable, state: tuple,
                                  ways: Mapping[str, Sequence[tuple]], repeats: int,
                                  desc: str = "timing") -> dict[str, list[float]]:
    """Real tokens per second of a compiled step over each way's batches, `repeats` passes
    each, timed round-robin: pass k of every way runs before pass k + 1 of any, and each
    round starts with the next way, so that a machine that speeds up or slows down during
    the cell hits every way alike. Every shape is compiled before the clock starts."""
    from course_lib.course.bottleneck import progress

    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} must be an integer of at least 1, e.g. 5.")
    names = list(ways)
    for batches in ways.values():
        run_step(step, state, list({batch[0].shape: batch for batch in batches}.values()))
    counts = {name: real_tokens(batches) for name, batches in ways.items()}
    order = [names[(round_ + k) % len(names)] for round_ in range(repeats)
             for k in range(len(names))]
    rates: dict[str, list[float]] = {name: [] for name in names}
    for name in progress(order, total=len(order), desc=desc):
        rates[name].append(counts[name] / run_step(step, state, ways[name]))
    return rates


def _step_time(rates: Sequence[float], summary: Mapping[str, Any]) -> Estimate:
    """Seconds per step of one way of batching, from its passes' real tokens per second."""
    return Estimate.median_of([summary["tokens"] / rate / summary["steps"] for rate in rates])


def _shapes(shapes: Sequence[tuple]) -> str:
    if len(shapes) == 1:
        return str(tuple(shapes[0]))
    return f"{len(shapes)} shapes, {tuple(shapes[0])} to {tuple(shapes[-1])}"


def feed_table(rates: Mapping[str, Sequence[float]],
               summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per way of batching, from the run: its steps, batch shapes, slots per step,
    fill, time per step and real tokens per second (medians of the passes)."""
    lines = [f"{'way of batching':<15} {'steps':>5}  {'batch shapes':<29} {'slots/step':>10} "
             f"{'filled':>6} {'time/step':>9} {'real tokens/s':>13}"]
    for name, summary in summaries.items():
        lines.append(
            f"{name:<15} {summary['steps']:>5}  {_shapes(summary['shapes']):<29} "
            f"{summary['slots'] / summary['steps']:>10,.0f} {summary['fill']:>6.0%} "
            f"{format_seconds(_step_time(rates[name], summary).value):>9} "
            f"{format_rate(statistics.median(rates[name])):>13}")
    lines.append("(filled: share of the slots holding a real token; slots/step: their mean; "
                 f"time/step and real tokens/s: medians of {len(next(iter(rates.values())))} "
                 "passes)")
    return "\n".join(lines)


def _cheaper_slots(larger: float, times: tuple[float, float],
                   summaries: tuple[Mapping[str, Any], Mapping[str, Any]],
                   names: tuple[str, str]) -> str:
    """Why the slots of `names[0]` cost less than those of `names[1]`, from the size and the
    time of their steps (`larger`: slots per step of the first over the second's; `times`:
    their seconds per step). The cause is named as a possibility only: nothing in the run
    changes the size of the steps alone."""
    (mine, other), (subject, name) = summaries, names
    per_step = [summary["slots"] / summary["steps"] for summary in (other, mine)]
    sizes = (f"a step of {name} holds {format_times(1 / larger)} the slots of one of {subject} "
             f"on average ({per_step[0]:,.0f} against {per_step[1]:,.0f} slots per step) "
             f"and takes {format_times(times[1] / times[0])} its time (the table's medians, "
             f"{format_duration(times[1])} against {format_duration(times[0])}, whose ratios "
             "need not match the rounds' exactly)")
    if larger > 1.05:
        shapes = len(other.get("shapes", ()))
        return (f"{sizes}. Its smaller steps may be why, if part of a step's cost does not "
                "shrink with the step (for a model this small on a CPU, dispatching the jitted "
                "call and the Python loop)" +
                (f", but {name} also alternates {shapes} compiled shapes, and this run does "
                 "not separate the smaller steps from the alternating shapes." if shapes > 1
                 else "; this run does not isolate that part."))
    if larger < 1 / 1.05:
        return (f"{sizes}; its longer rows may cost more per slot, as attention's work per slot "
                "grows with the row length; this run does not isolate that cause.")
    return (f"{sizes}: steps of about one size, so this run does not say what makes its slots "
            "cost more; run the cell again.")


def throughput_sentence(rates: Mapping[str, Sequence[float]],
                        summaries: Mapping[str, Mapping[str, Any]],
                        subject: str = "packing") -> str:
    """Real tokens per second of `subject` against each other way of batching, and how much
    of each ratio the padding explains, every comparison by the course's one margin rule.

    All ways carry the same real tokens, so if time followed the slots computed, the speed
    ratio would be the ratio of fills (real tokens per slot). The measured ratio
    (`speed_ratio`: for passes timed in turn, the median of the rounds' ratios) is judged
    against that. Where both ways feed
    batches of one and the same shape, a step costs the same on both and the fill ratio
    accounts for everything: a leftover beyond the margin is not the steps' doing, and the
    sentence says this run cannot tell what it is. Where the shapes differ, a leftover goes
    with the size of the steps (measured: slots and time per step), whose cause this run
    does not isolate. Within the noise, or too noisy to tell, nothing is concluded. When
    the rounds' ratio and the ratio of the table's medians differ beyond the margin, the
    passes disagree among themselves and nothing is concluded either.
    `summaries`: `feed_summary` of each way's batches."""
    medians = {name: statistics.median(values) for name, values in rates.items()}
    listing = ", ".join(f"{name} {format_rate(medians[name])}" for name in rates)
    passes = len(rates[subject])
    paired = passes > 1 and all(len(values) == passes for values in rates.values())
    how = (f"each ratio below is the median of the {passes} rounds' ratios" if paired else
           "each ratio below is the ratio of these medians")
    parts = [f"Real tokens per second (median of {passes} passes, timed in turn): {listing}; "
             f"{how}."]
    mine = summaries[subject]
    for name in rates:
        if name == subject:
            continue
        other = summaries[name]
        outcome, margin = _faster(rates[subject], rates[name])
        measured = speed_ratio(rates[subject], rates[name])
        ratio = measured.value
        padding = mine["fill"] / other["fill"]
        # slots per step of subject over name's
        larger = (mine["slots"] / mine["steps"]) / (other["slots"] / other["steps"])
        slots = (f"{mine['fill']:.0%} of {_possessive(subject)} slots hold real tokens "
                 f"against {other['fill']:.0%} of {_possessive(name)}")
        one_shape = len(mine["shapes"]) == 1 and list(mine["shapes"]) == list(other["shapes"])
        times = (_step_time(rates[subject], mine).value, _step_time(rates[name], other).value)
        shape = _shapes(mine["shapes"])
        step_times = (f"median {format_duration(times[0])} against {format_duration(times[1])} "
                      "per step")
        unexplained = (f"both feed batches of one shape, {shape}, and so do the same work per "
                       f"step, yet a step took {step_times}: neither the padding nor the number "
                       "of steps explains that, and this run does not say what does; run the "
                       "cell again.")
        table = medians[subject] / medians[name]  # what the table's two medians give
        if paired and judge(Estimate.once(table), measured,
                            lower_is_better=False) in (BETTER, WORSE):
            apart = relative_margin(Estimate.once(table), measured)
            parts.append(f"Against {name}, the rounds' ratios give {format_times(ratio)} but the "
                         f"table's medians {format_times(table)}, further apart than the margin "
                         f"({apart:.0%}): the passes of this run disagree among themselves "
                         "(the machine's speed changed from pass to pass), so it cannot say "
                         "how much of the gap the padding explains; run the cell again.")
            continue
        if outcome == TOO_NOISY_TO_TELL:
            parts.append(f"Against {name}, {subject} is too noisy to tell ({format_times(ratio)}, "
                         f"margin {margin:.0%}), though {slots}: this run names no cause.")
            continue
        if outcome == SAME:
            tail = f": {unexplained}" if one_shape else "."
            parts.append(f"Against {name}, {subject} is the same within the noise "
                         f"({format_times(ratio)}, margin {margin:.0%}), though {slots}{tail}")
            continue
        if outcome == WORSE:
            why = unexplained if one_shape else _step_size(larger, name)
            parts.append(f"{subject.capitalize()} is {format_times(1 / ratio)} slower than "
                         f"{name} (margin {margin:.0%}), although {slots}: {why}")
            continue
        explained = judge(measured, Estimate.once(padding), lower_is_better=False)
        left = relative_margin(measured, Estimate.once(padding))
        leftover = shown_times(ratio) / shown_times(padding)  # of the ratios printed
        head = (f"{subject.capitalize()} is {format_times(ratio)} {name}, against "
                f"{format_times(padding)} from the padding alone ({slots})")
        if explained == TOO_NOISY_TO_TELL:
            parts.append(f"{head}, but the two ratios are too noisy to tell apart (margin "
                         f"{left:.0%}): this run does not say how much of the gap the padding "
                         "explains.")
        elif explained == SAME and one_shape:
            parts.append(f"{head}: within the noise (margin {left:.0%}), as it should be: both "
                         f"feed batches of one shape, {shape}, so a step does the same work on "
                         f"both ({step_times}), and the padding accounts for the whole gap; "
                         f"{subject} takes fewer steps ({mine['steps']} against "
                         f"{other['steps']}) only because it fills more of each.")
        elif explained == SAME:
            if abs(math.log(leftover)) > abs(math.log(padding)):  # the rest outweighs it
                parts.append(f"{head}: within the noise (margin {left:.0%}), but what the "
                             f"padding leaves ({format_times(leftover)}) is more than the "
                             f"padding explains ({format_times(padding)}), so this run cannot "
                             "say that the padding explains the gap.")
            else:
                parts.append(f"{head}: within the noise (margin {left:.0%}), so the padding "
                             "explains the gap.")
        elif one_shape:
            direction = "more" if explained == BETTER else "less"
            parts.append(f"{head}: {direction} than the padding gives, beyond the margin of "
                         f"{left:.0%}, although {unexplained}")
        elif explained == BETTER:
            parts.append(f"{head}: more than the padding explains (margin {left:.0%}). The other "
                         f"{format_times(leftover)} (of the two ratios above) is a higher cost "
                         "per slot: "
                         f"{_cheaper_slots(larger, times, (mine, other), (subject, name))}")
        else:
            parts.append(f"{head}: less than the padding gives, beyond the margin of "
                         f"{left:.0%}: {_step_size(larger, name)}")
    return " ".join(parts)


def plot_throughput(rates: Mapping[str, Sequence[float]], subject: str = "packing"):
    """Real tokens per second of each way of batching: a bar at the median, a dot for every
    pass. `subject` is drawn in orange only where it is faster than every other way by the
    course's one margin rule (as in `throughput_sentence`), so a tie is never highlighted."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import StrMethodFormatter

    medians = {name: statistics.median(values) for name, values in rates.items()}
    clear = all(_faster(rates[subject], rates[name])[0] == BETTER
                for name in rates if name != subject)
    names = list(rates)
    figure, ax = plt.subplots(figsize=(6.4, 3.6))
    colors = ["tab:orange" if name == subject and clear else "tab:blue" for name in names]
    bars = ax.bar(names, [medians[name] for name in names], color=colors, alpha=0.8)
    ax.bar_label(bars, labels=[f"{medians[name]:,.0f}" for name in names],
                 label_type="center", color="white")  # inside: the dots sit on the tops
    for index, name in enumerate(names):
        ax.plot([index] * len(rates[name]), rates[name], "o", color="black", markersize=4,
                label="one pass" if index == 0 else None)
    ax.set_ylabel("real tokens per second")
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))  # 160,000 as the bars print
    orange = ("; orange: faster than every other\nby the course's margin" if clear else "")
    ax.set_title(f"The same model and sequences, three ways to batch\n(bars: median of "
                 f"{len(rates[subject])} passes; dots: each pass{orange})", fontsize="medium")
    ax.legend(loc="upper left", fontsize="small")
    ax.margins(y=0.2)
    figure.tight_layout()
    return figure


def loss_tokens(batches: Sequence[tuple]) -> list[int]:
    """How many positions the next-token loss mask keeps in each batch."""
    return [int(np.count_nonzero((segments[:, 1:] == segments[:, :-1]) & (segments[:, 1:] > 0)))
            for _, segments, _ in batches]


def normalisation_sentence(counts: Mapping[str, Sequence[int]]) -> str:
    """How much the loss-counted tokens per batch vary, and what a per-batch mean does to the
    weight of one token."""
    parts, ratios, last = [], {}, []
    for name, values in counts.items():
        low, high = min(values), max(values)
        ratios[name] = high / max(low, 1)
        if ratios[name] > 1.05 and values.index(low) == len(values) - 1:
            last.append(name)
        parts.append(f"{name} {low:,} to {high:,} (median {statistics.median(values):,.0f})")
    head = f"Tokens the loss counts per batch: {'; '.join(parts)}."
    uneven = {name: ratio for name, ratio in ratios.items() if ratio > 1.05}
    if not uneven:
        return (f"{head} Almost the same count in every batch, so a mean per batch weighs "
                "every token alike.")
    weights = ", ".join(f"{name} {format_times(ratio)}" for name, ratio in uneven.items())
    even = [name for name in ratios if name not in uneven]
    even_part = (f" ({' and '.join(even)}: almost the same count in every batch)"
                 if even else "")
    def without_last(name):
        values = counts[name][:-1]
        return (f"; without it, {min(values):,} to {max(values):,}, "
                f"{format_times(max(values) / max(min(values), 1))}")

    last_part = "".join(f" ({name}: the sparsest batch is the epoch's last, shorter one"
                        f"{without_last(name)})" for name in last)
    return (f"{head} `loss_fn` divides each batch's sum by that batch's count, so one token "
            f"of a way's sparsest batch weighs this many times one token of its fullest: "
            f"{weights}{even_part}{last_part}. "
            "To weigh every token alike, divide each batch's sum by one fixed number (the most "
            "a batch can hold), or add sums and counts over several batches (across "
            "accumulation steps and devices) before dividing.")


def mask_cost_sentence(batch_size: int, heads: int, lengths: Sequence[int]) -> str:
    """The memory of the boolean (B, 1, T, T) mask and of the float32 attention scores
    (B, heads, T, T), which grow with T squared, at each row length."""
    listing = "; ".join(
        f"T = {length:,}: mask {format_bytes(batch_size * length * length)}, scores "
        f"{format_bytes(4 * batch_size * heads * length * length)}" for length in lengths)
    return (f"For a batch of {batch_size} rows and {heads} heads, {listing}. Both grow with "
            "the square of the row length, while the segment ids they come from grow with "
            "the length.")


# -- buckets ---------------------------------------------------------------------------------
def bucket_lengths(count: int, row_length: int = ROW_LENGTH) -> list[int]:
    """`count` evenly spaced bucket lengths up to the row length: 1 -> [128],
    4 -> [32, 64, 96, 128]."""
    return sorted({max(1, row_length * (k + 1) // count) for k in range(count)})


def bucket_tradeoff(source, counts: Sequence[int], windows: Sequence[int] = (1, 32),
                    batch_size: int = BATCH_SIZE, row_length: int = ROW_LENGTH,
                    seed: int = 0) -> dict[int, dict]:
    """For each grouping window and each number of buckets (None: pad to the longest), the
    traces of a jitted function over one pass of `BucketByLength` batches (a real jax trace
    count), the share of padding, the median spread of lengths inside a batch, and the
    share of batches padded to the largest bucket (None without buckets)."""
    import jax
    import jax.numpy as jnp

    import course_lib as grain

    results: dict[int, dict] = {}
    for window in windows:
        results[window] = {}
        for count in [*counts, None]:
            buckets = None if count is None else bucket_lengths(count, row_length)
            batches = list(loader_of(source, grain.BucketByLength(
                buckets, batch_size, window_batches=window), seed=seed))
            counted, traces = trace_counter(lambda tokens, segments: jnp.sum(tokens * segments))
            reduce = jax.jit(counted)
            for tokens, segments, _ in batches:
                reduce(tokens, segments)
            in_largest = (None if buckets is None else
                          float(np.mean([batch[0].shape[1] == buckets[-1] for batch in batches])))
            results[window][count] = {"traces": traces[0], "padding": 1 - fill(batches),
                                      "spread": length_spread(batches), "in_largest": in_largest}
    return results


def length_spread(batches: Sequence[tuple]) -> float:
    """The median, over batches, of longest minus shortest sequence in the batch."""
    spreads = []
    for _, segments, _ in batches:
        lengths = (segments > 0).sum(axis=1)
        lengths = lengths[lengths > 0]
        spreads.append(int(lengths.max() - lengths.min()))
    return float(np.median(spreads))


def plot_bucket_tradeoff(results: Mapping[int, Mapping[int | None, Mapping[str, float]]],
                         packed_padding: float):
    """Padding against compilations: one point per number of buckets, a line per grouping
    window, pad-to-longest at the end of each line, packing as a star."""
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(8, 4))
    colors = iter(["tab:red", "tab:blue", "tab:purple", "tab:orange"])
    labels: dict[tuple, tuple] = {}  # label -> (its point, the colours of lines through it)
    for window, by_count in results.items():
        color = next(colors)
        counts = list(by_count)
        label = ("stream order (window_batches=1)" if window == 1 else
                 f"grouped by length (window_batches={window})")
        ax.plot([by_count[c]["traces"] for c in counts],
                [100 * by_count[c]["padding"] for c in counts], marker="o", color=color,
                label=label)
        for count in counts:
            text = "longest" if count is None else str(count)
            point = (by_count[count]["traces"], 100 * by_count[count]["padding"])
            key = (text, point[0], round(point[1]))  # the same label at the same place
            labels.setdefault(key, (point, []))[1].append(color)
    for (text, *_), (point, lines) in labels.items():
        color = lines[0] if len(lines) == 1 else "black"  # lines that meet: one label
        ax.annotate(text, point, textcoords="offset points", xytext=(4, 5), fontsize=8,
                    color=color)
    ax.plot([1], [100 * packed_padding], marker="*", markersize=14, color="tab:green",
            linestyle="none", label="packing")
    ax.set_xscale("log")
    most = max(point["traces"] for by_count in results.values() for point in by_count.values())
    ticks = [2**k for k in range(max(1, most).bit_length() + 1)]
    ax.set_xticks(ticks, [str(tick) for tick in ticks])
    ax.minorticks_off()
    ax.set_xlabel("traces of a jitted function = compilations, one per batch shape (log scale)")
    ax.set_ylabel("padding (% of slots)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title("Padding against compilations: one point per number of buckets\n"
                 "(\"longest\": each batch padded to its own longest sequence)", fontsize=10)
    figure.tight_layout()
    return figure


def bucket_sentence(results: Mapping[int, Mapping[int | None, Mapping[str, float]]],
                    packed_padding: float, count: int, window: int) -> str:
    """What grouping did to the padding of `count` buckets, and what it costs, from the
    trade-off's numbers; each comparison said as better, the same or worse."""
    stream, grouped = results[1][count], results[window][count]
    fixed = (f" (one fixed length: {results[1][1]['padding']:.0%})" if 1 in results[1] else "")
    parts = [f"With {count} buckets in stream order, {stream['padding']:.0%} of the slots are "
             f"padding{fixed}: {stream['in_largest']:.0%} of the batches hold a sequence long "
             "enough for the largest bucket."]
    difference = points_between(stream["padding"], grouped["padding"])
    if difference >= 1:
        parts.append(f"Grouped by length in windows of {window} batches, {grouped['padding']:.0%}"
                     f", for {grouped['traces']} traces: grouping cut the padding by "
                     f"{format_points(difference)}, because a batch now holds sequences of "
                     "similar length.")
    elif difference <= -1:
        parts.append(f"Grouped by length in windows of {window} batches, "
                     f"{grouped['padding']:.0%}: grouping padded more here, so these lengths "
                     "gain nothing from it.")
    else:
        parts.append(f"Grouped by length in windows of {window} batches, "
                     f"{grouped['padding']:.0%}: grouping made no difference here.")
    longest = results[window][None]
    if points_between(packed_padding, longest["padding"]) >= 1:  # less, as printed
        parts.append(f"Grouped and padded to its longest, a batch wastes only "
                     f"{longest['padding']:.0%}, less than packing's {packed_padding:.0%}, but "
                     f"at {longest['traces']} traces; packing gets {packed_padding:.0%} with 1.")
    else:
        parts.append(f"Even grouped and padded to its longest ({longest['traces']} traces), a "
                     f"batch wastes {longest['padding']:.0%}, no less than packing's "
                     f"{packed_padding:.0%} with 1 trace.")
    return " ".join(parts)


def spread_sentence(results: Mapping[int, Mapping[int | None, Mapping[str, float]]],
                    count: int, window: int) -> str:
    """The price of grouping: how alike the lengths inside a batch become."""
    stream, grouped = results[1][count]["spread"], results[window][count]["spread"]
    head = (f"Inside a batch, longest minus shortest sequence: {stream:.0f} bytes in stream "
            f"order, {grouped:.0f} grouped (medians over the epoch).")
    if grouped < stream:
        return (f"{head} That is the price: which sequences share a batch, and how many real "
                "tokens a step sees, now depends on their length, not only on the shuffle.")
    return f"{head} Grouping did not make batches more alike here, so it costs nothing either."


def loader_of(source, batching, *, seed: int = 0, worker_count: int = 0, num_epochs=1):
    """The lesson's loader: shuffled sequences, then one batching operation."""
    import course_lib as grain

    sampler = grain.IndexSampler(len(source), shuffle=True, seed=seed, num_epochs=num_epochs)
    return grain.DataLoader(data_source=source, sampler=sampler, operations=[batching],
                            worker_count=worker_count)


# -- the proof, determinism and resume -------------------------------------------------------
def change_each_sequence(model, batch: tuple, row: int = 0) -> dict[str, float]:
    """Change the tokens of each sequence of `row` in turn and measure how far the model's
    outputs (logits) move: the changed sequence's own (the smallest of these largest moves,
    so that every change counts), the other sequences' with the segment mask, and, with
    every real token put in one segment (the causal mask only: a sequence can then see the
    ones before it, never the ones after), the later sequences' and the earlier ones'."""
    tokens, segment_ids, positions = (np.asarray(part) for part in batch)
    one_segment = (segment_ids > 0).astype(np.int32)

    def outputs(tokens, ids):
        return np.asarray(model(tokens, ids, positions))[row]

    before, unmasked_before = outputs(tokens, segment_ids), outputs(tokens, one_segment)
    own, others, unmasked, earlier_moved = [], [], [], []
    sequences = int(segment_ids[row].max())
    for segment in range(1, sequences + 1):
        this = segment_ids[row] == segment
        rest = (segment_ids[row] > 0) & ~this
        later = segment_ids[row] > segment
        earlier = (segment_ids[row] > 0) & (segment_ids[row] < segment)
        changed_tokens = tokens.copy()
        changed_tokens[row, this] = (changed_tokens[row, this] + 97) % 255 + 1  # still bytes
        moved = np.abs(outputs(changed_tokens, segment_ids) - before)
        own.append(float(moved[this].max()))
        others.append(float(moved[rest].max()) if rest.any() else 0.0)
        shifted = np.abs(outputs(changed_tokens, one_segment) - unmasked_before)
        if later.any():
            unmasked.append(float(shifted[later].max()))
        if earlier.any():
            earlier_moved.append(float(shifted[earlier].max()))
    return {"sequences": sequences, "changed": min(own), "others": max(others),
            "unmasked_others": max(unmasked, default=0.0),
            "unmasked_earlier": max(earlier_moved, default=0.0)}


def batch_with_segments(batches: Sequence[tuple], at_least: int = 3) -> tuple[tuple, int]:
    """The first batch, and its row, that holds at least `at_least` sequences (else the row
    with the most sequences of all the batches), for a proof that needs neighbours."""
    best = (batches[0], 0, 0)
    for batch in batches:
        segment_ids = np.asarray(batch[1])
        row = row_with_segments(segment_ids, at_least)
        count = int(segment_ids[row].max())
        if count >= at_least:
            return batch, row
        if count > best[2]:
            best = (batch, row, count)
    return best[0], best[1]


def row_with_segments(segment_ids: np.ndarray, at_least: int = 3) -> int:
    """The first row of a batch that holds at least `at_least` sequences (else the fullest)."""
    counts = segment_ids.max(axis=1)
    enough = np.flatnonzero(counts >= at_least)
    return int(enough[0]) if enough.size else int(np.argmax(counts))


def row_of_segments(batches: Sequence[tuple], at_least: int = 3) -> np.ndarray:
    """The segment ids of a packed row, over all `batches`, that holds at least `at_least`
    sequences, choosing the one whose shortest sequence is longest, so that every triangle
    of its mask can be seen (else the row with the most sequences)."""
    rows = [segments[row] for _, segments, _ in batches for row in range(len(segments))]
    enough = [ids for ids in rows if ids.max() >= at_least]
    if not enough:
        return max(rows, key=lambda ids: int(ids.max()))
    return max(enough, key=lambda ids: min(np.count_nonzero(ids == segment)
                                           for segment in range(1, int(ids.max()) + 1)))


def plot_mask(segment_ids: np.ndarray):
    """The attention mask of one whole packed row, from its segment ids: each allowed
    query-key pair coloured by its segment, masked pairs white, with a key."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    from course_lib.sequence_model import attention_mask

    ids = np.asarray(segment_ids)[None, :]
    mask = np.asarray(attention_mask(ids))[0, 0]
    count = int(ids.max())
    colours = ["white", *[plt.get_cmap("tab10")(k % 10) for k in range(count)]]
    picture = np.where(mask, ids[0][:, None], 0)  # the query's segment where allowed, else 0
    figure, ax = plt.subplots(figsize=(6.4, 5.2))
    ax.imshow(picture, cmap=ListedColormap(colours), vmin=-0.5, vmax=count + 0.5,
              interpolation="nearest")
    ax.set_xlabel("key slot (may be looked at)")
    ax.set_ylabel("query slot (looks)")
    for start in np.flatnonzero(np.diff(ids[0], prepend=-1)):  # every boundary
        ax.axvline(start - 0.5, color="0.8", linewidth=0.5)
        ax.axhline(start - 0.5, color="0.8", linewidth=0.5)
    key = [Patch(color=colours[k], label=f"sequence {k} attends to itself") for k in
           range(1, count + 1)]
    key.append(Patch(facecolor="white", edgecolor="0.5", label="masked: other sequence, "
                     "a later slot, or padding"))
    ax.legend(handles=key, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    padding = int(np.sum(ids[0] == 0))
    ax.set_title(f"Who may attend to whom in one packed row of {ids.shape[1]} slots\n"
                 f"({count} sequences, {padding} padding slots; thin lines are boundaries)",
                 fontsize=10)
    figure.tight_layout()
    return figure


def proof_sentence(changed: float, others: float, unmasked_others: float,
                   sequences: int, unmasked_earlier: float) -> str:
    """What changing each sequence of a row in turn (`change_each_sequence`) did to its own
    outputs and to the other sequences'."""
    tolerance = 1e-5
    if changed <= tolerance:
        return ("Changing a sequence did not change its own outputs: the test is void. "
                "Change more of its tokens.")
    masked = ("the other sequences' outputs did not change (largest difference below "
              f"{tolerance:g})" if others <= tolerance else
              "the other sequences' outputs changed too: the mask lets them see each other")
    unmasked = ("without the segment mask the sequences after it change" if unmasked_others >
                tolerance else "without the segment mask they happen not to change either")
    unmasked += (" and those before it do not (the causal mask)" if unmasked_earlier <=
                 tolerance else " and so do those before it: the causal mask lets a slot see "
                 "later ones")
    head = ("Changing each sequence of the row in turn: with the segment mask, the changed "
            f"sequence's own outputs moved every time, and {masked}; {unmasked}.")
    if others > tolerance or unmasked_earlier > tolerance:
        return (f"{head} So the packed sequences are not computed as if alone: fix the mask "
                "before training on packed rows.")
    if unmasked_others <= tolerance or sequences < 2:
        return (f"{head} So this row cannot tell the mask's work from chance: use a row that "
                "holds several sequences, and run it again.")
    return (f"{head} So no sequence's outputs depend on the bytes of the other sequences in "
            "its row: the segment mask keeps them apart.")


def change_sizes_sentence(changed: float, others: float, unmasked_others: float,
                          sequences: int, unmasked_earlier: float) -> str:
    """How large the changes `proof_sentence` judges are, in logits: the later sequences'
    largest change without the segment mask as a share of the smallest largest change of a
    changed sequence's own outputs, so that "they change" has a size."""
    line = (f"Largest change of any logit: at least {changed:.3g} in each of the {sequences} "
            f"changed sequences' own outputs; {others:.2g} in the other sequences' outputs "
            f"with the segment mask; without it, up to {unmasked_others:.3g} in the sequences "
            "after the changed one")
    if changed > 0:
        line += f" ({unmasked_others / changed:.0%} of the smallest own change)"
    return line + f" and {unmasked_earlier:.2g} in those before it (the causal mask)."


def digest(batches) -> str:
    """One short fingerprint of every array of every batch, in order."""
    hasher = hashlib.sha256()
    for batch in batches:
        for part in batch:
            array = np.ascontiguousarray(part)
            hasher.update(str((array.shape, array.dtype.str)).encode())
            hasher.update(array.tobytes())
    return hasher.hexdigest()[:12]


_GRAIN_PACKING_SCRIPT = """
import gc, json, sys
from absl import flags
flags.FLAGS.mark_as_parsed()  # Grain's workers read an absl flag (lesson 11)
import numpy as np
import grain.python as grain
from course_lib.course.variable_length import (SequenceSource, digest, docstring_sequences,
                                              packed_fill_of)
limit, row_length, batch_size, resume_after = (int(argument) for argument in sys.argv[1:])
source = SequenceSource(docstring_sequences(row_length, limit or None))

class Source(grain.RandomAccessDataSource):
    def __len__(self):
        return len(source)
    def __getitem__(self, record_key):
        return source[record_key]
    def __repr__(self):  # what Grain compares when it restores a state
        return repr(source)

def loader(worker_count):
    return grain.DataLoader(
        data_source=Source(),
        sampler=grain.IndexSampler(len(source), shard_options=grain.NoSharding(),
                                   shuffle=True, num_epochs=1, seed=0),
        operations=[grain.experimental.PackAndBatchOperation(row_length, batch_size)],
        worker_count=worker_count)

report = {}
for worker_count in (0, 2):
    batches = [tuple(batch) for batch in loader(worker_count)]
    report[worker_count] = {"batches": len(batches), "digest": digest(batches),
                            "fill": packed_fill_of(batches)}
    if worker_count == 0:
        uninterrupted_rest = digest(batches[resume_after:])
    del batches  # release every batch (and its shared memory) before the next run
iterator = iter(loader(0))
for _ in range(resume_after):
    next(iterator)
state = iterator.get_state()
del iterator
resumed = iter(loader(0))
resumed.set_state(state)
rest = [tuple(batch) for batch in resumed]
report["resumed_equal"] = digest(rest) == uninterrupted_rest
report["resumed_batches"] = len(rest)
del resumed, rest
gc.collect()  # nothing of Grain's is held by this script from here to exit
print(json.dumps(report))
"""


def grain_packing(limit: int | None, row_length: int = ROW_LENGTH,
                  batch_size: int = BATCH_SIZE, resume_after: int = 5,
                  timeout: float = 300.0) -> dict | None:
    """Grain's `PackAndBatchOperation` on the same sequences, in a new process: batches and
    fill at 0 and 2 workers, whether a resume after `resume_after` batches continues
    exactly, and how many shared memory segments Python's resource tracker reported leaked
    at exit, with every batch and iterator released (deleted and garbage collected) before
    the script ends. None where Grain is not installed."""
    return _run_grain_script(_GRAIN_PACKING_SCRIPT, (limit, row_length, batch_size, resume_after),
                             timeout)


def _run_grain_script(script: str, arguments: tuple, timeout: float) -> dict | None:
    """Run one of the Grain scripts above in a new Python (`limit` None passed as 0); its
    last line of output is its JSON report, to which the count of shared memory segments
    the resource tracker reported leaked is added. None where Grain is not installed."""
    import importlib.util

    if importlib.util.find_spec("grain") is None:
        return None
    limit, *rest = arguments
    result = subprocess.run([sys.executable, "-c", script, *map(str, (limit or 0, *rest))],
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no error output"])[-1]
        raise RuntimeError(f"Grain exited with code {result.returncode}: {last}")
    report = json.loads(result.stdout.strip().splitlines()[-1])
    report["leaked_segments"] = _leaked_segments(result.stderr)
    return report


def _leaked_segments(stderr: str) -> int:
    """The count in the resource tracker's "There appear to be N leaked shared_memory
    objects" warning, 0 without one."""
    import re

    found = re.findall(r"There appear to be (\d+) leaked shared_memory objects", stderr)
    return sum(map(int, found))


def leak_sentence(leaked: int) -> str:
    """What Python's resource tracker reported at the exit of a Grain script, by count:
    none (in this run), one segment or several (a count that varies between runs)."""
    head = "With every batch and iterator released before exit, Python's resource tracker"
    if not leaked:
        return f"{head} reported no leaked shared memory segment in this run."
    return (f"{head} reported {leaked:,} leaked shared memory "
            f"segment{'' if leaked == 1 else 's'} (a count that varies from run to run, so "
            "a re-run may print another, or none).")


def grain_sentence(grain_report: Mapping[str, Any] | None, ours: Mapping[str, Any]) -> str:
    """Grain's operation against course_lib's, on the same sequences, from both reports.

    `ours` holds course_lib's `packed_fill`, the measure of Grain's `fill` here;
    `grain_chain_sentence` says course_lib's other results."""
    if grain_report is None:
        return ("Grain is not installed here, so its operation cannot run side by side "
                "(`pip install grain` to see it); course_lib's results above stand alone.")
    theirs = {int(key): value for key, value in grain_report.items() if key.isdigit()}
    same_batches = theirs[0]["digest"] == theirs[2]["digest"]
    parts = [f"Grain's DataLoader with its PackAndBatchOperation, on the same sequences in "
             f"the order of its own sampler: {PACKED_FILL} {theirs[0]['fill']:.1%} "
             f"(course_lib's chain: {ours['fill']:.1%})."]
    if same_batches:
        parts.append("Its batches were the same at 0 and 2 workers.")
    else:
        count = (f"{theirs[2]['batches']} batches instead of {theirs[0]['batches']}, not "
                 "those of 0 workers" if theirs[2]["batches"] != theirs[0]["batches"] else
                 f"as many batches ({theirs[0]['batches']}), but not the same ones")
        parts.append(f"With 2 workers it gave {count}: each worker packs its own share of "
                     "the records.")
    parts.append(
        "Restored from a state saved mid-epoch, it continued exactly." if
        grain_report["resumed_equal"] else
        "Restored from a state saved mid-epoch, it gave other batches than the "
        "uninterrupted run: its state does not hold the rows still being filled.")
    parts.append(leak_sentence(grain_report.get("leaked_segments", 0)))
    return " ".join(parts)


# -- Grain's FirstFitPackIterDataset under mp_prefetch, the lesson's chain on Grain ----------
_GRAIN_CHAIN_SCRIPT = """
import gc, json, sys
from absl import flags
flags.FLAGS.mark_as_parsed()  # Grain's workers read an absl flag (lesson 11)
import numpy as np
import grain.python as grain
from course_lib.course.variable_length import SequenceSource, digest, docstring_sequences
limit, row_length, batch_size, resume_after = (int(argument) for argument in sys.argv[1:])
source = SequenceSource(docstring_sequences(row_length, limit or None))

def to_batch(rows):
    missing = batch_size - len(rows)
    return tuple(np.pad(np.stack([row[key] for row in rows]), ((0, missing), (0, 0)))
                 for key in ("tokens", "tokens_segment_ids", "tokens_positions"))

def packed(num_workers, where):
    options = grain.MultiprocessingOptions(num_workers=num_workers)
    stream = (grain.MapDataset.source(source).shuffle(seed=0)
              .map(lambda tokens: {"tokens": tokens}).to_iter_dataset())
    if where == "main":  # the lesson's chain: workers below the packer
        stream = stream.mp_prefetch(options)
    rows = grain.experimental.FirstFitPackIterDataset(
        stream, length_struct={"tokens": row_length}, num_packing_bins=batch_size, seed=0)
    batches = rows.batch(batch_size, batch_fn=to_batch)
    return batches.mp_prefetch(options) if where == "workers" else batches

def run(num_workers, where, state=None, take=None):
    iterator = iter(packed(num_workers, where))
    try:
        if state is not None:
            iterator.set_state(state)
        if take is None:
            return [tuple(batch) for batch in iterator]
        for _ in range(take):
            next(iterator)
        return iterator.get_state()
    finally:
        iterator.close()

def structure(state):  # the state's keys at every level, without the values
    if isinstance(state, dict):
        return {key: structure(value) for key, value in sorted(state.items())}
    if isinstance(state, list):
        return [structure(value) for value in state]
    return None

report = {}
for where in ("main", "workers"):
    rests, states = {}, {}
    report[where] = {}
    for count in (0, 2):
        everything = run(count, where)
        report[where][str(count)] = digest(everything)
        rests[count] = digest(everything[resume_after:])
        del everything  # release every batch (and its shared memory) before the next run
        states[count] = run(count, where, take=resume_after)
    report[where]["same_structure"] = structure(states[0]) == structure(states[2])
    resumes = {}
    for saved, restored in ((0, 0), (2, 2), (0, 2), (2, 0)):
        try:  # compared with the uninterrupted run at the count restored at
            rest = run(restored, where, state=states[saved])
            resumes[f"{saved}->{restored}"] = ("equal" if digest(rest) == rests[restored]
                                               else "other")
            del rest
        except Exception as error:  # what Grain raises is the measurement
            resumes[f"{saved}->{restored}"] = f"{type(error).__name__}: {error}"
    report[where]["resume"] = resumes
report["resume_after"] = resume_after
gc.collect()  # nothing of Grain's is held by this script from here to exit
print(json.dumps(report))
"""


def grain_chain_packing(limit: int | None, row_length: int = ROW_LENGTH,
                        batch_size: int = BATCH_SIZE, resume_after: int = 5,
                        timeout: float = 600.0) -> dict | None:
    """The lesson's packing chain on Grain itself, in a new process (Grain's workers need
    absl's flags parsed): `FirstFitPackIterDataset` with `mp_prefetch` below the packer
    ("main": the packer runs in the main process) and after it ("workers": each worker
    packs its share), each at 0 and 2 workers; a state saved after `resume_after` batches
    restored at the same count ("0->0", "2->2") and at the other ("0->2", "2->0"), each
    "equal" (the rest of the uninterrupted run at the count restored at), "other", or the
    error Grain raised; whether the states saved at 0 and 2 workers have the same
    structure (keys at every level). Every batch and iterator is released before the
    script exits. None where Grain is not installed."""
    return _run_grain_script(_GRAIN_CHAIN_SCRIPT, (limit, row_length, batch_size, resume_after),
                             timeout)


SAME_COUNT = ("0->0", "2->2")
OTHER_COUNT = ("0->2", "2->0")


def _resume_list(resumes: Mapping[str, str], keys: Sequence[str]) -> str:
    """ "0→2: continued exactly; 2→0: KeyError: ..." for `keys` of a resume report."""
    words = {"equal": "continued exactly", "other": "gave other batches"}
    return "; ".join(f"{key.replace('->', '→')}: {words.get(resumes[key], resumes[key])}"
                     for key in keys)


def _chain_resumes(result: Mapping[str, Any], taken: int, cause_said: bool = False) -> str:
    """What the resumes of one place of `mp_prefetch` did, with their cause where the
    worker count changed and the states differ in structure."""
    resumes = result["resume"]
    same_ok = all(resumes[key] == "equal" for key in SAME_COUNT)
    other_ok = all(resumes[key] == "equal" for key in OTHER_COUNT)
    if same_ok and other_ok:
        return (f"a state saved after {taken} batches continued exactly both at the worker count "
                "it was saved at and at the other (0→0, 2→2, 0→2, 2→0)")
    if not same_ok:
        head = (f"a state saved after {taken} batches did not continue exactly even at the worker "
                f"count it was saved at ({_resume_list(resumes, SAME_COUNT)}); at the other "
                f"count: {_resume_list(resumes, OTHER_COUNT)}")
    else:
        head = (f"a state saved after {taken} batches continued exactly at the worker count it "
                "was saved at (0→0, 2→2), but not at the other "
                f"({_resume_list(resumes, OTHER_COUNT)})")
    if other_ok:
        return head
    if not result["same_structure"] and cause_said:
        return f"{head}, for the same cause"
    if not result["same_structure"]:
        return (f"{head}. The cause is the change of worker count: Grain's mp_prefetch "
                "with 0 workers returns the chain unchanged (process_prefetch.py), so a "
                "state saved at 0 workers has another structure than one saved at 2")
    return (f"{head}, although the states saved at 0 and 2 workers have the same "
            "structure")


def grain_chain_sentence(report: Mapping[str, Any] | None, ours_same: bool,
                         ours_resumed: bool) -> str:
    """The lesson's chain on Grain against course_lib's, from `grain_chain_packing`:
    the batches at 0 and 2 workers in each place of `mp_prefetch`, and resumes at the same
    and at another worker count. `ours_same`, `ours_resumed`: course_lib's results,
    measured above (saved at 0 workers, restored at 2)."""
    if report is None:
        return ("Grain is not installed here, so the chain cannot run on it (`pip install "
                "grain` to see it); course_lib's results above stand alone.")

    taken = report["resume_after"]

    def same(result: Mapping[str, Any]) -> str:
        return ("the same batches at 0 and 2 workers" if result["0"] == result["2"] else
                "other batches at 2 workers than at 0")

    main = _chain_resumes(report["main"], taken)
    parts = [f"On Grain, the same chain (mp_prefetch below the packer) gave "
             f"{same(report['main'])}, and {main}.",
             f"With mp_prefetch after the packer, where each worker packs its own share, "
             f"Grain gave {same(report['workers'])}, and "
             f"{_chain_resumes(report['workers'], taken, 'The cause is' in main)}."]
    parts.append(leak_sentence(report.get("leaked_segments", 0)))
    main_other = report["main"]["resume"]["0->2"] == "equal"
    if ours_same and ours_resumed:
        parts.append("course_lib gave the same batches at 0, 1 and 2 workers and, saved at "
                     "0 workers and restored at 2, resumed exactly" +
                     (", as Grain's chain did." if main_other else
                      ", where Grain's chain did not."))
    else:
        parts.append("course_lib did not hold its promises here either: that is a bug to "
                     "report.")
    return " ".join(parts)


# -- Grain's current packers (the Dataset API) -----------------------------------------------
GRAIN_PACKERS = {
    "FirstFitPackIterDataset": "first fit over num_packing_bins open rows; when a sequence "
                               "fits none, all rows go out (PackAndBatchOperation's rule)",
    "BestFitPackIterDataset": "each sequence into the open row it leaves least room in",
    "ConcatThenSplitIterDataset": "sequences end to end, cut every row length: no padding, "
                                  "but a sequence may be cut across rows",
}


def grain_packers(sequences: Sequence[np.ndarray], row_length: int = ROW_LENGTH,
                  bins: int = BATCH_SIZE, seed: int = 0,
                  shuffle: bool = True) -> dict[str, dict] | None:
    """Grain's three Dataset API packers on `sequences`, shuffled by Grain's
    `MapDataset.shuffle` (or in the order given, `shuffle=False`): for each, the rows, the
    share of slots holding real tokens, how many sequences were cut (segments in all rows
    minus sequences: each cut adds a segment), the rows' `rows_digest`, and whether every
    token came out once. None where Grain is not installed."""
    import importlib.util

    if importlib.util.find_spec("grain") is None:
        return None
    import grain

    source = SequenceSource(sequences)
    places = SequenceSource([np.arange(start, stop, dtype=np.int32) + 1 for start, stop
                             in zip(source.offsets[:-1], source.offsets[1:], strict=True)])
    dataset = grain.MapDataset.range(len(source))
    dataset = dataset.shuffle(seed=seed) if shuffle else dataset
    # each token travels with its place in the source (from 1), to check that it came out once
    dataset = dataset.map(lambda key: {"tokens": source[key], "place": places[key]})
    dataset = dataset.to_iter_dataset()
    lengths = {"tokens": row_length, "place": row_length}
    packers = {
        "FirstFitPackIterDataset": lambda: grain.experimental.FirstFitPackIterDataset(
            dataset, length_struct=lengths, num_packing_bins=bins, seed=seed),
        "BestFitPackIterDataset": lambda: grain.experimental.BestFitPackIterDataset(
            dataset, length_struct=lengths, num_packing_bins=bins, seed=seed),
        "ConcatThenSplitIterDataset": lambda: grain.experimental.ConcatThenSplitIterDataset(
            dataset, length_struct=lengths),
    }
    report = {}
    for name, make in packers.items():
        rows = list(make())
        segments = np.stack([row["tokens_segment_ids"] for row in rows])
        starts = (segments > 0) & (np.diff(segments, axis=1, prepend=0) != 0)
        tokens = np.stack([row["tokens"] for row in rows])[segments > 0]
        found = np.stack([row["place"] for row in rows])[segments > 0]
        as_rows = [(row["tokens"], row["tokens_segment_ids"], row["tokens_positions"])
                   for row in rows]
        report[name] = {"rows": len(rows), "fill": packed_fill([segments]),
                        "cut": int(np.count_nonzero(starts)) - len(source),
                        "rows_digest": rows_digest(as_rows),
                        "ordered_digest": rows_digest(as_rows, ordered=True),
                        "group_digests": [rows_digest(as_rows[start:start + bins])
                                          for start in range(0, len(as_rows), bins)],
                        "every_token_once": tokens_once(tokens, found, source.tokens)}
    return report


def tokens_once(tokens: np.ndarray, places: np.ndarray, stream: np.ndarray) -> bool:
    """Whether the packed real tokens are every token of `stream` exactly once: each carries
    its place in `stream` (from 1), every place comes out once and holds its own token."""
    tokens, places, stream = (np.asarray(part).ravel() for part in (tokens, places, stream))
    return (len(places) == len(stream) and np.array_equal(np.sort(places),
                                                          np.arange(1, len(stream) + 1))
            and bool(np.array_equal(tokens, stream[places - 1])))


def grain_packer_state(sequences: Sequence[np.ndarray], rows: int,
                       row_length: int = ROW_LENGTH, bins: int = BATCH_SIZE,
                       seed: int = 0) -> dict | None:
    """The state of Grain's `FirstFitPackIterDataset` over `sequences` (in the order given)
    after it handed out `rows` rows: Grain's own keys, to set beside course_lib's. None
    where Grain is not installed."""
    import importlib.util

    if importlib.util.find_spec("grain") is None:
        return None
    import grain

    stream = grain.MapDataset.source(list(sequences)).map(lambda tokens: {"tokens": tokens})
    iterator = iter(grain.experimental.FirstFitPackIterDataset(
        stream.to_iter_dataset(), length_struct={"tokens": row_length},
        num_packing_bins=bins, seed=seed))
    for _ in range(rows):
        next(iterator)
    return iterator.get_state()


def best_fit_sentence(first_fill: float, best_fit_fill: float) -> str:
    """Best fit against first fit on the same stream, in points of padding as printed.
    Both fills are `packed_fill`s."""
    head = (f"The {PACKED_FILL} (the empty rows that pad out the last batch left out): "
            f"first fit {first_fill:.1%}, best fit {best_fit_fill:.1%}.")
    gain = points_between(best_fit_fill, first_fill, decimals=1)
    if abs(gain) < 0.5:
        return (f"{head} Best fit and first fit are within half a point of each other on "
                "these lengths.")
    if gain > 0:
        return f"{head} Best fit saves {format_points(gain, 1)} of padding over first fit."
    return f"{head} Best fit pads {format_points(-gain, 1)} more than first fit here."


def rows_digest(rows: Iterable[tuple], ordered: bool = False) -> str:
    """A fingerprint of a set of packed rows, `(tokens, segment_ids, positions)` each,
    whatever order they come in (`ordered=True`: of the rows in the order given); rows
    holding no sequence are left out."""
    found = [b"".join(np.ascontiguousarray(part, np.int32).tobytes() for part in row)
             for row in rows if np.any(row[1])]
    return hashlib.sha256(b"|".join(found if ordered else sorted(found))).hexdigest()[:12]


def rows_of(batches: Sequence[tuple]) -> Iterator[tuple]:
    """The rows of packed batches, one `(tokens, segment_ids, positions)` each."""
    for tokens, segment_ids, positions in batches:
        yield from zip(tokens, segment_ids, positions, strict=True)


def grain_packers_sentence(report: Mapping[str, Mapping[str, Any]] | None,
                           ours: Mapping[str, str],
                           ours_ordered: Mapping[str, str] | None = None,
                           ours_groups: Mapping[str, Sequence[str]] | None = None) -> str:
    """Grain's packers on course_lib's stream, from `grain_packers`: their fills, whether
    they made course_lib's rows (`ours`: `rows_digest` by Grain's class name; `ours_ordered`:
    the same with `ordered=True`, to say whether the rows also came out in the same order;
    `ours_groups`: `rows_digest` of each batch, one group of rows, to say where they differ),
    what concatenating cut, and whether every token came out once."""
    if report is None:
        return ("Grain is not installed here, so its packers cannot run (`pip install grain` "
                "to see them).")
    first, best, split = (report[name] for name in GRAIN_PACKERS)
    parts = [f"Grain's packers, given the same stream, {PACKED_FILL} (as for course_lib's "
             f"above): first fit {first['fill']:.1%}, best fit {best['fill']:.1%}, "
             f"concatenate then split {split['fill']:.1%}."]
    same = [name for name in ours if report[name]["rows_digest"] == ours[name]]
    if len(same) == len(ours):
        parts.append("Grain's first fit and best fit made exactly course_lib's rows, compared "
                     "as sets" + _order_part(report, ours_ordered, ours_groups) + ".")
    else:
        other = [name for name in ours if name not in same]
        parts.append(f"Grain's {' and '.join(other)} made other rows than course_lib's from "
                     "the same stream: the packers disagree, a bug to report.")
    if split["cut"]:
        parts.append(f"Concatenate then split leaves almost no padding, but it cut "
                     f"{split['cut']} of these sequences across two rows: the piece in the "
                     "second row restarts at position 0 and is trained without its beginning, "
                     "as every piece after the first of a split long document is (both are "
                     "counted alike, on every docstring, below).")
    else:
        parts.append("Concatenate then split cut no sequence here.")
    lost = [name for name, result in report.items() if not result["every_token_once"]]
    parts.append("Every packer delivered every token of the stream exactly once (each token "
                 "carried its place in the stream, and every place came out once, holding its "
                 "own token)." if not lost else
                 f"{', '.join(lost)} did not deliver every token exactly once.")
    return " ".join(parts)


def _order_part(report: Mapping[str, Mapping[str, Any]],
                ours_ordered: Mapping[str, str] | None,
                ours_groups: Mapping[str, Sequence[str]] | None = None) -> str:
    """Whether Grain's fit packers handed their rows out in course_lib's order too, and,
    where not, whether each group of rows still holds the same rows (`ours_groups`)."""
    if not ours_ordered:
        return ""
    in_order = [name for name in ours_ordered
                if report[name].get("ordered_digest") == ours_ordered[name]]
    if len(in_order) == len(ours_ordered):
        return ", and in the same order"
    other = [name for name in ours_ordered if name not in in_order]
    head = ("; compared in order, they differ" if not in_order else
            f"; compared in order, only {' and '.join(in_order)} gave course_lib's order")
    if not ours_groups:
        return head
    same_groups = all(report[name].get("group_digests") == list(ours_groups[name])
                      for name in other)
    if same_groups:
        return (f"{head}, yet group by group ({len(ours_groups[other[0]])} groups) they hold "
                "the same rows: only the order inside a group differs, the order shuffle_bins "
                "draws (Grain from the seed and the rows handed out before, course_lib from "
                "the seed and the groups before)")
    return f"{head}, and not only inside a group: the groups themselves hold other rows"


# -- what a cut costs: splitting long documents against concatenating then splitting ---------
def _origin_elements(documents: Sequence[np.ndarray], row_length: int | None) -> list[dict]:
    """Each document as Dataset elements carrying, per token, its document (from 1) and its
    offset in that document; cut into row-length pieces first when `row_length` is given."""
    elements = []
    for number, document in enumerate(documents, start=1):
        offsets = np.arange(len(document), dtype=np.int32)
        step = row_length or max(len(document), 1)
        for start in range(0, len(document), step):
            piece = slice(start, start + step)
            elements.append({"tokens": np.asarray(document[piece], np.int32),
                             "doc": np.full(len(offsets[piece]), number, np.int32),
                             "offset": offsets[piece]})
    return elements


def context_report(rows: Sequence[Mapping[str, np.ndarray]],
                   document_lengths: Sequence[int], row_length: int,
                   documents: Sequence[np.ndarray] | None = None) -> dict[str, Any]:
    """What packing did to the documents, counted from the packed rows alone.

    Each row holds, beside Grain's `tokens_segment_ids` and `tokens_positions`, every
    token's document (`doc`) and offset in it (`offset`). A token whose offset exceeds its
    position in its segment sits in a piece that starts after its document's start: the
    model, whose attention stays inside a segment, never sees what came before the cut.
    A document is cut when its tokens lie in more than one segment; `short_cut` counts the
    cut documents that would have fit a row (`document_lengths[k]` is document k + 1's).
    `every_token_once`: every (document, offset) came out exactly once and, given
    `documents`, holds that document's token at that offset."""
    segments = np.stack([row["tokens_segment_ids"] for row in rows])
    positions = np.stack([row["tokens_positions"] for row in rows])
    doc_ids = np.stack([row["doc"] for row in rows])
    offsets = np.stack([row["offset"] for row in rows])
    real = segments > 0
    row_index = np.broadcast_to(np.arange(len(rows))[:, None], segments.shape)
    pieces = np.unique(np.stack([doc_ids[real], row_index[real], segments[real]]), axis=1)
    numbers, pieces_per_document = np.unique(pieces[0], return_counts=True)
    cut = numbers[pieces_per_document > 1]
    lengths = np.asarray(document_lengths)
    num_tokens = int(lengths.sum())
    starts = np.concatenate([[0], np.cumsum(lengths)])
    valid = np.all((doc_ids[real] >= 1) & (doc_ids[real] <= len(lengths)))
    places = (starts[np.clip(doc_ids[real], 1, len(lengths)) - 1] + offsets[real]
              if valid else np.zeros(0, np.int64))
    once = bool(valid) and len(places) == num_tokens and np.array_equal(
        np.sort(places), np.arange(num_tokens))
    if once and documents is not None:
        stream = np.concatenate([np.asarray(document) for document in documents])
        once = np.array_equal(np.stack([row["tokens"] for row in rows])[real], stream[places])
    return {"documents": len(lengths), "tokens": num_tokens, "cut": len(cut),
            "short_cut": int(np.count_nonzero(lengths[cut - 1] <= row_length)),
            "without_context": int(np.count_nonzero(offsets[real] > positions[real])),
            "fill": packed_fill([segments]),
            "every_token_once": bool(once)}


def context_cuts(documents: Sequence[np.ndarray], row_length: int = ROW_LENGTH,
                 bins: int = BATCH_SIZE, seed: int = 0) -> dict[str, dict] | None:
    """The two ways of keeping documents longer than a row, on Grain's Dataset API and
    counted alike by `context_report`: "split, then first fit" (cut every document into
    row-length pieces, pack the pieces with `FirstFitPackIterDataset`) and "concatenate
    then split" (`ConcatThenSplitIterDataset` on the whole documents). None where Grain is
    not installed."""
    import importlib.util

    if importlib.util.find_spec("grain") is None:
        return None
    import grain

    lengths = {"tokens": row_length, "doc": row_length, "offset": row_length}
    document_lengths = [len(document) for document in documents]

    def stream(split: bool):
        elements = _origin_elements(documents, row_length if split else None)
        return grain.MapDataset.source(elements).shuffle(seed=seed).to_iter_dataset()

    packers = {
        "split, then first fit": lambda: grain.experimental.FirstFitPackIterDataset(
            stream(split=True), length_struct=lengths, num_packing_bins=bins, seed=seed),
        "concatenate then split": lambda: grain.experimental.ConcatThenSplitIterDataset(
            stream(split=False), length_struct=lengths),
    }
    return {name: context_report(list(make()), document_lengths, row_length, documents)
            for name, make in packers.items()}


def _padding_change(points_saved: float) -> str:
    """What concatenating did to the padding, in points as printed."""
    if points_saved > 0:
        return f"{format_points(points_saved)} less padding"
    if points_saved < 0:
        return f"{format_points(-points_saved)} more padding"
    return "the same padding"


def context_sentence(report: Mapping[str, Mapping[str, Any]] | None) -> str:
    """Splitting long documents against concatenating then splitting, from `context_cuts`:
    documents cut, tokens trained without the start of their document, and padding."""
    if report is None:
        return ("Grain is not installed here, so its packers cannot run (`pip install grain` "
                "to see them).")
    split, concat = report["split, then first fit"], report["concatenate then split"]

    def counted(result: Mapping[str, Any]) -> str:
        return (f"cut {result['cut']:,} documents and left {result['without_context']:,} "
                f"tokens ({result['without_context'] / result['tokens']:.0%}) without the "
                f"start of their document, with {1 - result['fill']:.0%} of the slots padding")

    parts = [f"On {split['documents']:,} docstrings ({split['tokens']:,} tokens), counted "
             f"alike from the packed rows: split into rows, then first fit, "
             f"{counted(split)}; concatenate then split {counted(concat)}."]
    lost, base = concat["without_context"], split["without_context"]
    padding_saved = points_between(1 - split["fill"], 1 - concat["fill"])
    if base == 0 and lost == 0:
        parts.append("Neither cut a document: every one fits a row.")
    elif lost > 1.1 * base:
        parts.append(
            f"Concatenating cut {concat['cut'] - split['cut']:,} more documents "
            f"({concat['short_cut']:,} of those it cut fit a row, which splitting leaves "
            "whole) and left "
            + (f"{format_times(lost / base)} the tokens" if base else "tokens")
            + f" without their start, for {_padding_change(padding_saved)}. Both cut "
            "the long documents and train each piece alone; the choice is padding against "
            "context, and this run puts a number on each.")
    elif lost < base / 1.1:
        parts.append(
            f"Concatenating left fewer tokens without their start ({lost:,} against "
            f"{base:,}) and {_padding_change(padding_saved)}: on these documents it "
            "loses less context than splitting, not more.")
    else:
        parts.append(
            "Both left about as many tokens without their start (within 10%): the long "
            "documents are cut either way, so what sets the two apart is the padding: "
            f"{_padding_change(padding_saved)} when concatenating.")
    if not (split["every_token_once"] and concat["every_token_once"]):
        parts.append("One of them did not deliver every token exactly once.")
    return " ".join(parts)
