"""Benchmark lesson 9's storage rows: ArrayRecord random reads, and slow storage behind threads.

Two groups of rows, each with its target:

- random reads per second of one ArrayRecord file (group_size:1, 16 kB records) through
  course_lib's `ArrayRecordDataSource`, `array_record`'s own reader (opened with the same
  options), and Grain's `ArrayRecordDataSource`, interleaved in one process so that a busy
  moment hits all three. Target: course_lib within 10% of the other two.
- a course_lib loader over a source that waits `LATENCY_S` per read, with
  `ReadOptions(num_threads=1, 4, 16)`, against the limit `num_threads / latency`. Target: at
  least 80% of the limit.

    .venv/bin/python benchmarks/bench_storage.py            # 5 rounds, writes a section
    .venv/bin/python benchmarks/bench_storage.py --quick    # 3 rounds, small file

Prints a Markdown section; with --append it is added to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from course_lib.array_record import (  # noqa: E402
    ArrayRecordDataSource,
    array_record_module,
    write_array_record_shards,
)
from course_lib.course import bigger_than_memory  # noqa: E402

LATENCY_S = 0.005
THREADS = (1, 4, 16)
RANDOM_READ_TOLERANCE = 0.10
THREADS_SHARE_TARGET = 0.80


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    value: float  # records per second, median of the rounds
    target: str
    met: bool


def _own_reader(path: str):
    module = array_record_module()
    reader = module.ArrayRecordReader(path, "readahead_buffer_size:0",
                                      file_reader_buffer_size=32 * 1024)

    class Reader:  # the same __getitem__ shape as the sources, with nothing in between
        def __getitem__(self, key):
            return reader.read([key])[0]

    return Reader()


def random_read_rows(path: Path, num_records: int, reads: int, rounds: int) -> list[Row]:
    import grain.python as grain_python

    readers = {"course_lib ArrayRecordDataSource": ArrayRecordDataSource(path),
               "array_record ArrayRecordReader": _own_reader(str(path)),
               "Grain ArrayRecordDataSource": grain_python.ArrayRecordDataSource([str(path)])}
    keys = np.random.default_rng(0).integers(0, num_records, size=reads).tolist()
    runs: dict[str, list[float]] = {name: [] for name in readers}
    for reader in readers.values():  # warm the page cache and each reader
        for key in keys[:200]:
            reader[key]
    names = list(readers)
    for round_ in range(rounds):
        for name in names[round_ % 3:] + names[:round_ % 3]:  # each goes first in turn
            reader = readers[name]
            start = time.perf_counter()
            for key in keys:
                reader[key]
            runs[name].append(reads / (time.perf_counter() - start))
    medians = {name: statistics.median(values) for name, values in runs.items()}
    ours = medians["course_lib ArrayRecordDataSource"]
    rows = []
    for name, value in medians.items():
        if name.startswith("course_lib"):
            others = [v for n, v in medians.items() if n != name]
            met = all(ours >= (1 - RANDOM_READ_TOLERANCE) * other for other in others)
            rows.append(Row(name, value, "within 10% of the other two", met))
        else:
            rows.append(Row(name, value, f"course_lib / this = {ours / value:.2f}", True))
    return rows


def warmup_records() -> int:
    """Records left out of a timing: the loader reads its first chunk inline."""
    from course_lib.stream import MIN_CHUNK_RECORDS

    return MIN_CHUNK_RECORDS


def time_slow_loader(source, *, num_threads: int, num_records: int,
                     batch_size: int = 32) -> float:
    """Records/s of a shuffled, decoded, batched pass over `num_records` records of
    `source` (lesson 9's loader), timed after the first `warmup_records()` records."""
    import course_lib as grain

    skip = warmup_records()
    if num_records < skip + 4 * batch_size:
        raise ValueError(f"num_records={num_records} leaves too little to time after the "
                         f"first {skip} records; pass at least {skip + 4 * batch_size}.")
    loader = grain.DataLoader(
        data_source=source, operations=[bigger_than_memory.DecodeDigit(),
                                        grain.Batch(batch_size)],
        sampler=grain.IndexSampler(num_records, shuffle=True, seed=0, num_epochs=1),
        read_options=grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=500))
    seen, timed, start = 0, 0, None
    with iter(loader) as batches:
        for batch in batches:
            if start is None:
                seen += len(batch["label"])
                if seen >= skip:
                    start = time.perf_counter()  # the clock starts after the skipped batches
            else:
                timed += len(batch["label"])
    return timed / (time.perf_counter() - start)


def slow_storage_rows(path: Path, num_records: int, seconds: float, rounds: int) -> list[Row]:
    slow = bigger_than_memory.SlowStorage(ArrayRecordDataSource(path), LATENCY_S)
    rows = []
    for threads in THREADS:
        limit = threads / LATENCY_S  # every read waits LATENCY_S, `threads` of them at once
        count = min(num_records, warmup_records() + 128 + int(limit * seconds))
        rates = [time_slow_loader(slow, num_threads=threads, num_records=count)
                 for _ in range(rounds)]
        value = statistics.median(rates)
        rows.append(Row(f"slow storage ({LATENCY_S * 1e3:.0f} ms/read), num_threads={threads}",
                        value, f">= 80% of {limit:,.0f}/s ({value / limit:.0%})",
                        value >= THREADS_SHARE_TARGET * limit))
    return rows


def markdown(rows: list[Row], note: str) -> str:
    lines = ["## Lesson 9: ArrayRecord reads and slow storage (benchmarks/bench_storage.py)", "",
             note, "", "| row | records/s | target | met |", "| --- | ---: | --- | --- |"]
    lines += [f"| {row.name} | {row.value:,.0f} | {row.target} | {'yes' if row.met else 'NO'} |"
              for row in rows]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds, a small file")
    parser.add_argument("--append", action="store_true", help="append to RESULTS.md")
    arguments = parser.parse_args(argv)
    rounds = 3 if arguments.quick else 5
    num_records = 4000 if arguments.quick else 20_000
    reads = 2000 if arguments.quick else 10_000
    seconds = 0.5 if arguments.quick else 1.5
    with tempfile.TemporaryDirectory(prefix="bench-storage-") as directory:
        records = bigger_than_memory.DigitRecords(num_records)
        (path,) = write_array_record_shards(records, directory, 1, prefix="digits")
        rows = random_read_rows(path, num_records, reads, rounds)
        rows += slow_storage_rows(path, num_records, seconds, rounds)
    mode = "quick" if arguments.quick else "full"
    note = (f"{datetime.date.today()}, {os.cpu_count()} cores, {mode} run: {rounds} rounds "
            "(medians), "
            f"{num_records:,} records of "
            f"{records.record_bytes:,} bytes, {reads:,} warm random reads per round; the "
            "machine may have been shared, so read the ratios, not the digits.")
    section = markdown(rows, note)
    print(section)
    if arguments.append:
        with open(HERE / "RESULTS.md", "a") as results:
            results.write("\n" + section)
    return 0 if all(row.met for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
