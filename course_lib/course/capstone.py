"""Lesson 12's data, run reports, pictures and sentences.

The capstone runs `course_lib/scripts/train_lm.py` as a real multi-process job. This module
writes its data (two corpora that ship with Python, each cut into row-length pieces, in
sharded ArrayRecord files: the docstrings of the standard library's top-level modules, and
the source code of those modules), shows the script's own functions, reads back what the
job wrote (`steps.jsonl` and one `rank<r>.json` per process), draws it, and prints the
sentences that depend on it.
"""

from __future__ import annotations

import inspect
import json
import math
import sysconfig
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from course_lib.course.basics import (
    BETTER,
    NOISE_FLOOR,
    SAME,
    TOO_NOISY,
    TOO_NOISY_TO_TELL,
    WORSE,
    Estimate,
    format_rate,
    format_times,
    judge,
    relative_margin,
)
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


def byte_counts(pieces: Sequence[bytes]) -> list[int]:
    """How often each of the 256 byte values occurs in `pieces`."""
    counts = Counter()
    for piece in pieces:
        counts.update(piece)
    return [counts[value] for value in range(256)]


def mixed_unigram_entropy(counts: Sequence[Sequence[int]], shares: Sequence[float]) -> float:
    """The unigram entropy, in nats, of bytes drawn from several corpora, a share `shares[i]`
    of them from corpus `i` (whose byte counts are `counts[i]`): the loss of a model that
    knows only how common each byte is in the mixture it trains on."""
    if len(counts) != len(shares) or abs(sum(shares) - 1) > 1e-9 or min(shares) < 0:
        raise ValueError(f"shares={list(shares)!r} must be one non-negative share per corpus "
                         f"({len(counts)}), adding up to 1.")
    mixture = [0.0] * 256
    for corpus, share in zip(counts, shares, strict=True):
        total = sum(corpus)
        for value, count in enumerate(corpus):
            mixture[value] += share * count / total
    return -sum(p * math.log(p) for p in mixture if p > 0)


def unigram_entropy(pieces: Sequence[bytes]) -> float:
    """Entropy of the bytes' frequencies, in nats: the loss of a model that knows how common
    each byte is but not which bytes come before it."""
    counts = Counter()
    for piece in pieces:
        counts.update(piece)
    total = sum(counts.values())
    return -sum(n / total * math.log(n / total) for n in counts.values())


def write_corpus(directory: str | Path, row_length: int, num_shards: int,
                 limit: int | None = None, corpus: str = "docstrings") -> dict[str, float]:
    """Write one corpus's pieces (`corpus` is "docstrings" or "code"; `limit` documents or
    files) into `num_shards` ArrayRecord files named after it; return their counts and
    sizes, where the files' bytes go (`file_layout`, summed over the files), the size the
    same records take with `group_size:64` (written to a scratch folder and removed) and
    the bytes' unigram entropy."""
    from course_lib.array_record import write_array_record_shards

    cutters = {"docstrings": text_pieces, "code": code_pieces}
    if corpus not in cutters:
        raise ValueError(f"corpus={corpus!r} is not one of {list(cutters)}.")
    pieces = cutters[corpus](row_length, limit)
    paths = write_array_record_shards(pieces, directory, num_shards, prefix=corpus)
    with tempfile.TemporaryDirectory() as scratch:
        grouped = write_array_record_shards(pieces, scratch, num_shards, prefix="grouped",
                                            options="group_size:64")
        bytes_grouped = sum(path.stat().st_size for path in grouped)
    layout = Counter()
    for path in paths:
        layout.update(file_layout(path))
    documents = _stdlib_docstrings() if corpus == "docstrings" else _stdlib_sources()
    return {"corpus": corpus, "documents": len(documents[:limit]),
            "documents_cut": sum(len(document) > row_length for document in documents[:limit]),
            "records": len(pieces),
            "tokens": sum(len(piece) for piece in pieces), "files": len(paths),
            "bytes_on_disk": sum(path.stat().st_size for path in paths),
            "layout": dict(layout), "bytes_group_64": bytes_grouped,
            "unigram_nats": unigram_entropy(pieces), "byte_counts": byte_counts(pieces)}


def write_corpora(directory: str | Path, row_length: int, num_shards: int,
                  limits: Mapping[str, int | None]) -> dict[str, dict]:
    """Both corpora of the capstone, each in its own `num_shards` files; `limits` gives
    each corpus's number of documents (docstrings) or files (code), None for all."""
    return {name: write_corpus(directory, row_length, num_shards, limits[name], name)
            for name in CORPORA}


# -- where an ArrayRecord file's bytes go ------------------------------------------------
# An ArrayRecord file is a Riegeli file (google/riegeli, doc/riegeli_records_file_format.md):
# a sequence of chunks, each a 40-byte chunk header and its data, interrupted by a 24-byte
# block header at every multiple of 64 KiB. ArrayRecord (google/array_record,
# cpp/array_record_writer.cc and cpp/layout.proto) writes a file signature chunk, one chunk
# per group of `group_size` records, then a footer chunk (one entry per record chunk: its
# offset and record count) and a postscript chunk (where the footer starts); it pads after
# the footer and after the postscript to the next 64 KiB boundary with padding chunks
# ("Footer and postscript must pad to block boundary") whatever `pad_to_block_boundary`
# says (false by default; true pads after every record chunk as well), so that a reader
# finds the postscript in the file's last 64 KiB.
BLOCK_BYTES = 1 << 16  # Riegeli's block size
BLOCK_HEADER_BYTES = 24
CHUNK_HEADER_BYTES = 40
LAYOUT_PARTS = ("records", "footer", "padding", "postscript", "signature", "block_headers")


def _chunk_end(begin: int, data_size: int, num_records: int) -> int:
    """Where a chunk that begins at `begin` ends (Riegeli's format, "Implementation notes"):
    after its header, its data and the block headers in between, and never before
    `begin + num_records` (so that every record has a position of its own)."""
    usable = BLOCK_BYTES - BLOCK_HEADER_BYTES
    size = CHUNK_HEADER_BYTES + data_size
    block_headers = (size + (begin + usable - 1) % BLOCK_BYTES) // usable
    end = begin + size + block_headers * BLOCK_HEADER_BYTES
    ahead = begin + num_records
    room = BLOCK_BYTES - 1 - (ahead + BLOCK_BYTES - 1) % BLOCK_BYTES
    return max(end, ahead + max(room - (usable - 1), 0))


def _read_skipping_block_headers(data: bytes, position: int, count: int) -> bytes:
    out = bytearray()
    while len(out) < count:
        if position % BLOCK_BYTES == 0:
            position += BLOCK_HEADER_BYTES
        take = min(count - len(out), BLOCK_BYTES - position % BLOCK_BYTES)
        out += data[position:position + take]
        position += take
    return bytes(out)


def file_chunks(path: str | Path) -> list[tuple[str, int, int]]:
    """Every chunk of a Riegeli (ArrayRecord) file: (type, begin, end) in file order; the
    type is one letter: "s" signature, "r" records, "p" padding."""
    data = Path(path).read_bytes()
    chunks, position = [], 0
    while position < len(data):
        header = _read_skipping_block_headers(data, position, CHUNK_HEADER_BYTES)
        data_size = int.from_bytes(header[8:16], "little")
        kind = chr(header[24])
        num_records = int.from_bytes(header[25:32], "little")
        end = _chunk_end(position, data_size, num_records)
        chunks.append((kind, position, end))
        position = end
    return chunks


def file_layout(path: str | Path) -> dict[str, int]:
    """An ArrayRecord file's bytes by what holds them, read from its chunks: the record
    chunks, the footer, the padding chunks, the postscript, the file signature and the
    block headers. The parts add up to the file's size (`file_size`)."""
    chunks = file_chunks(path)
    record_chunks = [i for i, (kind, _, _) in enumerate(chunks) if kind == "r"]
    if len(record_chunks) < 2:
        raise ValueError(f"{str(path)!r} has {len(record_chunks)} record chunk(s); an "
                         "ArrayRecord file ends with a footer and a postscript chunk.")
    footer, postscript = record_chunks[-2:]
    layout = dict.fromkeys(LAYOUT_PARTS, 0)
    layout["record_chunks"] = len(record_chunks) - 2
    for i, (kind, begin, end) in enumerate(chunks):
        headers = len(range(-(-begin // BLOCK_BYTES) * BLOCK_BYTES, end, BLOCK_BYTES))
        layout["block_headers"] += headers * BLOCK_HEADER_BYTES
        part = {"s": "signature", "p": "padding"}.get(kind)
        if part is None:
            part = {footer: "footer", postscript: "postscript"}.get(i, "records")
        layout[part] += end - begin - headers * BLOCK_HEADER_BYTES
    layout["file_size"] = Path(path).stat().st_size
    return layout


def size_sentence(sizes: Mapping) -> str:
    """The files' size against the text's, where the bytes go (from `file_layout`), and
    the same records in groups of 64."""
    layout, files = sizes["layout"], sizes["files"]
    ratio = sizes["bytes_on_disk"] / sizes["tokens"]
    head = (f"{sizes['bytes_on_disk']:,} bytes on disk for {sizes['tokens']:,} bytes of "
            f"text: ")
    # byte counts are exact: only the course's 5% floor applies (judge of single values)
    on_disk, text = Estimate.once(sizes["bytes_on_disk"]), Estimate.once(sizes["tokens"])
    verdict = judge(on_disk, text)
    if verdict == SAME:
        margin = relative_margin(on_disk, text)
        head += f"the text's size, within the course's {margin:.0%} margin"
    elif verdict == BETTER:
        head += f"{format_times(1 / ratio)} smaller"
    else:
        head += f"{format_times(ratio)} larger"
    known = sum(layout[part] for part in LAYOUT_PARTS)
    if known != sizes["bytes_on_disk"]:
        return head + (f". The chunks read back account for {known:,} of those bytes, not "
                       "all of them: this file is not laid out as the Riegeli format says.")
    per_record = layout["records"] / sizes["records"]
    text_per_record = sizes["tokens"] / sizes["records"]
    if per_record > text_per_record:
        chunks = (f"with group_size:1 each record is a chunk of its own, and the chunk's "
                  f"{CHUNK_HEADER_BYTES}-byte header and compression frame outweigh what "
                  "compressing one short record saves")
    else:
        chunks = (f"compressing even one record at a time saves more than the chunk's "
                  f"{CHUNK_HEADER_BYTES}-byte header costs")
    head += (f". Read back chunk by chunk: the {sizes['records']:,} records' chunks take "
             f"{layout['records']:,} bytes ({per_record:.0f} per record for "
             f"{text_per_record:.0f} bytes of text: {chunks}); padding {layout['padding']:,} "
             "bytes "
             f"({layout['padding'] / files / 1024:.0f} KiB per file: the writer always pads "
             "after the footer and after the postscript to the next 64 KiB boundary, "
             "whatever pad_to_block_boundary says); the footers (the index of the chunks) "
             f"{layout['footer']:,}; the postscripts, file signatures and "
             f"{BLOCK_HEADER_BYTES}-byte block headers "
             f"{layout['postscript'] + layout['signature'] + layout['block_headers']:,}")
    grouped = sizes["bytes_group_64"] / sizes["tokens"]
    return (head + f". The same records with group_size:64 take "
            f"{sizes['bytes_group_64']:,} bytes, padding included ({format_times(grouped)} the "
            "text). "
            "group_size:1 is "
            "kept because every random read then touches one record only (lesson 9).")


def loss_sentence(steps: Sequence[Mapping], unigram_nats: float, last: int = 5,
                  corpus_bytes: int | None = None) -> str:
    """The mean loss of the last `last` steps, with its standard error, against the bytes'
    frequencies alone (the unigram entropy) and a uniform guess (ln 256), each judged by
    the course's margin rule (lower is better). The unigram entropy is computed from the
    whole written corpora (`corpus_bytes` bytes, when given, set against the real tokens
    of `steps`), each corpus weighted by its share of the packed tokens."""
    if len(steps) < last:
        raise ValueError(f"{len(steps)} steps are fewer than last={last}.")
    final = Estimate.mean_of([step["loss"] for step in steps[-last:]])
    uniform = math.log(256)
    error = "" if math.isnan(final.stderr) else f" ± {final.stderr:.2f}"
    basis = "both written corpora's bytes"
    if corpus_bytes is not None:
        trained = sum(step["real_tokens"] for step in steps)
        ratio = corpus_bytes / max(trained, 1)
        if ratio >= 1.05:
            basis += (f", {corpus_bytes:,} bytes, {format_times(ratio)} the {trained:,} real "
                      "tokens the steps trained on")
        elif ratio > 1 / 1.05:
            basis += (f", {corpus_bytes:,} bytes, about as many as the {trained:,} real tokens "
                      "the steps trained on")
        else:
            basis += (f", {corpus_bytes:,} bytes, fewer than the {trained:,} real tokens the "
                      "steps trained on (they read the corpora more than once)")
    head = (f"Mean loss of the last {last} steps: {final.value:.2f}{error} nats (mean ± "
            f"standard error over those steps' batches); the bytes' own frequencies (the "
            f"unigram entropy of {basis}, each corpus weighted by its share of the tokens the "
            f"processes packed) score {unigram_nats:.2f}, a uniform guess "
            f"over 256 bytes ln 256 = {uniform:.2f}: ")
    unigram = Estimate.once(unigram_nats)
    margin = relative_margin(final, unigram)
    versus_unigram = judge(final, unigram)
    if versus_unigram == BETTER:
        return head + (f"below both, beyond the margin ({margin:.0%}), so the model predicts "
                       "each byte from the bytes before it, not only from how common it is.")
    if versus_unigram == SAME:
        return head + (f"about the byte frequencies (within the {margin:.0%} margin): no clear "
                       "sign yet that the model uses the bytes before each byte.")
    if versus_unigram == TOO_NOISY_TO_TELL:
        return head + (f"too noisy to tell from the byte frequencies (a margin of {margin:.0%}, "
                       f"wider than {TOO_NOISY:.0%}): train longer, or average more steps.")
    if judge(final, Estimate.once(uniform)) == BETTER:
        return head + ("better than uniform but not yet below the byte frequencies: the "
                       "model has not learned, on average, more than how common each byte "
                       "is.")
    return head + "no better than a uniform guess: the model has not learned yet."


def script_outline(script: str | Path = SCRIPT) -> str:
    """The training loop of the script, as written there (from the loop to the checkpoint)."""
    lines = Path(script).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "for local in profiler.wrap" in line)
    stop = next(i for i, line in enumerate(lines) if "save_spans.append" in line)
    return "\n".join(line[4:] for line in lines[start:stop + 1])


def script_function(name: str) -> str:
    """The source of one function of the training script, read from the file itself."""
    from course_lib.scripts import train_lm

    function = getattr(train_lm, name, None)
    if not inspect.isfunction(function):
        raise ValueError(f"name={name!r} is not a function of {SCRIPT.name}; pass one of "
                         f"{[n for n, f in vars(train_lm).items() if inspect.isfunction(f)]}.")
    return inspect.getsource(function)


def read_steps(run: str | Path) -> list[dict]:
    """Rank 0's log: one dict per step, in the order written (a resumed run appends)."""
    path = Path(run) / "steps.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_reports(run: str | Path) -> list[dict]:
    """Every rank's end-of-run report, by rank."""
    paths = sorted(Path(run).glob("rank*.json"), key=lambda p: int(p.stem[4:]))
    return [json.loads(path.read_text()) for path in paths]


def tokens_per_second(steps: Sequence[Mapping], skip: int = 1) -> float:
    """Real (non-padding) tokens of all processes per second of wall time over the steps
    after the first `skip` (the compilation): from the log time of step `skip` (written when
    it ended) to that of the last, the tokens of every step in between, so that the rate
    covers the very steps the processes time (those after the compiling step)."""
    if skip < 1:
        raise ValueError(f"skip={skip!r} must be at least 1: the rate starts when a logged "
                         "step ended.")
    kept = steps[skip:]
    if len(kept) < 1:
        raise ValueError(f"{len(steps)} steps are too few to time after skipping {skip}.")
    seconds = kept[-1]["time"] - steps[skip - 1]["time"]
    return sum(step["real_tokens"] for step in kept) / max(seconds, 1e-9)


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
    """Step by step after `from_step`: do the checksums of the tokens, segment ids and
    positions, and the losses, match bit for bit?"""
    ref = {step["step"]: step for step in reference if step["step"] > from_step}
    new = {step["step"]: step for step in resumed if step["step"] > from_step}
    common = sorted(set(ref) & set(new))
    comparison: dict[str, object] = {"steps": len(common),
                                     "missing": sorted(set(ref) ^ set(new))}
    for name, key in CHECKSUMS.items():
        comparison[name] = [s for s in common if ref[s][key] == new[s][key]]
    comparison["same_losses"] = [s for s in common if ref[s]["loss"] == new[s]["loss"]]
    return comparison


def resume_sentence(comparison: Mapping, killed_after: int, resumed_from: int,
                    traces: Sequence[int], same_weights: bool,
                    run: str = "Killed") -> str:
    """What the resume proved, or where it failed, from `compare_runs`, the trace counts and
    whether the final weights and optimizer state are equal."""
    steps = comparison["steps"]
    head = (f"{run} after step {killed_after}, resumed from the checkpoint of step "
            f"{resumed_from}: ")
    if steps == 0 or comparison["missing"]:
        return head + (f"the two runs do not cover the same steps (missing in one of them: "
                       f"{comparison['missing']}), so they cannot be compared.")
    equal = {name: len(comparison[name]) for name in (*CHECKSUMS, "same_losses")}
    parts = []
    if all(count == steps for count in equal.values()):
        parts.append(f"all {steps} steps after the checkpoint have the same global batch "
                     "(tokens, segment ids and positions) and the same loss, bit for bit, "
                     "as the uninterrupted run")
    else:
        parts.append(f"of the {steps} steps after the checkpoint, {equal['same_batches']} "
                     f"have the same tokens, {equal['same_segments']} the same segment ids, "
                     f"{equal['same_positions']} the same positions and "
                     f"{equal['same_losses']} the same loss as the uninterrupted run; the "
                     "resume is not exact")
    parts.append("the final weights and optimizer state are " +
                 ("identical, bit for bit" if same_weights else "different"))
    if all(count == 1 for count in traces):
        parts.append("every process traced its step once in each run")
    else:
        parts.append(f"the step was traced {list(traces)} times per process and run, "
                     "so something recompiled")
    return head + "; ".join(parts) + "."


def control_sentence(comparison: Mapping, resumed_from: int, same_weights: bool) -> str:
    """The negative control: a resume that ignores the data position, compared with the
    uninterrupted run by `compare_runs`. It opens with whether the comparison caught it."""
    steps, missing = comparison["steps"], comparison["missing"]
    what = "the resume that ignores the data position"
    if steps == 0 or missing:
        return (f"Not comparable: {what} and the uninterrupted run do not cover the same "
                f"steps (missing in one of them: {missing}), so the control shows nothing.")
    equal = {name: len(comparison[name]) for name in (*CHECKSUMS, "same_losses")}
    if all(count == steps for count in equal.values()) and same_weights:
        return (f"Not caught: {what} matches the uninterrupted run at all {steps} steps after "
                f"the checkpoint of step {resumed_from}, in tokens, segment ids, positions and "
                "loss, and in the final weights: this comparison cannot tell a broken resume "
                "from an exact one.")
    weights = ("and the final weights and optimizer state differ" if not same_weights else
               "though the final weights and optimizer state are the same")
    return (f"Caught: {what} differs from the uninterrupted run. Of the {steps} steps after "
            f"the checkpoint of step {resumed_from}, {equal['same_batches']} have the same "
            f"tokens, {equal['same_segments']} the same segment ids, "
            f"{equal['same_positions']} the same positions and {equal['same_losses']} the same "
            f"loss, {weights}.")


STATE_MEANINGS = {
    "parent.next_index": "the position in the mixed stream where the group of rows being "
                         "handed out began: everything below the packer in one number, since "
                         "the shards, the shuffles and the mix are functions of the position",
    "rows_taken": "how many of that group's rows were handed out already",
    "groups": "how many groups came before the group being handed out (with the seed, it "
              "orders that group's rows)",
}


def _flat(state: Mapping, prefix: str = "") -> dict[str, object]:
    flat = {}
    for key, value in state.items():
        if isinstance(value, Mapping):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def state_sentence(state: Mapping, rows_per_group: int | None = None) -> str:
    """Each entry of a saved data position, as saved (nested keys joined by dots), with what
    it means; an entry this lesson does not describe is said to be so. The state does not
    hold how many rows a packed group has (the packer's `num_packing_bins`): given it as
    `rows_per_group`, `rows_taken` is also said as a share of the group."""
    if rows_per_group is not None and (isinstance(rows_per_group, bool)
                                       or not isinstance(rows_per_group, int)
                                       or rows_per_group < 1):
        raise ValueError(f"rows_per_group={rows_per_group!r} must be a positive int, the "
                         "packer's num_packing_bins (the script packs into as many bins as a "
                         "batch has rows), or None.")
    entries = _flat(state)
    parts = [f"{key} = {value}: {STATE_MEANINGS.get(key, 'not described in this lesson')}"
             for key, value in entries.items()]
    taken = entries.get("rows_taken")
    if rows_per_group is not None and isinstance(taken, int):
        index = list(entries).index("rows_taken")
        parts[index] += (f" (all {rows_per_group} of them, so the next row starts a new group)"
                         if taken == rows_per_group else f" ({taken} of its {rows_per_group})")
    return (f"The saved position holds {_count(len(entries), 'number')}:\n- "
            + ";\n- ".join(parts) + ".")


# -- the two runs' speed ------------------------------------------------------------------
RUN_PARTS = {"step": "the step", "wait": "waiting for data", "checkpoint": "the checkpoints",
             "rest": "the rest of the loop"}
PLURAL_PARTS = {"checkpoint"}  # "the checkpoints account", "on their own"


def per_step(report: Mapping) -> dict[str, Estimate]:
    """A process's time per timed step and its four parts, in seconds, all as means per
    step, so that the parts add up to the whole: the step and the wait for data as the mean
    over the steps, with their standard errors; the checkpoints and the rest as their totals
    over the steps, divided by the count (measured once). The whole carries the standard
    error of the parts that have one (the step's and the wait's, combined): it is their sum
    plus parts measured once, so it is at least as uncertain as they are."""
    split = time_split(report)
    count = len(report["step_spans"])
    step = Estimate.mean_of([b - a for a, b in report["step_spans"]])
    wait = Estimate.mean_of([b - a for a, b in report["wait_spans"]])
    errors = [0.0 if math.isnan(part.stderr) else part.stderr for part in (step, wait)]
    whole_error = math.hypot(*errors) if count > 1 else float("nan")
    return {"whole": Estimate(split["wall"] / count, whole_error, count, "mean"),
            "step": step, "wait": wait,
            "checkpoint": Estimate.once(split["checkpoint"] / count, "mean"),
            "rest": Estimate.once(split["rest"] / count, "mean")}


def _ms(seconds: float) -> str:
    milliseconds = 1e3 * seconds
    if abs(milliseconds) < 0.05:  # no "-0.0"
        milliseconds = 0.0
    return f"{milliseconds:.0f}" if abs(milliseconds) >= 10 else f"{milliseconds:.1f}"


def _signed(share: float) -> str:
    """A share as a signed whole percent, '+0%' for anything that rounds to zero (no '-0%')."""
    return "+0%" if f"{abs(share):.0%}" == "0%" else f"{share:+.0%}"


def _margin(share: float) -> str:
    """A margin as a whole percent, or to one decimal where rounding would hide which side
    of the 25% limit of the margin rule it lies on ('25.3%', not '25%')."""
    whole = f"{share:.0%}"
    return f"{share:.1%}" if whole == f"{TOO_NOISY:.0%}" and share != TOO_NOISY else whole


def _pm1(estimate: Estimate) -> str:
    """'75.3 ± 4.6' (milliseconds, one decimal each): for the times a percent is computed
    from, so that the percent can be checked against them."""
    if math.isnan(estimate.stderr):
        return f"{1e3 * estimate.value:.1f}"
    return f"{1e3 * estimate.value:.1f} ± {1e3 * estimate.stderr:.1f}"


def _alone(first: Mapping[str, Estimate], second: Mapping[str, Estimate], part: str):
    """The whole time per step of the first run with only `part` changed to the second
    run's, judged against the first run's whole by the margin rule (with that part's
    standard errors): did this part alone move the time per step beyond the margin? Returns
    the verdict, the change as a share of the first run's whole, and the margin."""
    change = second[part].value - first[part].value
    base = first["whole"].value
    moved = Estimate(base + change, second[part].stderr, second[part].count)
    fixed = Estimate(base, first[part].stderr, first[part].count)
    return judge(moved, fixed), change / base, relative_margin(moved, fixed)


HOLDS = 0.25  # a part holds a remainder when the other parts together make at most this share


def _holder(alone: Mapping[str, tuple], remainder: float, exclude: Sequence[str]) -> str | None:
    """The one part, among those not in `exclude`, whose change makes up `remainder` (the
    others together at most a quarter of it), or None when it is spread over several."""
    candidates = [part for part in RUN_PARTS if part not in exclude]
    if not candidates or remainder == 0:
        return None
    part = max(candidates, key=lambda name: alone[name][1] * math.copysign(1, remainder))
    if abs(remainder - alone[part][1]) <= HOLDS * abs(remainder):
        return part
    return None


def _step_times(report: Mapping) -> list[tuple[int, float]]:
    """(step number, seconds) of each timed step; the first timed step is the one after the
    compiling step."""
    first = report["start_step"] + 2
    return [(first + i, b - a) for i, (a, b) in enumerate(report["step_spans"])]


def _step_note(first: Mapping, second: Mapping, slowest: int = 3) -> str:
    """Where the step's change lies: its median against its mean (all steps, or a few), the
    slowest steps of each run, and whether the resumed run's slowest are its first after
    compiling (which the steps compared hold for the resumed run only)."""
    a, b = _step_times(first), _step_times(second)
    means = [float(np.mean([s for _, s in run])) for run in (a, b)]
    medians = [float(np.median([s for _, s in run])) for run in (a, b)]
    mean_change, median_change = means[1] - means[0], medians[1] - medians[0]
    line = (f"The step's median: {_ms(medians[1])} against {_ms(medians[0])} ms, "
            f"{median_change * 1e3:+.1f} ms where the mean moved {mean_change * 1e3:+.1f} ms")
    moved = median_change / medians[0]  # the typical step's change, as a share of it
    if mean_change != 0 and median_change * mean_change < 0:
        line += (f": the typical step moved the other way ({moved:+.0%}), so the change lies "
                 "in a few slow steps")
    elif abs(median_change) >= 0.5 * abs(mean_change):
        line += f": the typical step changed ({moved:+.0%}), not only a few"
    elif abs(moved) <= NOISE_FLOOR:
        line += (f": the typical step barely changed ({_signed(moved)}, within "
                 f"{NOISE_FLOOR:.0%}), the change lies in a few slow steps")
    else:
        line += (f": the typical step changed too ({moved:+.0%}), but by less than half as "
                 "much as the mean: a few slow steps hold the rest")

    def listed(run):
        worst = sorted(run, key=lambda item: -item[1])[:slowest]
        return ", ".join(f"{_ms(seconds)} at step {number}" for number, seconds in worst)

    line += (f". The slowest steps (ms): {listed(b)} in the resumed run; {listed(a)} in the "
             "uninterrupted run")
    worst = sorted(b, key=lambda item: -item[1])[:slowest]
    compiled = second["start_step"] + 1
    early = range(compiled + 1, compiled + 1 + 2 * slowest)  # the first steps after compiling
    first_compiled = first.get("compile_step", first["start_step"] + 1)
    if len(b) >= 4 * slowest and all(number in early for number, _ in worst) \
            and first_compiled < compiled:
        line += (f": the resumed run's slowest steps are among its first {2 * slowest} after "
                 f"its compiling step (step {compiled}), while the uninterrupted run compiled "
                 f"at step {first_compiled}, before the steps compared. This run does not "
                 "measure why a fresh process's first steps are slow")
    return line


def process_speed_sentence(first: Mapping, second: Mapping) -> str:
    """One process in two runs (`first`, `second`: their reports): the time per step and its
    parts, all means per step (they add up to the whole), the margin rule's verdict on the
    whole, and where a change went: the parts that move the time per step beyond the margin
    on their own are named; a remainder is placed in the one part that holds it (within that
    part's own margin), or said to be spread when no part does."""
    a, b = per_step(first), per_step(second)
    saves = [time_split(report)["saves"] for report in (first, second)]
    steps = [len(report["step_spans"]) for report in (first, second)]
    head = (f"Process {second['rank']}: {_pm1(b['whole'])} against {_pm1(a['whole'])} ms per "
            f"step (its wall time over its {steps[1]} steps, ± the standard error of its step "
            "and its wait combined), made of, as "
            f"means per step: the step {_pm1(b['step'])} against {_pm1(a['step'])} ms (± its "
            "standard error), "
            f"waiting for data {1e3 * b['wait'].value:.1f} against "
            f"{1e3 * a['wait'].value:.1f} ms, "
            f"the checkpoints {_pm1(b['checkpoint'])} against {_pm1(a['checkpoint'])} ms "
            f"({_count(saves[1], 'save')} in {steps[1]} steps against {saves[0]} in "
            f"{steps[0]}), the rest of the loop {_pm1(b['rest'])} against "
            f"{_pm1(a['rest'])} ms. ")
    verdict = judge(b["whole"], a["whole"])
    margin = relative_margin(b["whole"], a["whole"])
    alone = {part: _alone(a, b, part) for part in RUN_PARTS}
    moved = {part: (v, change) for part, (v, change, _) in alone.items()
             if v in (BETTER, WORSE)}

    def named(parts):  # each with the margin it was judged by, its own
        return " and ".join(f"{RUN_PARTS[part]} ({moved[part][1]:+.0%} on "
                            f"{'their' if part in PLURAL_PARTS else 'its'} own, margin "
                            f"{_margin(alone[part][2])})"
                            for part in parts)

    def held(part):
        change_ms = 1e3 * (b[part].value - a[part].value)
        its = "their" if part in PLURAL_PARTS else "its"
        part_margin = alone[part][2]
        # the margin comes from the part's spread only when it is wider than the floor
        source = (f"from {its} spread" if part_margin > NOISE_FLOOR
                  else f"the course's {NOISE_FLOOR:.0%} floor")
        within = (f"is too noisy to tell on {its} own (a margin of {_margin(part_margin)}, "
                  f"{source})" if part_margin > TOO_NOISY else
                  f"stays within {its} margin on {its} own ({_margin(part_margin)}, {source})")
        if part in PLURAL_PARTS:
            within = within.replace("is too", "are too").replace("stays", "stay")
        return (f"lies in {RUN_PARTS[part]} ({alone[part][1]:+.0%} on {its} own, "
                f"{change_ms:+.1f} ms per step), which {within}")

    notes = []

    def finish(line):
        # the step's median and slowest steps, unless the step is too noisy to judge alone
        if ("step" in moved or "step" in notes) and alone["step"][0] != TOO_NOISY_TO_TELL:
            line += ". " + _step_note(first, second)
        if "checkpoint" in moved or "checkpoint" in notes:
            line += ". " + _saves_sentence(first, second)
        return head + line + "."

    if verdict == TOO_NOISY_TO_TELL:
        return head + (f"Too noisy to tell (a margin of {_margin(margin)}, wider than "
                       f"{TOO_NOISY:.0%}): no cause can be named.")
    total = b["whole"].value / a["whole"].value - 1
    if verdict == SAME:
        if not moved:
            return head + (f"The same within the margin ({_margin(margin)}), and no part on its "
                           "own moved beyond its own margin.")
        rest = total - sum(change for _, change in moved.values())

        def own(part):  # a part is judged by its own margin, which may be narrower
            return f"{RUN_PARTS[part]} by {moved[part][1]:+.0%} (margin {_margin(alone[part][2])})"

        several = len(moved) > 1
        return finish(f"The same within the margin ({_margin(margin)}), at {_signed(total)}, "
                      "though on "
                      + (f"their own {_count(len(moved), 'part')} moved beyond their own "
                         "margins: " if several else "its own one part moved beyond its own "
                         "margin: ")
                      + " and ".join(own(part) for part in moved) + "; the other parts "
                      f"together: {_signed(rest)}")
    word = "slower" if verdict == WORSE else "faster"
    causes = sorted((part for part, (v, _) in moved.items() if v == verdict),
                    key=lambda part: -abs(moved[part][1]))
    against = [part for part, (v, _) in moved.items() if v != verdict]
    line = f"{word.capitalize()}, beyond the margin ({_margin(margin)}), by {total:+.0%}: "
    remainder = total - sum(moved[part][1] for part in (*causes, *against))
    # the named parts account for the change when what they leave is within the margin and
    # that margin could tell (at most 25%); inside a wider margin only a remainder under the
    # 5% floor is nothing: a larger one is too noisy to call nothing, and is placed below
    accounted = abs(remainder) <= (margin if margin <= TOO_NOISY else NOISE_FLOOR)
    holder = _holder(alone, remainder, [*causes, *against])
    if holder is not None and not (causes and accounted):
        notes.append(holder)  # named below, so its notes follow
    if causes:
        single = len(causes) == 1 and causes[0] not in PLURAL_PARTS
        named_change = sum(moved[part][1] for part in (*causes, *against))
        if accounted and abs(remainder) > abs(named_change):
            # the rule's verdict, but what is left is larger than what is named: say only that
            its = "their" if len(causes) > 1 or causes[0] in PLURAL_PARTS else "its"
            line += (f"of its parts, only {named(causes)} moved it beyond {its} own margin"
                     + (f", partly offset by {named(against)}" if against else ""))
            other = f"; the other {_signed(remainder)}"
            if holder is not None:  # where it lies, with that part's own margin
                its_own = "their" if holder in PLURAL_PARTS else "its"
                share, its_margin = alone[holder][1], _margin(alone[holder][2])
                other += (f", nearly all in {RUN_PARTS[holder]} ({share:+.0%} on {its_own} "
                          f"own, margin {its_margin}),")
            line += (f"{other} lies within the {_margin(margin)} margin, so this run names no "
                     "other cause" if margin <= TOO_NOISY else f"{other} is under the course's "
                     f"{NOISE_FLOOR:.0%} floor, so this run names no other cause")
            return finish(line)
        if accounted:
            line += f"{named(causes)} {'accounts' if single else 'account'} for it"
            if against:
                line += f", partly offset by {named(against)}"
            if f"{abs(remainder):.0%}" != "0%":  # say what the named parts leave, and why
                line += (f" (the other {remainder:+.0%} lies within the {_margin(margin)} margin)"
                         if margin <= TOO_NOISY else f" (the other {remainder:+.0%} is under "
                         f"the course's {NOISE_FLOOR:.0%} floor: inside a margin wider than "
                         f"{TOO_NOISY:.0%}, only that little is left to chance)")
            return finish(line)
        line += (f"{named(causes)} {'moves' if single else 'move'} it beyond the margin"
                 + (f", partly offset by {named(against)}" if against else ""))
        if holder is not None:
            return finish(line + f"; the other {_signed(remainder)} " + held(holder))
        return finish(line + f"; the other {_signed(remainder)} is spread over parts none of "
                      "which moves beyond the margin alone, so this run cannot say where it "
                      "went")
    line += "no part alone moves the time per step beyond the margin"
    if against:
        line += f" ({named(against)} moved the other way)"
    if holder is not None:
        return finish(line + ", but the change " + held(holder))
    return finish(line + ", and the change is spread over several parts, so this run cannot "
                  "say which part made it " + word)


def _saves_sentence(first: Mapping, second: Mapping) -> str:
    """Every save of one process in both runs, those in the steps compared apart from the
    others (which the time per step does not hold), and, when it holds, that each run's
    first save took longest while the steps compared hold only the resumed run's first."""
    def saves(report):
        return [(step, b - a) for step, a, b in report["save_spans"]]

    def listed(pairs):
        return ", ".join(f"{_ms(seconds)} after step {step}" for step, seconds in pairs)

    def runs(pick):
        chosen = [(pick(report), run) for report, run in ((second, "the resumed run"),
                                                          (first, "the uninterrupted run"))]
        return "; ".join(f"{listed(pairs)} in {run}" for pairs, run in chosen if pairs)

    outside = runs(lambda report: [save for save in saves(report)
                                   if save not in _saves_inside(report)])
    line = (f"Its saves took (ms), in the steps compared: {runs(_saves_inside) or 'none'}"
            + (f"; outside them: {outside}" if outside else ""))
    both = [saves(first), saves(second)]
    start = second["start_step"] + 2  # the first step compared
    if all(len(run) > 0 and max(run, key=lambda save: save[1]) == run[0] for run in both) \
            and both[0][0][0] < start <= both[1][0][0] and len(both[0]) > 1:
        line += (". In each run the process's first save took longest, and the steps compared "
                 "hold the resumed run's first save but not the uninterrupted run's")
    return line


def from_step(report: Mapping, first: int) -> dict:
    """A process's report cut to its timed steps from step `first` on (the waits and steps
    before them left out; the saves stay, and `time_split` keeps those inside the span)."""
    skip = max(first - (report["start_step"] + 2), 0)  # the first timed step's number
    return {**report, "start_step": report["start_step"] + skip,
            "compile_step": report.get("compile_step", report["start_step"] + 1),
            "wait_spans": report["wait_spans"][skip:],
            "step_spans": report["step_spans"][skip:]}


def between(report: Mapping, first: int, last: int) -> dict:
    """A process's report cut to its timed steps `first` to `last` (the saves stay, and
    `time_split` keeps those inside the span)."""
    cut = from_step(report, first)
    keep = max(last - cut["start_step"] - 1, 0)  # timed steps are numbered from start + 2
    return {**cut, "wait_spans": cut["wait_spans"][:keep],
            "step_spans": cut["step_spans"][:keep]}


SPAN_CONCLUSIONS = {
    "saves": "So in each process the saves account for the difference: without them, the two "
             "spans take the same time per step within their margins",
    "more": "So in each process the saves account for part of the difference, but without them "
            "the two spans still differ beyond the margin; this run does not measure what "
            "else does",
    "noisy_rest": "In each process the saves moved the time per step beyond their own "
                  "margin, but without them the times are too noisy to tell whether anything "
                  "else did",
    "larger": "In each process the saves moved the time per step beyond their own margin, "
              "but what they leave, though within the margin, is more than they moved, so "
              "this run does not say that the saves account for the difference",
    "other": "So the saves do not account for the difference: they did not move the time per "
             "step beyond their own margin, or moved it the other way; this run does not "
             "measure what does",
    "same": "Each process's own timings give the two spans the same time per step within "
            "its margin: they do not confirm a difference in rate beyond the noise",
    "noisy": "Each process's timings are too noisy to tell the two spans apart",
}
SPAN_KINDS = {"saves": "the saves account for it", "more": "the saves and more",
              "noisy_rest": "the saves, the rest too noisy to tell",
              "larger": "the saves, but less than what they leave", "other": "not the saves",
              "same": "the same time per step", "noisy": "too noisy to tell"}


def _span_verdict(early: Mapping, late: Mapping) -> tuple[str, str]:
    """One process's later span against its earlier one, by `process_speed_sentence`'s rule:
    its time per step with the saves, the saves' own change, and the time without them.
    Returns the kind of outcome (a key of `SPAN_CONCLUSIONS`) and its figures in words."""
    a, b = per_step(early), per_step(late)
    verdict, margin = judge(b["whole"], a["whole"]), relative_margin(b["whole"], a["whole"])
    total = b["whole"].value / a["whole"].value - 1
    saves, change, save_margin = _alone(a, b, "checkpoint")
    without = [Estimate(run["whole"].value - run["checkpoint"].value, run["whole"].stderr,
                        run["whole"].count, "mean") for run in (a, b)]
    apart = judge(without[1], without[0])
    apart_margin = relative_margin(without[1], without[0])
    def said(kind: str, share: float) -> str:
        if kind == SAME:
            return f"within its {_margin(share)} margin"
        if kind == TOO_NOISY_TO_TELL:
            return f"inside a {_margin(share)} margin: too noisy to tell"
        return f"beyond its {_margin(share)} margin"

    figures = (f"{_pm1(b['whole'])} against {_pm1(a['whole'])} ms per step ({_signed(total)}, "
               f"{said(verdict, margin)}), the saves' change alone {_signed(change)} "
               f"(margin {save_margin:.0%}), without the saves {_pm1(without[1])} against "
               f"{_pm1(without[0])} ms ({_signed(without[1].value / without[0].value - 1)}, "
               f"{said(apart, apart_margin)})")
    if verdict == TOO_NOISY_TO_TELL:
        return "noisy", figures
    if verdict == SAME:
        return "same", figures
    if saves != verdict:
        return "other", figures
    if apart == TOO_NOISY_TO_TELL:
        return "noisy_rest", figures
    if apart != SAME:
        return "more", figures
    return ("saves" if abs(total - change) <= abs(change) else "larger"), figures


def span_sentence(steps: Sequence[Mapping], reports: Sequence[Mapping], first: int) -> str:
    """One run's rate over its steps from `first` on against its rate over all the steps
    after its compiling step (section 3's) and over the steps before `first`; then, per
    process, its steps from `first` on against the steps before them (two spans that do not
    overlap): the saves each holds, the time per step with and without them, each judged
    with its standard error (`_span_verdict`). One conclusion is drawn for the run only
    when every process reaches the same one."""
    before = [step for step in steps if step["step"] <= first - 1]
    span = [step for step in steps if step["step"] >= first - 1]
    rates = [tokens_per_second(steps), tokens_per_second(before), tokens_per_second(span)]
    last = steps[-1]["step"]
    head = steps[1]["step"]
    line = (f"The uninterrupted run's {format_rate(rates[2])} real tokens per second over "
            f"steps {first}-{last} against its {format_rate(rates[0])} over steps "
            f"{head}-{last} (section 3) and {format_rate(rates[1])} over steps "
            f"{head}-{first - 1}")
    if judge(Estimate.once(1 / rates[2]), Estimate.once(1 / rates[1])) == SAME:
        return line + (f": steps {first}-{last} and steps {head}-{first - 1} run at the same "
                       f"rate within the {NOISE_FLOOR:.0%} margin.")
    parts, kinds = [], []
    for report in reports:
        early = between(report, report["start_step"] + 2, first - 1)
        late = from_step(report, first)
        splits = [time_split(early), time_split(late)]
        kind, figures = _span_verdict(early, late)
        kinds.append(kind)
        parts.append(f"process {report['rank']}, {_count(splits[1]['saves'], 'save')} in steps "
                     f"{first}-{last} against {splits[0]['saves']} in steps "
                     f"{head}-{first - 1}: {figures}")
    line += (f". Each process's steps {first}-{last} against its steps {head}-{first - 1}, "
             "which do not overlap (± the standard error of the step and the wait combined; "
             "the saves, a total, judged on their own by the 5% floor): " + "; ".join(parts))
    if len(set(kinds)) == 1:
        return line + ". " + SPAN_CONCLUSIONS[kinds[0]] + "."
    told = ", ".join(f"process {report['rank']}: {SPAN_KINDS[kind]}"
                     for report, kind in zip(reports, kinds, strict=True))
    return line + (f". The processes do not agree ({told}), so this run cannot say whether "
                   "the saves account for the difference in rate.")


def runs_sentence(first_steps: Sequence[Mapping], first_reports: Sequence[Mapping],
                  second_steps: Sequence[Mapping], second_reports: Sequence[Mapping]) -> str:
    """The resumed run against the uninterrupted one over the same steps, those the resumed
    run timed (after its compiling step), so that both hold the same batches and the same
    saves: real tokens per second, then each process's time per step judged by the margin
    rule, with its parts (`process_speed_sentence`)."""
    timed = {step["step"] for step in second_steps[1:]}  # after the compiling step
    same = [step for step in first_steps if step["step"] >= min(timed) - 1]
    first_rate, second_rate = tokens_per_second(same), tokens_per_second(second_steps)
    # One verdict, per process, from its own timings: the rates (rank 0's log) are given
    # as numbers only, so that two measurements of one thing cannot disagree in words.
    lines = [f"Steps {min(timed)}-{max(timed)} (from the end of step {min(timed) - 1} to the "
             f"end of step {max(timed)}), the same steps in both runs: "
             f"{format_rate(second_rate)} real tokens per second in the "
             f"resumed run against {format_rate(first_rate)} in the uninterrupted one "
             f"({second_rate / first_rate - 1:+.0%}). Each process's time per step over steps "
             f"{min(timed)}-{max(timed)}, as it timed them, judged by the margin rule, and "
             "where it went (resumed run against uninterrupted run):"]
    by_rank = {report["rank"]: report for report in first_reports}
    for report in second_reports:
        first = from_step(by_rank[report["rank"]], report["start_step"] + 2)
        lines.append(process_speed_sentence(first, report))
    lines.append(span_sentence(first_steps, first_reports, min(timed)))  # after the processes
    return "\n".join(lines)


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


def global_batch_sentence(check: Mapping) -> str:
    """What `global_batch_check` found, in one sentence per outcome."""
    rows = check["global_shape"][0]
    parts = ", ".join(f"process {rank}'s {tuple(shape)}"
                      for rank, shape in enumerate(check["local_shapes"]))
    head = f"The global batch is {tuple(check['global_shape'])}, from {parts}; "
    if any(count != check["steps"] for count in check["counted"]):
        return head + (f"the processes logged {check['counted']} local batches for "
                       f"{check['steps']} steps, so they cannot be matched.")
    if check["matching"] == check["steps"]:
        return head + (f"at all {check['steps']} steps, each process's block of its {rows} "
                       "rows has the checksum of the local batch that process built.")
    return head + (f"only at {check['matching']} of {check['steps']} steps does each "
                   "process's block of rows have the checksum of its local batch.")


# -- where the time goes ----------------------------------------------------------------
def _timed_window(report: Mapping) -> tuple[float, float]:
    """Where a process's timed steps begin and end: its first wait to its last step."""
    spans = report["wait_spans"] + report["step_spans"]
    return min(span[0] for span in spans), max(span[1] for span in spans)


def _saves_inside(report: Mapping) -> list[tuple[int, float]]:
    """(step, seconds) of each save that lies within the process's timed steps, those
    `time_split` counts."""
    start, end = _timed_window(report)
    return [(step, b - a) for step, a, b in report["save_spans"] if a >= start and b <= end]


def time_split(report: Mapping) -> dict[str, float]:
    """A process's wall time (after the compiling step) split into seconds in the step,
    waiting for data, saving checkpoints, and the rest of the loop (logging, checksums)."""
    waits, steps = report["wait_spans"], report["step_spans"]
    start, end = _timed_window(report)
    wall = end - start
    step = sum(b - a for a, b in steps)
    wait = sum(b - a for a, b in waits)
    saves = _saves_inside(report)
    checkpoint = sum(seconds for _, seconds in saves)
    return {"wall": wall, "step": step, "wait": wait, "checkpoint": checkpoint,
            "saves": len(saves), "rest": wall - step - wait - checkpoint}


def rounded_percents(shares: Mapping[str, float]) -> dict[str, int]:
    """Shares of one whole as whole percents that add up to the rounded total: each is
    rounded down, and the points still missing go to the largest remainders (so that
    idle 24% reads 1% + 21% + 2%, never 1% + 21% + 3%)."""
    if any(not math.isfinite(value) for value in shares.values()):
        raise ValueError(f"shares={dict(shares)!r} must be finite numbers.")
    exact = {name: 100 * value for name, value in shares.items()}
    floors = {name: math.floor(value) for name, value in exact.items()}
    missing = round(sum(exact.values())) - sum(floors.values())
    by_remainder = sorted(exact, key=lambda name: exact[name] - floors[name], reverse=True)
    for name in by_remainder[:max(missing, 0)]:
        floors[name] += 1
    return floors


def wall_percents(report: Mapping) -> dict[str, int]:
    """A process's wall time after the compiling step as whole percents, rounded together:
    the step, waiting for data, checkpoints and the rest add up to 100, and "idle" is the
    sum of the last three."""
    split = time_split(report)
    percents = rounded_percents({name: max(split[name], 0.0) / split["wall"]
                                 for name in ("step", "wait", "checkpoint", "rest")})
    return {**percents, "idle": 100 - percents["step"]}


def idle_share(report: Mapping) -> float:
    """The share of a process's wall time (after the compiling step) not spent in the step."""
    split = time_split(report)
    return 1 - split["step"] / split["wall"]


def idle_summary(reports: Sequence[Mapping]) -> str:
    """Each process's idle share and its three parts, in percent of the wall time."""
    parts = []
    for report in reports:
        percent = wall_percents(report)
        parts.append(f"process {report['rank']} {percent['idle']}% (data {percent['wait']}%, "
                     f"checkpoints {percent['checkpoint']}%, rest {percent['rest']}%)")
    return ", ".join(parts)


CHECKPOINT_LARGE = 0.05  # a share of the wall time worth changing how checkpoints are saved


def _count(number: int, noun: str, plural: str | None = None) -> str:
    """'1 checkpoint', '3 checkpoints'."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def _ranks(ranks: Sequence[int]) -> str:
    """'rank 1', 'ranks 0 and 2', 'ranks 0, 1 and 3'."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(str(r) for r in ranks[:-1]) + f" and {ranks[-1]}"


def job_sentence(result) -> str:
    """What a launch did, rank by rank, in words with their number: which ranks finished,
    failed (and by which signal), were still running at the deadline, or were stopped by
    the launcher because a peer failed."""
    name, count = Path(result.script).name, len(result.ranks)
    if result.ok:
        who = ("the one process" if count == 1 else "both processes" if count == 2
               else f"all {count} processes")
        return f"{name}: {who} finished in {result.elapsed:.1f} s."
    parts = []
    for rank in result.ranks:
        if rank.status == "failed":
            how = (f"was killed by {rank.signal_name}" if rank.signal_name
                   else f"failed with exit code {rank.returncode}")
            parts.append(f"rank {rank.rank} {how}")
    for status, what in (("stuck", f"still running at the {result.timeout:g} s deadline"),
                         ("killed", "stopped by the launcher because a peer failed")):
        ranks = [rank.rank for rank in result.ranks if rank.status == status]
        if ranks:
            parts.append(f"{_ranks(ranks)} {'was' if len(ranks) == 1 else 'were'} {what}")
    return f"{name}: " + "; ".join(parts) + f", after {result.elapsed:.1f} s."


IDLE_PARTS = {"wait": "waiting for data", "checkpoint": "saving checkpoints",
              "rest": "the rest of the loop (logging, checksums)"}


def idle_sentence(reports: Sequence[Mapping], rate: float) -> str:
    """Tokens/s, then each process's wall time split into the step, waiting for data,
    checkpoint saves and the rest, with which part the idle time mostly is."""
    lines = [f"{format_rate(rate)} real tokens per second over both processes, over the steps "
             "after the compiling step, those each process times below."]
    for report in reports:
        split = time_split(report)
        share = {name: split[name] / split["wall"] for name in ("step", *IDLE_PARTS)}
        idle = 1 - share["step"]
        largest = max(IDLE_PARTS, key=share.get)
        percent = wall_percents(report)
        line = (f"Process {report['rank']}: {split['wall']:.1f} s of wall time after the "
                f"compiling step, {percent['step']}% in the step, idle {percent['idle']}%: "
                f"{percent['wait']}% waiting for data, {percent['checkpoint']}% saving "
                f"{_count(split['saves'], 'checkpoint')}, {percent['rest']}% the rest of the "
                "loop (each part rounded so that the parts add up). ")
        if share["wait"] < 0.05:
            line += "The loader keeps up (under 5% waiting); "
        else:
            line += "The loader makes the step wait (5% of the wall time or more); "
        if idle < 0.02:
            line += "there is almost no idle time (under 2%)."
        else:
            # "most" only when the part is more than half the idle time
            most = "most of" if share[largest] > idle / 2 else "the largest part of"
            if largest == "checkpoint" and share["checkpoint"] >= CHECKPOINT_LARGE:
                line += (f"{most} the idle time is saving checkpoints, "
                         f"{percent['checkpoint']}% of the wall time (at least the "
                         f"{CHECKPOINT_LARGE:.0%} at which this sentence advises a change): the "
                         "saves are synchronous, so a longer job would save less often or "
                         "asynchronously.")
            else:
                line += f"{most} the idle time is {IDLE_PARTS[largest]}."
        lines.append(line)
    return "\n".join(lines)


def _window(report: Mapping, first: int, last: int) -> dict[str, list[tuple[float, float]]]:
    """The spans of steps `first`..`last` of one process: waits, steps and saves."""
    number = report["start_step"] + 2  # the first timed step (the compiling one is left out)
    pick = {"wait": [], "step": [], "checkpoint": []}
    for i, (wait, step) in enumerate(zip(report["wait_spans"], report["step_spans"],
                                         strict=True)):
        if first <= number + i <= last:
            pick["wait"].append(tuple(wait))
            pick["step"].append(tuple(step))
    pick["checkpoint"] = [(a, b) for s, a, b in report["save_spans"] if first <= s < last]
    return pick


def plot_run(steps: Sequence[Mapping], reports: Sequence[Mapping],
             resumed: Sequence[Mapping] | None = None, killed_after: int | None = None,
             run: str = "uninterrupted run", around: int | None = None, width: int = 3,
             unigram: float | None = None):
    """The loss per step (and the resumed run's on top) with its two baselines (ln 256, a
    uniform guess, and `unigram`, the bytes' own frequencies, when given), then for each
    process of the run that `reports` come from (named by `run`) a window of its timeline:
    `width` steps on each side of the checkpoint saved after step `around`."""
    import matplotlib.pyplot as plt

    from course_lib.profiling import COMPUTE_COLOR, EDGE_COLOR, WAIT_COLOR

    figure, axes = plt.subplots(1 + len(reports), 1, figsize=(11, 3 + 2.0 * len(reports)),
                                gridspec_kw={"height_ratios": [3] + [1.4] * len(reports)})
    loss_ax = axes[0]
    loss_ax.plot([s["step"] for s in steps], [s["loss"] for s in steps], color="tab:blue",
                 label="uninterrupted run")
    if resumed:
        loss_ax.plot([s["step"] for s in resumed], [s["loss"] for s in resumed], "o",
                     markersize=3, color="tab:orange",
                     label=f"resumed run, steps {resumed[0]['step']}-{resumed[-1]['step']} "
                           "(the killed run's steps not drawn)")
    if killed_after is not None:
        loss_ax.axvline(killed_after, color="tab:red", linestyle="--",
                        label=f"SIGKILL after step {killed_after}")
    loss_ax.axhline(math.log(256), color="gray", linestyle=":",
                    label=f"uniform guess: ln 256 = {math.log(256):.2f}")
    if unigram is not None:
        loss_ax.axhline(unigram, color="black", linestyle="-.", linewidth=1,
                        label=f"bytes' frequencies (unigram entropy) = {unigram:.2f}")
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("next-byte loss (nats)")
    loss_ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0,
                   fontsize=8)  # beside the panel: inside, it would hide a line
    loss_ax.set_title("Training loss")
    lanes = (("step", 0, COMPUTE_COLOR, "computing"), ("wait", 1, WAIT_COLOR,
             "waiting for data"), ("checkpoint", 2, "tab:purple", "saving a checkpoint"))
    for ax, report in zip(axes[1:], reports, strict=True):
        spans = _window(report, around - width + 1, around + width)
        origin = min(a for part in spans.values() for a, _ in part)
        for name, lane, color, _ in lanes:
            part = spans[name]
            ax.barh([lane] * len(part), [1e3 * (b - a) for a, b in part],
                    left=[1e3 * (a - origin) for a, _ in part], height=0.8, color=color,
                    edgecolor=EDGE_COLOR, linewidth=0.6)
        ax.set_yticks([lane for _, lane, _, _ in lanes], [label for *_, label in lanes])
        ax.set_xlabel("time (ms); white gaps: the rest of the loop")
        percent = wall_percents(report)
        ax.set_title(
            f"{run}, process {report['rank']}: steps {around - width + 1}-{around + width}, "
            f"around the checkpoint after step {around}.\nOver the run: idle "
            f"{percent['idle']}% = {percent['wait']}% data + {percent['checkpoint']}% "
            f"checkpoints + {percent['rest']}% rest", fontsize=9)
    figure.tight_layout()
    return figure


def _ordinal(number: int) -> str:
    if number % 100 in (11, 12, 13):
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")


def summary_lines(numbers: Mapping[str, object]) -> list[str]:
    """What was built, each part with the lesson it came from and its number in this run."""
    shares = ", ".join(f"{share:.2%}" for share in numbers["record_share"])
    weights = numbers["weights"]
    count = numbers["processes"]
    every = "every record" if count == 1 else f"every {count}{_ordinal(count)} record"
    return [
        f"Lesson 9  sharded ArrayRecord files: {numbers['records']:,} records in "
        f"{numbers['files']} files, {numbers['bytes_on_disk']:,} bytes on disk",
        f"Lesson 5  each process reads {every} of each corpus, from its own index; a global "
        f"batch of {numbers['global_rows']} rows from {count} local batches "
        "(measured: shapes and checksums)",
        f"Lesson 13 two corpora mixed by weight: the rule's {weights[0]}:{weights[1]} "
        f"({weights[0] / sum(weights):.2%} docstrings); docstrings {shares} of the records, by "
        "process",
        f"Lesson 10 packed rows of {numbers['row_length']} bytes: "
        f"{100 * numbers['fill']:.0f}% of the slots hold real tokens",
        f"Lesson 6  the step traced "
        f"{'once' if numbers['max_traces'] == 1 else _count(numbers['max_traces'], 'time')} "
        "per process, resume included",
        f"Lesson 7  {format_rate(numbers['tokens_per_second'])} real tokens/s; idle share "
        f"{numbers['idle']}",
        f"Lesson 8  one Orbax checkpoint: model, optimizer, {numbers['processes']} data "
        f"positions; killed after step {numbers['killed_after']}, resumed from step "
        f"{numbers['resumed_from']}, {numbers['equal_steps']} steps equal bit for bit",
    ]


# -- the mixture ------------------------------------------------------------------------
def mixture_check(report: Mapping) -> dict:
    """What one process's batches held, from its report's per-step counts (records of each
    corpus, then tokens of each): totals, shares, the share of single batches, and at how
    many steps the records so far were exactly the mix's rule of the weights."""
    from course_lib.mixing import integer_weights

    counts = report["mixture"]
    weights = integer_weights([report["mix"], 1 - report["mix"]], 2)
    records, tokens = [0, 0], [0, 0]
    on_rule, batch_shares = 0, []
    for first, second, first_tokens, second_tokens in counts:
        records = [records[0] + first, records[1] + second]
        tokens = [tokens[0] + first_tokens, tokens[1] + second_tokens]
        on_rule += records[1] == sum(records) * weights[1] // sum(weights)
        batch_shares.append(first / (first + second))
    both = sum(first_tokens > 0 and second_tokens > 0 for _, _, first_tokens, second_tokens
               in counts)  # batches holding tokens of both corpora
    return {"rank": report["rank"], "mix": report["mix"], "steps": len(counts),
            "weights": weights, "rule_share": weights[0] / sum(weights),
            "records": records, "tokens": tokens, "on_rule": on_rule, "with_both": both,
            "record_share": records[0] / sum(records), "token_share": tokens[0] / sum(tokens),
            "batch_share": (min(batch_shares), max(batch_shares)),
            "records_per_batch": sum(records) / len(counts)}


def weights_sentence(mix: float, names: Sequence[str] = CORPORA) -> str:
    """The whole-number weights the mix's rule makes of the script's `--mix` (`mix` for the
    first corpus, `1 - mix` for the second), and the share of records they give."""
    from course_lib.mixing import integer_weights

    floats = [mix, 1 - mix]
    weights = integer_weights(floats, 2)
    share = weights[0] / sum(weights)
    smallest = min(floats)
    scaled = smallest * (100 / smallest)
    under = ("" if int(scaled) == 100 else
             f" (in floating point, {smallest!r} x (100 / {smallest!r}) is {scaled!r}, just "
             f"under 100, so the smallest truncates to {int(scaled)})")
    line = (f"The script's weights are {floats[0]!r} for the {names[0]} and 1 - {floats[0]!r} "
            f"= {floats[1]!r} for the {names[1]}. The mix's rule (Grain 0.2.18's "
            "`_float_to_int_proportions`, and course_lib's `integer_weights`) turns them into "
            f"whole numbers: it scales the smallest weight to 100 and truncates each{under}, "
            f"giving {weights[0]}:{weights[1]}, so the {names[0]} get "
            f"{weights[0]}/{sum(weights)} = {share:.2%} of the records")
    if math.isclose(share, mix, rel_tol=0, abs_tol=1e-12):
        return line + f", exactly the {mix:.0%} asked for."
    return line + (f", not {mix:.0%} (weights whose smallest scales to 100 exactly, such as "
                   "0.75 and 0.25, 300:100, give their share exactly).")


def mixture_sentence(check: Mapping, names: Sequence[str] = CORPORA) -> str:
    """The records' and tokens' shares of the first corpus against the weight, and why the
    tokens' share differs when it does."""
    first, second = names
    weights = ":".join(str(weight) for weight in check["weights"])
    head = (f"Process {check['rank']}, {check['steps']} steps, weights {weights} "
            f"({check['rule_share']:.2%} {first}): {check['records'][0]:,} {first} and "
            f"{check['records'][1]:,} {second} records, {check['record_share']:.2%} {first}; ")
    if check["on_rule"] == check["steps"]:
        head += (f"after every step the records so far are exactly what {weights} gives "
                 f"(the {second} records: the records so far times {check['weights'][1]}/"
                 f"{sum(check['weights'])}, rounded down), because packing takes a prefix of "
                 "the mixed stream for each batch. ")
    else:
        head += (f"only after {check['on_rule']} of {check['steps']} steps are the records so "
                 "far the mix's rule of the weights. ")
    low, high = check["batch_share"]
    head += (f"Single batches (about {check['records_per_batch']:.0f} records each) held between "
             f"{low:.0%} and {high:.0%} {first}. ")
    lengths = [t / r for t, r in zip(check["tokens"], check["records"], strict=True)]
    gap = check["token_share"] - check["record_share"]
    tokens = f"In tokens, {first} are {check['token_share']:.1%}: "
    # shares counted exactly: only the course's 5% floor applies (judge of single values)
    token_share = Estimate.once(check["token_share"])
    record_share = Estimate.once(check["record_share"])
    verdict = judge(token_share, record_share)
    if verdict == SAME:
        margin = relative_margin(token_share, record_share)
        return head + tokens + (f"about their share of records (within the course's "
                                f"{margin:.0%} margin): the weights hold for tokens too.")
    side = "more" if gap > 0 else "less"
    return head + tokens + (f"{side} than their share of records, because the {first} "
                            f"records this process drew hold {lengths[0]:.0f} bytes on average "
                            f"and its {second} records {lengths[1]:.0f}: the weights count "
                            "records, not tokens.")
