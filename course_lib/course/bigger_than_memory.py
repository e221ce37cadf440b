"""Lesson 9, data bigger than memory: what loading a set whole costs, three formats on disk
read warm and cold, the memory an epoch takes, and slow storage hidden by read threads.

Two kinds of memory matter, and Linux counts them apart in `/proc/self/status`:

- `RssAnon`, anonymous memory: the process's arrays and objects, backed by no file. The
  kernel can only get it back by killing the process (or swapping). After a fork, the pages
  parent and child still share copy-on-write count in the `RssAnon` of both, until one of
  them writes to a page and gets its own copy.
- `RssFile`, pages of files that the process has mapped (a memory-mapped record file). They
  belong to the page cache, the kernel's copy of recently read files, shared by every
  process, and dropped whenever memory is needed elsewhere.

A source that reads records on demand keeps `RssAnon` flat however large the data set is;
the page cache grows and shrinks on its own. Reading a data set whole grows `RssAnon` by
its size.
"""

from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from course_lib.course.basics import (
    BETTER,
    DIGIT_SIDE,
    NOISY_EXPLANATION,
    SAME,
    TOO_NOISY_TO_TELL,
    WORSE,
    Comparison,
    digits,
    format_duration,
    format_times,
    upscale,
)
from course_lib.transforms import MapTransform

# -- the records ----------------------------------------------------------------------------


class DigitRecords:
    """`count` records as bytes, made on demand from the upscaled scikit-learn digits.

    Record `k` is digit `k % 1797`: one byte of label, then `side * side` bytes of pixels.
    Nothing but the 1,797 upscaled digits is held in memory, so a writer can stream a data
    set far larger than them to disk."""

    def __init__(self, count: int, side: int = DIGIT_SIDE):
        data = digits()
        self.count, self.side = int(count), int(side)
        self.images = upscale(data["image"], side)
        self.labels = data["label"].astype(np.uint8)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, record_key: int) -> bytes:
        if not 0 <= record_key < self.count:
            raise IndexError(f"record_key={record_key} is out of range for {self.count} records")
        digit = record_key % len(self.labels)
        return bytes([self.labels[digit]]) + self.images[digit].tobytes()

    @property
    def record_bytes(self) -> int:
        return 1 + self.side * self.side

    def record_dtype(self) -> np.dtype:
        return np.dtype([("label", np.uint8), ("image", np.uint8, (self.side, self.side))])


class DecodeDigit(MapTransform):
    """Record bytes (label byte, then pixels) -> {"image": (side, side) uint8, "label": int}."""

    def __init__(self, side: int = DIGIT_SIDE):
        self.side = side

    def map(self, record: bytes) -> dict:
        pixels = np.frombuffer(record, np.uint8, offset=1).reshape(self.side, self.side)
        return {"image": pixels.copy(), "label": int(record[0])}


def write_folder_of_files(records: Sequence[bytes], directory: str | Path) -> list[Path]:
    """One file per record, `000000.bin`, `000001.bin`, ...; returns the paths in order."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"{key:06d}.bin" for key in range(len(records))]
    for key, path in enumerate(paths):
        path.write_bytes(records[key])
    return paths


class FolderOfFilesSource:
    """Record `k` is the bytes of the `k`-th file: one open, one read, one close per record."""

    def __init__(self, paths: Sequence[str | Path]):
        self.paths = [os.fspath(path) for path in paths]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, record_key: int) -> bytes:
        with open(self.paths[record_key], "rb") as file:
            return file.read()


class RecordFileBytes:
    """A memory-mapped record file (`RecordFileDataSource`) whose records are given back as
    the same bytes as the other formats, so that every format serves the same records."""

    def __init__(self, path: str | Path):
        from course_lib.record_file import RecordFileDataSource

        self.source = RecordFileDataSource(path)

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, record_key: int) -> bytes:
        record = self.source[record_key]
        return bytes([int(record["label"])]) + record["image"].tobytes()


def write_digit_record_file(records: DigitRecords, path: str | Path, block: int = 4096) -> Path:
    """The records as a course_lib record file (what `write_record_file` writes), filled
    `block` records at a time through a map of the file, so that the whole set is never in
    memory at once."""
    path = Path(path)
    mapped = np.lib.format.open_memmap(path, mode="w+", dtype=records.record_dtype(),
                                       shape=(len(records),))
    for start in range(0, len(records), block):
        stop = min(start + block, len(records))
        which = np.arange(start, stop) % len(records.labels)
        mapped["label"][start:stop] = records.labels[which]
        mapped["image"][start:stop] = records.images[which]
    mapped.flush()
    del mapped
    return path


def bytes_on_disk(paths: Sequence[str | Path]) -> int:
    """Bytes the files take on disk (allocated blocks, so small files count what they use)."""
    total = 0
    for path in paths:
        status = os.stat(path)
        blocks = getattr(status, "st_blocks", None)
        total += blocks * 512 if blocks is not None else status.st_size
    return total


def writer_options(path: str | Path) -> str:
    """The options an ArrayRecord file was written with, as the file itself records them
    (every option, the defaults included: the codec and its level, the group size)."""
    from course_lib.array_record import array_record_module

    reader = array_record_module().ArrayRecordReader(str(path))
    try:
        return reader.writer_options_string()
    finally:
        reader.close()


# -- memory ---------------------------------------------------------------------------------


def process_memory_mb() -> dict[str, float]:
    """This process's anonymous memory and mapped file pages, in MB of 10^6 bytes (from
    /proc, Linux);
    NaN where /proc is not available."""
    found = {"anonymous": math.nan, "file": math.nan}
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return found
    for line in text.splitlines():
        if line.startswith("RssAnon:"):
            found["anonymous"] = int(line.split()[1]) * 1024 / 1e6  # kB there are KiB
        elif line.startswith("RssFile:"):
            found["file"] = int(line.split()[1]) * 1024 / 1e6
    return found


_MEMORY_SCRIPT = """
import json, sys
import numpy as np
from course_lib.record_file import RecordFileDataSource


def memory():
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return {name: int(fields[key].split()[0]) * 1024 / 1e6
            for name, key in (("anonymous", "RssAnon"), ("file", "RssFile"))}


how, path, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
source = RecordFileDataSource(path)
before = memory()
if how == "whole":
    header = source._needed_bytes - len(source) * source.dtype.itemsize
    data = np.fromfile(path, dtype=source.dtype, count=count, offset=header)
else:
    for key in range(count):
        record = source[key]
after = memory()
print(json.dumps({name: after[name] - before[name] for name in after}))
"""


def memory_growth_mb(how: str, path: str | Path, count: int, timeout: float = 120) -> dict:
    """In a new Python process: how much anonymous memory and mapped file pages (MB) grow
    while the first `count` records of a record file are read `"whole"` (into one array,
    as `np.load` does) or `"lazily"` (one record at a time, each dropped after use).
    NaN where /proc is not available."""
    if how not in ("whole", "lazily"):
        raise ValueError(f"how={how!r} must be 'whole' or 'lazily'.")
    if not Path("/proc/self/status").is_file():
        return {"anonymous": math.nan, "file": math.nan}
    done = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT, how, os.fspath(path),
                           str(count)], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the memory measurement failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def plot_memory_growth(sizes_mb: Sequence[float], whole: Sequence[float],
                       lazily: Sequence[float]):
    """Anonymous memory growth against the data set's size, whole and read lazily."""
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(6.4, 3.8))
    # a wide pale band, so that it still shows where the "whole" line lies on top of it
    ax.plot(sizes_mb, sizes_mb, color="grey", linewidth=9, alpha=0.3, solid_capstyle="butt",
            label="growth = data set size")
    ax.plot(sizes_mb, whole, marker="o", label="read whole (np.load)")
    ax.plot(sizes_mb, lazily, marker="s", label="read one record at a time (memory map)")
    ax.set_xlabel("data set size (MB)")
    ax.set_ylabel("growth of anonymous memory (MB)")
    ax.set_title("The process's own memory against the data set's size")
    ax.legend(fontsize="small")
    figure.tight_layout()
    return figure


def memory_sentence(data_mb: float, whole_mb: float, lazily_mb: float) -> str:
    """What the two growths say, for the largest size measured."""
    if math.isnan(whole_mb) or math.isnan(lazily_mb):
        return ("This system has no /proc/self/status, so the process's memory could not be "
                "read here; on Linux the whole read grows it by the data set's size.")
    whole = (f"Reading {data_mb:.0f} MB whole grew the process's own memory by "
             f"{whole_mb:.0f} MB")
    if whole_mb >= 0.8 * data_mb:
        whole += (", about the data set's size: that memory is the process's until it frees "
                  "the array")
    else:
        whole += (", less than the data set's size (the kernel may not have counted every "
                  "page yet)")
    if lazily_mb <= max(0.1 * data_mb, 10):
        lazy = (f"reading it one record at a time grew it by {lazily_mb:.0f} MB, flat: a "
                "data set ten times larger would cost the same")
    else:
        lazy = (f"reading it one record at a time grew it by {lazily_mb:.0f} MB too, which is "
                "not flat: something kept the records (a list, a cache) instead of dropping "
                "them")
    return f"{whole}; {lazy}."


# -- reads per second, warm and cold ------------------------------------------------------


def drop_page_cache(paths: Sequence[str | Path]) -> bool:
    """Ask the kernel to forget the cached pages of these files (no root needed).

    Only clean pages can be dropped: for pages not yet written to disk the call starts
    writing them, so call it once after writing the files, and again before a cold read.
    (`fsync` would wait for the disk instead, one file at a time, which is slow on a busy
    machine.) Pages that some process still maps stay. Returns False where
    `os.posix_fadvise` does not exist (macOS)."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for path in paths:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)
    return True


def spread_keys(num_records: int, reads: int, spacing: int,
                seed: int = 0) -> list[np.ndarray]:
    """`reads` random record keys in passes, so that a cold read is really cold.

    The keys are cut into blocks of `spacing` consecutive records; within one pass every key
    lies in a block of its own, at the same offset in each block, so any two keys of a pass
    are at least `spacing` records apart. A format that stores its records in chunks of at
    most `spacing` (ArrayRecord with `group_size` up to `spacing`) then reads a different
    chunk for every key of a pass, and after the page cache is dropped before the pass, no
    read finds what an earlier read of the pass brought in. A pass holds at most
    `num_records // spacing` keys, so more reads take more passes; the passes are as even as
    possible, each with its own offset. `spacing=1` gives one pass of random keys."""
    if not isinstance(spacing, int) or spacing < 1:
        raise ValueError(f"spacing={spacing!r} must be a whole number of records, at least 1, "
                         "e.g. 64.")
    blocks = num_records // spacing
    if blocks < 1 or reads < 1:
        raise ValueError(f"num_records={num_records} and reads={reads} must leave at least one "
                         f"block of spacing={spacing} records and one read.")
    generator = np.random.default_rng(seed)
    passes = math.ceil(reads / blocks)
    offsets = generator.choice(spacing, size=passes, replace=passes > spacing)
    sizes = [len(part) for part in np.array_split(np.arange(reads), passes)]
    return [generator.choice(blocks, size=size, replace=False) * spacing + offset
            for size, offset in zip(sizes, offsets, strict=True)]


def passes_sentence(passes: Sequence[Sequence[int]], spacing: int) -> str:
    """How the cold random reads were cut into passes, from the passes themselves: how many
    keys, how many passes of how many, and the closest two keys of a pass."""
    sizes = [len(keys) for keys in passes]
    gaps = [int(np.diff(np.sort(np.asarray(keys))).min()) for keys in passes if len(keys) > 1]
    counts = sorted(set(sizes))
    of = " or ".join(f"{count:,}" for count in counts)
    head = (f"Random reads: {sum(sizes):,} keys in {len(sizes)} pass"
            f"{'es' if len(sizes) > 1 else ''} of {of}, the page cache dropped before each "
            "cold pass, the same keys read again at once for the warm one.")
    if not gaps:
        return head
    closest = min(gaps)
    if closest >= spacing:
        return (f"{head} The closest two keys of a pass lay {closest:,} records apart, so no "
                f"two reads of a pass shared a chunk of up to {spacing} records (a chunk of "
                f"group_size:{spacing}).")
    return (f"{head} The closest two keys of a pass lay only {closest:,} records apart, less "
            f"than {spacing}: two reads of a pass could share a chunk of group_size:{spacing}, "
            "so its cold reads were partly warm.")


def _as_passes(record_keys) -> list[list[int]]:
    keys = list(record_keys)
    if keys and np.ndim(keys[0]) > 0:
        return [[int(key) for key in part] for part in keys]
    return [[int(key) for key in keys]]


def _pass_seconds(make_source: Callable[[], Any], keys: Sequence[int],
                  cold_paths: Sequence[str | Path] | None) -> float:
    """Open a new source and time reading `keys` one at a time (only the reads). With
    `cold_paths`, those files' cached pages are dropped first, after the sources no longer
    referenced are collected, so that no old memory map keeps them cached."""
    if cold_paths is not None:
        gc.collect()
        drop_page_cache(cold_paths)
    source = make_source()
    start = time.perf_counter()
    for key in keys:
        source[key]
    seconds = time.perf_counter() - start
    del source
    return seconds


def read_rate_runs(formats: Mapping[str, tuple[Callable[[], Any], Sequence[Path]]],
                   num_records: int, reads: int | Sequence[Sequence[int]], *,
                   repeats: int = 3, seed: int = 0) -> dict[str, dict[str, list[float]]]:
    """For every format (`name: (make_source, its files)`): records/s for random and
    sequential reads, cold (page cache dropped) then warm (the same keys again), every one
    of `repeats` runs. The runs go round all formats in turn, so that a busy moment of the
    machine does not hit one format only.

    `reads` is a number of random keys, read in one pass, or the passes themselves (from
    `spread_keys`): each pass is read cold, after its own drop of the page cache, then warm
    at once, and the rate is all the keys over all the passes' reading time. The sequential
    reads are as many consecutive keys from a random start, in one pass."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} must be a whole number of at least 1, e.g. 3.")
    generator = np.random.default_rng(seed)
    if isinstance(reads, int | np.integer):
        random_passes = [generator.choice(num_records, size=min(int(reads), num_records),
                                          replace=False).tolist()]
    else:
        random_passes = _as_passes(reads)
    count = min(sum(len(keys) for keys in random_passes), num_records)
    start = int(generator.integers(0, num_records - count + 1))
    patterns = {"random": random_passes, "sequential": [list(range(start, start + count))]}
    runs: dict[str, dict[str, list[float]]] = {
        name: {f"{pattern}, {cache}": [] for pattern in patterns for cache in ("cold", "warm")}
        for name in formats}
    for _ in range(repeats):
        for name, (make_source, paths) in formats.items():
            for pattern, passes in patterns.items():
                cold = warm = 0.0
                for keys in passes:  # each pass cold, then at once warm
                    cold += _pass_seconds(make_source, keys, paths)
                    warm += _pass_seconds(make_source, keys, None)
                total = sum(len(keys) for keys in passes)
                runs[name][f"{pattern}, cold"].append(total / cold)
                runs[name][f"{pattern}, warm"].append(total / warm)
    return runs


def file_pages_mb(paths: Sequence[str | Path]) -> float:
    """MB of whole pages the files span: what `cached_mb` reports when all of them are
    cached."""
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    return sum(-(-os.path.getsize(path) // page) * page for path in paths) / 1e6


def cold_pass_cache(formats: Mapping[str, tuple[Callable[[], Any], Sequence[Path]]],
                    keys: Sequence[int], num_records: int,
                    records_per_chunk: Mapping[str, int] | None = None) -> dict[str, dict]:
    """For every format: drop its files' cached pages, read `keys` once (untimed), then ask
    `mincore` how much of its files the page cache holds. Set against the share of the
    file's chunks the keys fall in (a chunk: `records_per_chunk[name]` records, 1 unless
    named), this counts what the kernel brought in beyond the reads (its read-ahead around
    a `read()`, its read-around on a page fault), without telling the two apart."""
    chunks = records_per_chunk or {}
    found = {}
    for name, (make_source, paths) in formats.items():
        group = chunks.get(name, 1)
        gc.collect()
        drop_page_cache(paths)
        source = make_source()
        for key in keys:
            source[int(key)]
        del source
        gc.collect()
        touched = len({int(key) // group for key in keys}) / math.ceil(num_records / group)
        found[name] = {"reads": len(keys), "cached_mb": cached_mb(paths),
                       "file_mb": file_pages_mb(paths), "needed_share": touched}
    return found


def cold_cache_sentence(name: str, cache: Mapping[str, float]) -> str:
    """What one cold pass left in the page cache (from `cold_pass_cache`), against what its
    reads needed."""
    cached, total, needed = cache["cached_mb"], cache["file_mb"], cache["needed_share"]
    if math.isnan(cached):
        return f"{name}: this system has no mincore to ask the page cache with."
    share = cached / total
    head = (f"{name}: one cold pass of {cache['reads']:,} reads left {cached:,.1f} MB of its "
            f"{total:,.0f} MB in the page cache ({share:.1%}), where the chunks read make up "
            f"{needed:.1%} of it")
    ratio = share / needed
    if ratio >= 4:
        return (f"{head}: {format_times(ratio)} what the reads needed. The kernel read ahead "
                "or around the reads (this counts it, and does not tell the two apart): later "
                "reads of a pass could find their pages already cached, and its cold time "
                "paid for more bytes than were asked for.")
    if ratio >= 1.5:
        counted = ("whole 4 kB pages, the reader's 32 kB file buffer (course_lib opens "
                   "array_record's reader with file_reader_buffer_size=32768, as Grain does) "
                   "and the index read on opening" if name.startswith("ArrayRecord") else
                   "whole 4 kB pages and what is read on opening")
        return (f"{head}: {format_times(ratio)} what the reads needed, within 4x: {counted} "
                "count too, so this does not show read-ahead apart from them.")
    if ratio >= 0.5:
        return f"{head}: about what the reads needed; each read fetched its own pages."
    return (f"{head}: less than the reads needed, so pages left the cache during the pass "
            "(memory was short).")


def median_rates(runs: Mapping[str, Mapping[str, Sequence[float]]]) -> dict[str, dict[str, float]]:
    """The median of each format's and pattern's runs (from `read_rate_runs`)."""
    return {name: {pattern: float(np.median(values)) for pattern, values in patterns.items()}
            for name, patterns in runs.items()}


def plot_read_rates(rates: Mapping[str, Mapping[str, float]],
                    runs: Mapping[str, Mapping[str, Sequence[float]]] | None = None):
    """Grouped bars of µs per read: one group per format, one bar per read pattern (log
    scale); with `runs` (from `read_rate_runs`) the bars are the medians (`rates`) and every
    run is drawn as a dot, and the title says so."""
    import matplotlib.pyplot as plt

    names = list(rates)
    patterns = list(next(iter(rates.values())))
    figure, ax = plt.subplots(figsize=(9, 3.8))
    width = 0.8 / len(patterns)
    counts = set()
    for index, pattern in enumerate(patterns):
        xs = np.arange(len(names)) + (index - (len(patterns) - 1) / 2) * width
        bars = ax.bar(xs, [1e6 / rates[name][pattern] for name in names], width, label=pattern)
        if runs is None:
            continue
        for x, name in zip(xs, names, strict=True):
            values = [1e6 / rate for rate in runs[name][pattern]]
            counts.add(len(values))
            offsets = np.linspace(-width / 4, width / 4, len(values)) if len(values) > 1 else [0]
            ax.scatter(x + np.asarray(offsets), values, s=10, zorder=3, color="black",
                       edgecolor=bars[0].get_facecolor(), linewidth=0.5)
    ax.set_xticks(np.arange(len(names)), [name.replace(", ", ",\n") for name in names],
                  fontsize="small")
    ax.set_yscale("log")
    ax.set_ylabel("µs per read (log scale, lower is faster)")
    how = (f"\nbars: the median of {' or '.join(map(str, sorted(counts)))} runs; dots: each run"
           if counts else "\none run each")
    ax.set_title("One record at a time: random and sequential, cold and warm page cache" + how,
                 fontsize="medium")
    ax.legend(fontsize="small", ncols=2)
    figure.tight_layout()
    return figure


# -- judging two read rates: the course's one margin rule -------------------------------------
FASTER, SLOWER = "faster", "slower"
_READ_VERDICTS = {BETTER: FASTER, WORSE: SLOWER, SAME: SAME,
                  TOO_NOISY_TO_TELL: TOO_NOISY_TO_TELL}
Rates = float | Sequence[float]  # records/s: one run, or every run of a timing


def runs_of(rates: Rates) -> tuple[float, ...]:
    """The runs of a rate (records/s) as a tuple: a single rate is one run."""
    runs = tuple(float(rate) for rate in np.atleast_1d(np.asarray(rates, dtype=float)))
    if not runs or min(runs) <= 0:
        raise ValueError(f"rates={rates!r} must hold positive records/s, at least one run.")
    return runs


def median_rate(rates: Rates) -> float:
    """The rate of a timing's median run: one over the median time per record, the value
    `rate_comparison` judges (for an odd number of runs, the median rate itself)."""
    return 1 / float(np.median([1 / rate for rate in runs_of(rates)]))


def rate_comparison(rates: Rates, baseline: Rates) -> Comparison:
    """Two read rates as the course's `Comparison` of times: each run becomes its seconds per
    record, so that "better" means faster, and the median, its standard error and the margin
    are `basics`' own."""
    return Comparison(tuple(1 / rate for rate in runs_of(rates)),
                      tuple(1 / rate for rate in runs_of(baseline)))


def verdict(rates: Rates, baseline: Rates) -> str:
    """`Comparison.verdict` of two read rates, in the words of reads: "faster", "slower",
    "same" (within the noise) or "too noisy" (too noisy to tell)."""
    return _READ_VERDICTS[rate_comparison(rates, baseline).verdict]


def micros(rate: float) -> str:
    """A rate (records/s) as the time of one read, three significant digits: "10.2 µs"."""
    return format_duration(1 / rate)


def runs_phrase(*sides: Rates) -> str:
    """How many runs each median holds, in the order cited: "medians of 3 runs each"."""
    counts = [len(runs_of(side)) for side in sides]
    if set(counts) == {1}:
        return "one run each"
    if len(set(counts)) == 1:
        return f"medians of {counts[0]} runs each"
    return f"medians of {' and '.join(map(str, counts))} runs"


def margin_phrase(comparison: Comparison) -> str:
    return f"margin {comparison.margin:.0%}"


def cold_warm_sentence(name: str, cold: Rates, warm: Rates) -> str:
    """How much of a cold random read was waiting for the disk: the warm run reads the same
    records with nothing to wait for, so the time it still takes is the format's own work
    (system calls, copying, decompressing), and the rest of the cold time is the disk.
    `cold`, `warm`: records/s of each run; judged by the course's one margin rule. "Apart"
    is the difference of the two median times as a share of the cold one, the baseline the
    margin is a share of too."""
    comparison = rate_comparison(warm, cold)
    cold_rate, warm_rate = median_rate(cold), median_rate(warm)
    apart = abs(1 - cold_rate / warm_rate)  # a share of the cold time, as the margin is
    times = (f"{micros(cold_rate)} per random read cold, {micros(warm_rate)} warm "
             f"({runs_phrase(cold, warm)}; {apart:.0%} apart, {margin_phrase(comparison)})")
    outcome = _READ_VERDICTS[comparison.verdict]
    if outcome == FASTER:
        disk = 1 - cold_rate / warm_rate
        return (f"{name}: {times}, {format_times(warm_rate / cold_rate)} faster warm: "
                f"{disk:.0%} of a cold read was waiting for the disk, the other "
                f"{1 - disk:.0%} is the format's own work, which a warm cache does not "
                "remove.")
    if outcome == SLOWER:
        return (f"{name}: {times}, {format_times(cold_rate / warm_rate)} slower warm, which a "
                "cache cannot cause: something this run does not measure slowed the warm "
                "run, so it says nothing about the cache.")
    if outcome == TOO_NOISY_TO_TELL:
        return f"{name}: {times}: too noisy to tell cold from warm; this run names no cause."
    return (f"{name}: {times}, the same within the noise: these reads spent their time on "
            "the format's own work, not on the disk, or the pages were not really dropped (a "
            "file system in memory, a disk cache below the kernel).")


def group_size_sentence(bytes_one: int, bytes_group: int, random_one: Rates,
                        random_group: Rates, group_size: int) -> str:
    """The trade-off group_size makes, from the file sizes and the warm random reads
    (records/s of each run, judged by the course's one margin rule)."""
    smaller = bytes_one / bytes_group
    size_part = (f"group_size:{group_size} made the file {format_times(smaller)} smaller "
                 "than group_size:1" if smaller > 1.05 else
                 f"group_size:{group_size} saved no space over group_size:1 here")
    # group_size:1 judged against group_size:64, so that the margin is a share of the
    # slower reads it is meant for, not of reads many times faster
    comparison = rate_comparison(random_one, random_group)
    group_rate, one_rate = median_rate(random_group), median_rate(random_one)
    reads = (f"{micros(group_rate)} per read against {micros(one_rate)}, "
             f"{runs_phrase(random_group, random_one)}; {margin_phrase(comparison)}")
    outcome = {FASTER: SLOWER, SLOWER: FASTER}.get(_READ_VERDICTS[comparison.verdict],
                                                   _READ_VERDICTS[comparison.verdict])
    if outcome == SLOWER:
        read_part = (f"and warm random reads {format_times(one_rate / group_rate)} slower "
                     f"({reads}): each one decompresses {group_size} records to return one")
    elif outcome == FASTER:
        read_part = (f"and warm random reads {format_times(group_rate / one_rate)} faster "
                     f"({reads}), which a busy machine can do to a run; expect them slower, "
                     "since each read decompresses the whole group")
    elif outcome == TOO_NOISY_TO_TELL:
        read_part = (f"and warm random reads too noisy to tell apart ({reads}); this run "
                     "names no cause")
    else:
        read_part = (f"and warm random reads the same within the noise ({reads}): these "
                     "records decompress quickly")
    return (f"{size_part}, {read_part}. Grain asks for group_size:1, made for random access: "
            "the ArrayRecordDataSource it uses logs an error when it opens any other file, "
            f"\"File ... was created with group size {group_size}. Grain requires group size 1 "
            "for good performance. Please re-generate your ArrayRecord files with "
            "'group_size:1'.\" (course_lib's source opens it silently).")


ONE_KEY = "one key a call"
ONE_CHUNK = "a chunk a call"


def in_order_group_sentence(runs: Mapping[str, Mapping[str, Rates]], one: str, grouped: str,
                            group_size: int) -> str:
    """Whether large ArrayRecord groups pay, from warm reads in file order (`runs[name][way]`:
    records/s of each run, `way` `ONE_KEY`, `source[key]` for every record, or `ONE_CHUNK`,
    one `source.__getitems__` for a chunk's keys) of the group_size:1 file `one` and the
    group_size:`group_size` file `grouped`. Each pair is judged by the course's one margin
    rule: the grouped file against the other read the same way, and the grouped file's two
    ways against each other (what decoding a chunk once saves)."""
    listed = "; ".join(
        f"group_size:{size}: {ONE_KEY} {micros(median_rate(runs[name][ONE_KEY]))}, "
        f"{ONE_CHUNK} {micros(median_rate(runs[name][ONE_CHUNK]))}"
        for size, name in ((1, one), (group_size, grouped)))
    each = runs_phrase(*(runs[name][way] for name in (one, grouped)
                         for way in (ONE_KEY, ONE_CHUNK)))
    head = f"Warm, in file order, time per record ({each}): {listed}."
    big = f"group_size:{group_size}"

    def judged(way: str) -> tuple[str, str]:
        comparison = rate_comparison(runs[grouped][way], runs[one][way])
        ratio = median_rate(runs[grouped][way]) / median_rate(runs[one][way])
        outcome = verdict(runs[grouped][way], runs[one][way])
        if outcome == FASTER:
            words = f"{format_times(ratio)} faster than group_size:1"
        elif outcome == SLOWER:
            words = f"{format_times(1 / ratio)} slower than group_size:1"
        elif outcome == SAME:
            words = "the same as group_size:1 within the noise"
        else:
            words = "too noisy to tell from group_size:1"
        return outcome, f"{words} ({margin_phrase(comparison)})"

    trap, trap_words = judged(ONE_KEY)
    pay, pay_words = judged(ONE_CHUNK)
    saved = verdict(runs[grouped][ONE_CHUNK], runs[grouped][ONE_KEY])
    saved_ratio = median_rate(runs[grouped][ONE_CHUNK]) / median_rate(runs[grouped][ONE_KEY])
    saved_margin = margin_phrase(rate_comparison(runs[grouped][ONE_CHUNK],
                                                 runs[grouped][ONE_KEY]))
    if TOO_NOISY_TO_TELL in (trap, pay):
        return (f"{head} One key a call, {big} was {trap_words}; a chunk a call, "
                f"{pay_words}: too noisy to tell, so this run gives no advice on large groups.")
    if pay == SLOWER:
        return (f"{head} Even read a chunk a call, {big} was {pay_words}; one key a call, "
                f"{trap_words}. Here large groups cost time however they were read: keep "
                "group_size:1.")
    if trap == SLOWER:
        decoded = (f"on its own file a chunk a call was {format_times(saved_ratio)} faster "
                   f"than one key a call ({saved_margin})" if saved == FASTER else
                   f"on its own file a chunk a call was not faster than one key a call "
                   f"({saved_margin}), so this run does not show the decoding as the cost")
        return (f"{head} One key a call, {big} was {trap_words}, even in file order: "
                f"every source[key] decompresses its whole chunk again. A chunk a call, it "
                f"was {pay_words}, and {decoded}. So large groups pay only with a reader "
                "that decodes each chunk once: a chunk's keys in one __getitems__ call, or "
                "array_record's range read, reader.read(start, stop); one source[key] at a "
                "time costs the whole chunk for every record, in any order.")
    return (f"{head} One key a call, {big} was {trap_words}; a chunk a call, {pay_words}: "
            "here its chunks decompress fast enough that reading them one key at a time in "
            "file order cost nothing extra (its random reads above are another matter).")


def in_order_remember_line(runs: Mapping[str, Mapping[str, Rates]], one: str, grouped: str,
                           group_size: int) -> str:
    """The closing point of `in_order_group_sentence`, one idea, turning with the same
    verdicts."""
    trap = verdict(runs[grouped][ONE_KEY], runs[one][ONE_KEY])
    pay = verdict(runs[grouped][ONE_CHUNK], runs[one][ONE_CHUNK])
    one_key = micros(median_rate(runs[grouped][ONE_KEY]))
    chunk = micros(median_rate(runs[grouped][ONE_CHUNK]))
    if TOO_NOISY_TO_TELL in (trap, pay):
        return (f"group_size:{group_size} in file order: too noisy to tell against "
                "group_size:1 in this run.")
    if pay == SLOWER:
        return (f"group_size:{group_size} was slower than group_size:1 even read a chunk a "
                f"call ({chunk} per record): keep group_size:1.")
    if trap == SLOWER:
        return (f"Large groups pay only when each chunk is decoded once: group_size:"
                f"{group_size} in file order cost {one_key} per record one key a call, "
                f"{chunk} a chunk a call.")
    return (f"group_size:{group_size} in file order cost no more than group_size:1 here, one "
            f"key a call ({one_key} per record) or a chunk a call ({chunk}).")


# What a warm read of each format costs: for the record file a reason to lead, for the
# others a cost it led despite (so the sentence says "despite").
_OWN_WORK = {
    "record file": ("because", "a cached record is a memory copy through the map, with no "
                    "system call"),
    "folder of files": ("despite", "at least three system calls per read (open, read, close)"),
    "ArrayRecord": ("despite", "a system call and a decompression per read"),
}


def warm_leader(runs: Mapping[str, Mapping[str, Rates]]) -> tuple[list[str], str]:
    """The formats ordered by the median of their warm random reads (fastest first), and
    `verdict` of the first against the second: the lead is clear only when it is "faster"."""
    order = sorted(runs, key=lambda name: -median_rate(runs[name]["random, warm"]))
    if len(order) < 2:
        return order, FASTER
    return order, verdict(runs[order[0]]["random, warm"], runs[order[1]]["random, warm"])


def warm_ranking_sentence(runs: Mapping[str, Mapping[str, Rates]]) -> str:
    """The formats ranked by their warm random reads (µs per read: the medians of each
    format's runs), and whether the fastest one is clear of the next by the course's one
    margin rule.

    Warm, nothing waits for the disk, so the time is the format's own work; the sentence names
    that work for the fastest format when it leads clearly."""
    order, outcome = warm_leader(runs)
    listed = ", ".join(f"{name} {micros(median_rate(runs[name]['random, warm']))}"
                       for name in order)
    each = runs_phrase(*(runs[name]["random, warm"] for name in order))
    head = f"Warm random reads, fastest first (µs per read, {each}): {listed}."
    if len(order) < 2:
        return head
    first, second = order[0], order[1]
    comparison = rate_comparison(runs[first]["random, warm"], runs[second]["random, warm"])
    lead = comparison.ratio
    if outcome == TOO_NOISY_TO_TELL:
        return (f"{head} The first two, {first} and {second}, are too noisy to tell apart "
                f"({format_times(lead)}, {margin_phrase(comparison)}): this run ranks "
                "neither first.")
    if outcome != FASTER:
        return (f"{head} The first two, {first} and {second}, are the same within the noise "
                f"({format_times(lead)}, {margin_phrase(comparison)}): a tie, not a ranking.")
    how, work = _OWN_WORK.get(first, (None, ""))
    why = {"because": f": {work}", "despite": f", despite {work}"}.get(how, "")
    return (f"{head} Fastest: {first}, {format_times(lead)} faster than {second}, the next "
            f"({margin_phrase(comparison)}){why}.")


# -- memory while an epoch runs --------------------------------------------------------------


def cached_mb(paths: Sequence[str | Path]) -> float:
    """MB of these files that sit in the page cache now, asked page by page with `mincore`
    on a mapping that touches nothing (NaN where there is no `mincore`, e.g. macOS)."""
    import ctypes

    if not sys.platform.startswith("linux"):
        return math.nan
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    page = os.sysconf("SC_PAGE_SIZE")
    pages = 0
    for path in paths:
        size = os.path.getsize(path)
        if size == 0:
            continue
        descriptor = os.open(path, os.O_RDONLY)
        try:
            address = libc.mmap(None, size, 1, 1, descriptor, 0)  # PROT_READ, MAP_SHARED
        finally:
            os.close(descriptor)
        if address in (None, ctypes.c_void_p(-1).value):
            return math.nan
        resident = (ctypes.c_ubyte * ((size + page - 1) // page))()
        try:
            if libc.mincore(ctypes.c_void_p(address), size, resident) != 0:
                return math.nan
        finally:
            libc.munmap(ctypes.c_void_p(address), size)
        pages += sum(flag & 1 for flag in resident)
    return pages * page / 1e6


def epoch_memory_trace(source: Any, paths: Sequence[str | Path] = (),
                       samples: int = 40) -> dict[str, np.ndarray]:
    """Read every record of `source` once, in order; sample this process's anonymous memory
    and mapped file pages (MB above the start) `samples` times along the way. With `paths`
    (the source's files), their cached pages are dropped first and the page cache they fill
    is sampled too."""
    every = max(1, len(source) // samples)
    if paths:
        drop_page_cache(paths)
    start = process_memory_mb()
    positions, anonymous, mapped, cached = [], [], [], []
    for key in range(len(source)):
        source[key]
        if key % every == 0 or key == len(source) - 1:
            now = process_memory_mb()
            positions.append(key + 1)
            anonymous.append(now["anonymous"] - start["anonymous"])
            mapped.append(now["file"] - start["file"])
            cached.append(cached_mb(paths) if paths else math.nan)
    return {"records": np.array(positions), "anonymous": np.array(anonymous),
            "file": np.array(mapped), "cached": np.array(cached)}


def plot_epoch_memory(traces: Mapping[str, Mapping[str, np.ndarray]], data_mb: float):
    """One panel per format: anonymous memory, mapped file pages and the page cache that
    the format's files fill, along an epoch."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(traces), figsize=(3.6 * len(traces), 3.8),
                                sharey=True, squeeze=False)
    for ax, (name, trace) in zip(axes[0], traces.items(), strict=True):
        ax.axhline(data_mb, color="grey", linewidth=1, label="the data set's size")
        if not np.all(np.isnan(trace["cached"])):
            ax.plot(trace["records"], trace["cached"], color="C2", linewidth=5, alpha=0.4,
                    label="page cache of its files")
        else:
            ax.text(0.5, 0.5, "page cache not sampled:\none file per record", ha="center",
                    transform=ax.transAxes, fontsize="small", color="C2")
        if np.nanmax(np.abs(trace["file"])) >= 1:
            ax.plot(trace["records"], trace["file"], color="C1", linestyle="--",
                    label="mapped file pages (RssFile)")
        else:  # drawn, it would hide under the anonymous line at 0
            ax.text(0.5, 0.3, "no file pages mapped:\nRssFile stayed within 1 MB of 0",
                    ha="center", transform=ax.transAxes, fontsize="small", color="C1")
        ax.plot(trace["records"], trace["anonymous"], color="C0", label="anonymous (RssAnon)")
        ax.set_title(name, fontsize="medium")
        ax.set_xlabel("records read in the epoch")
    axes[0][0].set_ylabel("MB above the start")
    handles, labels = max((ax.get_legend_handles_labels() for ax in axes[0]),
                          key=lambda pair: len(pair[0]))
    figure.legend(handles, labels, loc="lower center", ncols=len(labels), fontsize="small")
    figure.suptitle("Memory while one epoch is read, one record at a time")
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    return figure


FLAT_SHARE, FLAT_FLOOR_MB = 0.05, 10.0  # "flat": within 5% of the data set, at least 10 MB


def flat_tolerance_mb(data_mb: float) -> float:
    """How far anonymous memory may move over an epoch of `data_mb` MB and still be called
    flat: 5% of the data set's size, at least 10 MB (the interpreter's own allocations)."""
    return max(FLAT_SHARE * data_mb, FLAT_FLOOR_MB)


def largest_move_mb(trace: Mapping[str, np.ndarray]) -> float:
    """The sample of a trace's anonymous memory (MB above the start) farthest from the
    start, with its sign; NaN when the memory could not be read."""
    anonymous = np.asarray(trace["anonymous"], dtype=float)
    if anonymous.size == 0 or np.all(np.isnan(anonymous)):
        return math.nan
    return float(anonymous[np.nanargmax(np.abs(anonymous))])


def stayed_flat(trace: Mapping[str, np.ndarray], data_mb: float) -> bool | None:
    """Whether a trace's anonymous memory stayed within `flat_tolerance_mb` of its start at
    every sample of the epoch; None when the memory could not be read."""
    moved = largest_move_mb(trace)
    if math.isnan(moved):
        return None
    return abs(moved) <= flat_tolerance_mb(data_mb)


def epoch_memory_sentence(name: str, trace: Mapping[str, np.ndarray], data_mb: float) -> str:
    """Whether a format's anonymous memory stayed flat at every sample of an epoch of
    `data_mb` MB (`stayed_flat`), with the largest move and the tolerance."""
    flat = stayed_flat(trace, data_mb)
    if flat is None:
        return f"{name}: this system has no /proc/self/status to read memory from."
    moved, tolerance = largest_move_mb(trace), flat_tolerance_mb(data_mb)
    numbers = (f"at most {moved:+.0f} MB from its start over an epoch of {data_mb:.0f} MB "
               f"(flat means within {tolerance:.0f} MB: {FLAT_SHARE:.0%} of the data set, at "
               f"least {FLAT_FLOOR_MB:.0f} MB)")
    if flat:
        return f"{name}: anonymous memory moved {numbers}: flat."
    return (f"{name}: anonymous memory moved {numbers}: not flat, something keeps what it "
            "reads.")


def memory_remember_line(traces: Mapping[str, Mapping[str, np.ndarray]],
                         data_mb: float) -> str:
    """The closing point on memory over an epoch, from the traces: flat in every format, or
    which ones were not."""
    verdicts = {name: stayed_flat(trace, data_mb) for name, trace in traces.items()}
    tolerance = flat_tolerance_mb(data_mb)
    if any(flat is None for flat in verdicts.values()):
        return "Memory over an epoch could not be read on this system (no /proc)."
    moved = {name: largest_move_mb(trace) for name, trace in traces.items()}
    grew = [name for name, flat in verdicts.items() if not flat]
    if not grew:
        largest = max(moved.values(), key=abs)
        names = list(traces)
        listed = (", ".join(names[:-1]) + " and " + names[-1]) if len(names) > 1 else names[0]
        return (f"Read record by record, the anonymous memory of {listed} stayed flat over an "
                f"epoch (at most {largest:+.0f} MB, within {tolerance:.0f} MB).")
    listed = ", ".join(f"{name} ({moved[name]:+.0f} MB)" for name in grew)
    return (f"Anonymous memory did not stay flat over an epoch for {listed}, beyond "
            f"{tolerance:.0f} MB: something there keeps what it reads.")


# -- slow storage -------------------------------------------------------------------------


class SlowStorage:
    """A source that waits `latency_s` before every read, as a network file system or an
    object store does. `time.sleep` gives the interpreter lock back, like a real wait on
    the network, so other threads run meanwhile."""

    def __init__(self, source: Any, latency_s: float):
        if not 0 < latency_s <= 1:
            raise ValueError(f"latency_s={latency_s!r} must be in (0, 1] seconds, e.g. 0.005.")
        self.source, self.latency_s = source, float(latency_s)

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, record_key: int):
        time.sleep(self.latency_s)
        return self.source[record_key]

    def __repr__(self) -> str:
        return f"SlowStorage({self.source!r}, latency_s={self.latency_s})"


def threads_limit(num_threads: int, latency_s: float, worker_count: int = 0) -> float:
    """Records/s when every read waits `latency_s` and `num_threads` threads wait at once
    in each process that reads (the main process, or each of `worker_count` workers).

    A worker reads one chunk of its work at a time, in tasks of at least
    `MIN_RECORDS_PER_TASK` records, so at most `chunk // MIN_RECORDS_PER_TASK` of its
    threads can wait at once."""
    from course_lib.record_stage import MIN_RECORDS_PER_TASK
    from course_lib.stream import MIN_CHUNK_RECORDS

    if worker_count == 0:
        return num_threads / latency_s
    waiting = min(num_threads, MIN_CHUNK_RECORDS // MIN_RECORDS_PER_TASK)
    return worker_count * waiting / latency_s


def loader_records_per_second(loader: Any, *, skip_records: int) -> float:
    """Records/s of one pass of a batching `loader`, once it runs: the clock starts after
    the batches that hold the first `skip_records` records (starting the workers, and each
    process's first chunk, read inline and timed to decide whether threads pay off; see
    `warmup_records`), and stops at the last batch."""
    if skip_records < 0:
        raise ValueError(f"skip_records={skip_records!r} must be 0 or more: pass "
                         "warmup_records(worker_count).")
    seen, timed, batches, start = 0, 0, 0, None
    with iter(loader) as iterator:
        for batch in iterator:
            if start is None:
                seen += len(batch["label"])
                if seen >= skip_records:
                    start = time.perf_counter()
            else:
                timed += len(batch["label"])
                batches += 1
    if start is None or batches < 4:
        raise ValueError(f"the loader gave {seen + timed} records, too few to time after the "
                         f"first {skip_records}: give its sampler at least 4 batches more.")
    return timed / (time.perf_counter() - start)


def time_slow_loader(source: Any, *, num_threads: int, worker_count: int = 0,
                     num_records: int, side: int = DIGIT_SIDE, batch_size: int = 32,
                     seed: int = 0) -> float:
    """Records/s of a shuffled pass over `num_records` records of `source` (digit records),
    decoded and batched, timed by `loader_records_per_second` (the benchmarks' shortcut for
    the loader lesson 9 writes in its cells)."""
    import course_lib as grain

    skip = warmup_records(worker_count)
    if num_records < skip + 4 * batch_size:
        raise ValueError(f"num_records={num_records} leaves too little to time after the "
                         f"first {skip} records; pass at least {skip + 4 * batch_size}.")
    sampler = grain.IndexSampler(num_records=num_records, shuffle=True, seed=seed,
                                 num_epochs=1)
    loader = grain.DataLoader(
        data_source=source, sampler=sampler,
        operations=[DecodeDigit(side), grain.Batch(batch_size)], worker_count=worker_count,
        read_options=grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=500))
    return loader_records_per_second(loader, skip_records=skip)


def warmup_records(worker_count: int) -> int:
    """Records left out of a timing: each reader's first chunk is read inline."""
    from course_lib.stream import MIN_CHUNK_RECORDS

    return MIN_CHUNK_RECORDS * max(1, worker_count)


def plot_read_threads(rates: Mapping[int, float], latency_s: float,
                      worker_rates: Mapping[int, float] | None = None, worker_count: int = 2,
                      *, runs: Mapping[int, Sequence[float]] | None = None,
                      worker_runs: Mapping[int, Sequence[float]] | None = None):
    """Measured records/s against the number of read threads, with the limit
    `num_threads / latency`; optionally the same inside `worker_count` workers. The lines
    go through `rates` (medians); with `runs` / `worker_runs` every run is a dot."""
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(6.8, 4))
    threads = sorted(rates)
    ax.plot(threads, [threads_limit(t, latency_s) for t in threads], color="grey",
            linestyle=":", label="limit: num_threads / latency")
    ax.plot(threads, [rates[t] for t in threads], marker="o", label="measured, worker_count=0")
    if worker_rates:
        counts = sorted(worker_rates)
        ax.plot(counts, [threads_limit(t, latency_s, worker_count) for t in counts],
                color="tab:orange", linestyle=":", alpha=0.6,
                label=f"limit with {worker_count} workers")
        ax.plot(counts, [worker_rates[t] for t in counts], marker="s", color="tab:orange",
                label=f"measured, worker_count={worker_count} "
                      f"({worker_count} x num_threads in all)")
    counts = set()
    for found, color in ((runs, "tab:blue"), (worker_runs, "tab:orange")):
        for count, values in (found or {}).items():
            counts.add(len(values))
            ax.scatter([count] * len(values), values, s=12, color=color, edgecolor="black",
                       linewidth=0.5, zorder=3)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(threads, [str(t) for t in threads])
    ax.set_xlabel("ReadOptions(num_threads=...), per process that reads")
    ax.set_ylabel("records per second (log scale)")
    how = (f"\nlines: the median of {' or '.join(map(str, sorted(counts)))} runs; dots: each run"
           if counts else "")
    ax.set_title(f"Storage that waits {latency_s * 1e3:.0f} ms per read, hidden by threads{how}",
                 fontsize="medium")
    ax.legend(fontsize="small")
    figure.tight_layout()
    return figure


def latency_threads_sentence(runs: Mapping[int, Rates], latency_s: float) -> str:
    """How close each thread count came to `num_threads / latency` (records/s: one rate or
    every run, judged by the median), and where it fell short."""
    rates = {threads: median_rate(value) for threads, value in runs.items()}
    shares = {threads: rate / threads_limit(threads, latency_s)
              for threads, rate in sorted(rates.items())}
    one = min(rates)
    parts = [f"With {one} thread{'s' if one > 1 else ''} the loader read {rates[one]:,.0f} "
             f"records/s ({runs_phrase(*runs.values())}), {shares[one]:.0%} of the "
             f"{threads_limit(one, latency_s):,.0f}/s that waits of {latency_s * 1e3:.0f} ms "
             "allow."]
    # compared as printed (79.6% prints as 80%, and is not listed as below 80%)
    short = [threads for threads, share in shares.items() if round(share, 2) < 0.8]
    parts.append("Records/s against the limit, per thread count: " + ", ".join(
        f"{threads} thread{'s' if threads > 1 else ''} {rate:,.0f} of "
        f"{threads_limit(threads, latency_s):,.0f}" for threads, rate in sorted(rates.items()))
        + ".")
    if not short:
        parts.append(f"Every thread count up to {max(rates)} reached at least 80% of its "
                     "limit: the threads spend their time waiting, together.")
        return " ".join(parts)
    listed = ", ".join(f"{threads} ({shares[threads]:.0%})" for threads in short)
    parts.append(f"Below 80% of the limit: {listed} threads.")
    if short[0] == one:
        parts.append("Even the fewest threads fell short: each record's own work (reading, "
                     "decoding, handing it over) adds to its wait, and on a busy machine a "
                     "thread whose wait is over may wait again for a core.")
    else:
        parts.append("The waits overlap, but with many threads the work between them "
                     "(handing records over, decoding, batching) fills a core, and the "
                     "threads share one interpreter lock.")
    return " ".join(parts)


def workers_threads_sentence(in_process: Rates, in_workers: Rates, worker_count: int,
                             threads_per_worker: int) -> str:
    """The same number of read threads in total, in the main process or split over workers:
    records/s of each run (or one rate), compared by their medians with the course's one
    margin rule (`rate_comparison`).

    `in_process` is measured with worker_count * threads_per_worker threads in one process,
    so the comparison holds the number of reads waiting at once equal."""
    comparison = rate_comparison(in_workers, in_process)
    total = worker_count * threads_per_worker
    workers_rate, process_rate = median_rate(in_workers), median_rate(in_process)
    head = (f"{worker_count} workers with {threads_per_worker} read threads each ({total} in "
            f"all) read {workers_rate:,.0f} records/s, against {process_rate:,.0f}/s for "
            f"{total} threads in the main process ({runs_phrase(in_workers, in_process)}; "
            f"{margin_phrase(comparison)})")
    ratio = comparison.ratio
    outcome = _READ_VERDICTS[comparison.verdict]
    if outcome == TOO_NOISY_TO_TELL:
        return f"{head}: {NOISY_EXPLANATION}"
    if outcome == FASTER:
        return (f"{head}: {format_times(ratio)} more with workers. The waits were the same in "
                "number, so the difference lies in the loader's other work; this run does not "
                "say which part.")
    if outcome == SLOWER:
        return (f"{head}: {format_times(1 / ratio)} less with workers: for pure waiting, "
                "workers added nothing here over the same number of threads in one process.")
    return (f"{head}: the same within the noise ({format_times(ratio)}): for pure waiting, "
            "workers add nothing that threads do not; waiting is waiting, whichever process "
            "does it.")


# -- what to remember -------------------------------------------------------------------------


# -- is the read rate enough for the step? ---------------------------------------------------


def train_steps_per_second(in_features: int, batch_size: int, steps: int) -> float:
    """Training steps per second of course_lib.training's jitted step (the MLP of lesson 7)
    on random batches, timed after two steps that compile it."""
    import jax

    from course_lib.training import create_model, train_step

    model, optimizer = create_model(in_features)
    generator = np.random.default_rng(0)
    images = jax.numpy.asarray(generator.random((batch_size, in_features), dtype=np.float32))
    labels = jax.numpy.asarray(generator.integers(0, 10, batch_size))
    for _ in range(2):
        train_step(model, optimizer, images, labels).block_until_ready()
    start = time.perf_counter()
    for _ in range(steps):
        loss = train_step(model, optimizer, images, labels)
    loss.block_until_ready()
    return steps / (time.perf_counter() - start)


def step_need_sentence(steps_per_s: float, batch_size: int,
                       supplies: Mapping[str, Rates]) -> str:
    """Records/s the step needs (batch size x steps/s, timed once) against each measured read
    rate (records/s of each run), judged by the course's one margin rule: "enough" when the
    supply is faster than the need, "short" when slower, "about the need" within the noise."""
    need = batch_size * steps_per_s
    parts = [f"The step runs {steps_per_s:,.0f} steps/s on batches of {batch_size}: it needs "
             f"{need:,.0f} records/s."]
    for name, supply in supplies.items():
        comparison = rate_comparison(supply, need)
        rate = median_rate(supply)
        outcome = _READ_VERDICTS[comparison.verdict]
        if outcome == FASTER:
            judged = f"enough, {format_times(rate / need)} the need"
        elif outcome == SLOWER:
            judged = f"short by {format_times(need / rate)}: the step would wait for its data"
        elif outcome == TOO_NOISY_TO_TELL:
            judged = (f"too noisy to tell against the need ({margin_phrase(comparison)}): "
                      "time it again on a quieter machine")
        else:
            judged = (f"about the need, the same within the noise "
                      f"({margin_phrase(comparison)}): any slowdown makes the step wait")
        parts.append(f"{name}: {rate:,.0f} records/s, {judged}.")
    return " ".join(parts)


def _ranked_line(runs: Mapping[str, Mapping[str, Rates]], pattern: str, fastest: bool) -> str:
    """The fastest (or slowest) format for one pattern, and whether it is clear of the next
    by the course's one margin rule."""
    order = sorted(runs, key=lambda name: median_rate(runs[name][pattern]), reverse=fastest)
    word = "fastest" if fastest else "slowest"
    what = pattern.replace("random, ", "").capitalize() + " random reads"

    def per_read(name: str) -> str:
        return f"{micros(median_rate(runs[name][pattern]))} per read"

    first = order[0]
    if len(order) < 2:
        return f"{what} were {word} from {first} ({per_read(first)})."
    second = order[1]
    outcome = verdict(runs[first][pattern], runs[second][pattern])
    if outcome in (FASTER, SLOWER):
        return f"{what} were {word} from {first} ({per_read(first)})."
    tied = "tied within the noise" if outcome == SAME else "too noisy to tell apart"
    return (f"{what} were {word} from {first} and {second}, {tied} ({per_read(first)} and "
            f"{per_read(second)}).")


def remember_lines(*, data_mb: float, whole_mb: float, lazily_mb: float,
                   runs: Mapping[str, Mapping[str, Rates]], thread_rates: Mapping[int, Rates],
                   latency_s: float,
                   traces: Mapping[str, Mapping[str, np.ndarray]] | None = None) -> list[str]:
    """The lesson's closing points, one idea each, with this run's numbers (`runs`:
    records/s of each run, per format and pattern, from `read_rate_runs`; `thread_rates`:
    per thread count; `traces`: the epoch's memory per format, from `epoch_memory_trace`)."""
    fewest, many = min(thread_rates), max(thread_rates)
    lines = [
        f"Reading {data_mb:.0f} MB whole cost {whole_mb:.0f} MB of the process's own memory; "
        f"reading it record by record cost {lazily_mb:.0f} MB.",
        _ranked_line(runs, "random, warm", fastest=True),
        _ranked_line(runs, "random, cold", fastest=False),
    ]
    if traces is not None:
        lines.append(memory_remember_line(traces, data_mb))
    lines += [
        "The page cache an epoch fills is the kernel's: shared by every process that reads "
        "the files, and dropped when memory is needed.",
        f"With {latency_s * 1e3:.0f} ms per read, {fewest} read thread"
        f"{'s' if fewest > 1 else ''} gave {median_rate(thread_rates[fewest]):,.0f} records/s "
        f"and {many} gave {median_rate(thread_rates[many]):,.0f}/s (limit "
        f"{threads_limit(many, latency_s):,.0f}/s).",
        _threads_rule_line(thread_rates[many], thread_rates[fewest], many, fewest),
    ]
    return lines


def _threads_rule_line(many_rates: Rates, fewest_rates: Rates, many: int, fewest: int) -> str:
    """The rule the thread counts support, turning with their verdict."""
    outcome = verdict(many_rates, fewest_rates)
    margin = margin_phrase(rate_comparison(many_rates, fewest_rates))
    if outcome == FASTER:
        return (f"Read threads hide waiting ({many} threads read "
                f"{format_times(median_rate(many_rates) / median_rate(fewest_rates))} more "
                f"records/s than {fewest}, {margin}); computing is for worker processes "
                "(lesson 4).")
    if outcome == TOO_NOISY_TO_TELL:
        return (f"{many} read threads against {fewest}: too noisy to tell ({margin}), so this "
                "run shows no rule for threads.")
    return (f"Here {many} read threads were not faster than {fewest} ({margin}): the reads "
            "did not wait, or something else limited them.")


# -- sharded files -----------------------------------------------------------------------------


def pickled_sentence(source: Any, data_bytes: int) -> str:
    """What pickling a source sends to a worker, read back from the pickle itself: its size,
    the classes it names (by module and name: the worker imports them, no code travels) and
    the fields of the source's state."""
    import io
    import pickle

    data = pickle.dumps(source)
    named: list[str] = []

    class _Names(pickle.Unpickler):
        def find_class(self, module: str, name: str):
            named.append(f"{module}.{name}")
            return super().find_class(module, name)

    _Names(io.BytesIO(data)).load()
    state = source.__getstate__() if hasattr(source, "__getstate__") else vars(source)
    fields = ", ".join(state) if isinstance(state, dict) else type(state).__name__
    return (f"The pickled source: {len(data):,} bytes for {data_bytes / 1e6:.1f} MB of files. "
            f"It names {', '.join(dict.fromkeys(named))}, by module and name only (each "
            f"worker imports it, so course_lib must be installed there; no code travels), and "
            f"carries the source's state: {fields}.")


def files_read(source: Any, record_keys: Sequence[int]) -> list[str]:
    """The names of the files of an `ArrayRecordDataSource` that `record_keys` fall in."""
    ends = np.cumsum([len(type(source)(path)) for path in source.paths])
    shards = np.unique(np.searchsorted(ends, np.asarray(record_keys), side="right"))
    return [os.path.basename(source.paths[shard]) for shard in shards]


def epoch_record_keys(num_records: int, shard_options: Any, seed: int) -> list[int]:
    """The record keys one shuffled epoch reads, in order, for one shard (one JAX process):
    the steps of that shard's own stream, as the loader asks for them."""
    import course_lib as grain

    sampler = grain.IndexSampler(num_records=num_records, shard_options=shard_options,
                                 shuffle=True, num_epochs=1, seed=seed)
    return sampler.record_keys(0, sampler.total_length).tolist()
