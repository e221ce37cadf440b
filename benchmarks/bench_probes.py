"""Does the loader's timing probe pay, and does starting the batch thread always?

At `worker_count=0` course_lib starts the batch thread at the first `next()` and picks the
read threads from one timing, in each iterator (`ReadOptions` states the rule): the first
chunk, read and transformed inline, is timed (`record_stage.py`). A second probe used to
time the second chunk against 2 ms and keep a cheaper pipeline in the caller's thread; this
benchmark measured it against always starting the thread and found it never paid, so it
was removed (RESULTS.md keeps the figures).

Here three pipelines run with the default `ReadOptions()` as the loader chooses
(`probe`) and in each of the four shapes forced (`caller`, `caller_read`, `batch`,
`batch_read`: no batch thread or the batch thread, without or with `num_threads` read
threads; the read threads forced by setting the probe's thresholds to 0 or infinity in the
run's process, the caller's thread by a read-ahead that makes every chunk there).
The pipelines, 28x28 uint8 images from a source that reads one record per call (no
`__getitems__`), `Batch(32, drop_remainder=True)`, one shuffled epoch:

- `cheap`: in memory, per record a scale to float32 (a few µs);
- `costly`: in memory, per record NumPy work of a few hundred µs (upsample, blur, average
  back), which holds the interpreter lock for much of it;
- `io_wait`: every read waits 0.5 ms (a sleep, as a network read waits), the scale after.

The consumer stands for a training step: it sleeps `--step-ms` (2 ms) per batch, off the
interpreter lock, as a step on an accelerator is. The time is one epoch, from `iter()` to
the last batch, probes included. Each run is a fresh process, rounds interleaved (round 1
of every run, then round 2). Each pipeline's verdict compares the probe's time with the
best forced shape's by the course's one rule (`course_lib.course.table.verdict`).

    .venv/bin/python benchmarks/bench_probes.py            # 5 rounds of 8,192 records
    .venv/bin/python benchmarks/bench_probes.py --quick    # 2 rounds of 2,048 records
    .venv/bin/python benchmarks/bench_probes.py --append   # also replace the probes
                                                           # section of RESULTS.md
    .venv/bin/python benchmarks/bench_probes.py --quick --append --results /tmp/R.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_common import replace_section

HERE = Path(__file__).resolve().parent
SECTION = "## Do the timing probes pay? (benchmarks/bench_probes.py)"
BATCH_SIZE, SEED = 32, 0
FULL_RECORDS, QUICK_RECORDS = 8_192, 2_048
FULL_REPEATS, QUICK_REPEATS = 5, 2
STEP_MS = 2.0
READ_WAIT_S = 0.5e-3  # io_wait: each read sleeps this long

PIPELINES = ("cheap", "costly", "io_wait")
# shape: (batch thread, read threads); None: as the probes choose
SHAPES = {"probe": None, "caller": (False, False), "caller_read": (False, True),
          "batch": (True, False), "batch_read": (True, True)}
FORCED = [shape for shape in SHAPES if SHAPES[shape] is not None]


# -- one run, in its own process ------------------------------------------------------------
class Images:
    """28x28 uint8 images in memory, one per `__getitem__` (no batched read), each read
    first waiting `read_wait_s` (0: none)."""

    def __init__(self, num_records: int, read_wait_s: float = 0.0):
        import numpy as np

        rng = np.random.default_rng(SEED)
        self.images = rng.integers(0, 256, size=(num_records, 28, 28), dtype=np.uint8)
        self.read_wait_s = read_wait_s

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, record_key: int):
        if self.read_wait_s:
            time.sleep(self.read_wait_s)
        return self.images[record_key]


def _transforms():
    """The per-record transforms, made after course_lib is imported."""
    import numpy as np

    import course_lib as grain

    class Scale(grain.MapTransform):
        def map(self, image):
            return image.astype(np.float32) * np.float32(1 / 255)

    class Blur(grain.MapTransform):
        """Upsample 4x, blur 3x3 twice, average back: a few hundred µs of small NumPy ops."""

        def map(self, image):
            big = np.kron(image.astype(np.float32), np.ones((4, 4), np.float32))
            for _ in range(2):
                padded = np.pad(big, 1, mode="edge")
                big = sum(padded[row:row + big.shape[0], column:column + big.shape[1]]
                          for row in range(3) for column in range(3)) / 9
            return big.reshape(28, 4, 28, 4).mean(axis=(1, 3))

    return Scale(), Blur()


def _force(shape: str) -> None:
    """Set the probe's thresholds in this process, and the read-ahead the loader builds, so
    that `shape` runs whatever it costs."""
    from course_lib import loader, record_stage
    from course_lib.read_ahead import ReadAhead

    forced = SHAPES[shape]
    if forced is None:
        return
    batch_thread, read_threads = forced
    if not batch_thread:

        class InCallersThread(ReadAhead):
            """Every chunk made in the calling thread, when `next()` asks for it."""

            def __init__(self, chunks, max_ready, stop=None):
                super().__init__(chunks, max_ready, stop)
                self.decision = "in the caller's thread: forced by bench_probes"
                self._pairs = (pair for chunk in chunks for pair in chunk)

            def start(self) -> None:
                """Nothing starts: the caller's thread is the shape."""

            def __next__(self):
                return next(self._pairs)

        loader.ReadAhead = InCallersThread
    if read_threads:  # every record "waits" at least 0 µs: all num_threads threads
        record_stage.THREADS_PAY_OFF_S = 0.0
    else:
        record_stage.THREADS_PAY_OFF_S = record_stage.WORK_PAYS_OFF_S = math.inf


# -- course_lib's account of where an iterator ran (its `execution` line), read ---------
@dataclasses.dataclass(frozen=True)
class Execution:
    """course_lib's `iterator.execution` line, read.

    `place`: "workers", "batch thread" or "this thread" (with `ReadOptions(num_threads=0)`,
    or a shape forced here). `read_threads`: the read threads the first chunk chose (0: none),
    and `why_no_read_threads` why none: "forbidden" (`ReadOptions(num_threads=0)`),
    "capped" (work that computes, capped at this process's share of the cores), "cheap"
    (under the thresholds), "empty", or "" when they run or with workers. `reads` is the
    read threads' part of the line, with its figures."""

    text: str
    place: str
    read_threads: int
    why_no_read_threads: str
    reads: str


def read_execution(execution: str) -> Execution:
    """Read course_lib's `DataLoaderIterator.execution` (also an Engine iterator's); a line
    this does not know (a loader not started yet, another format) raises `ValueError`."""
    if execution.startswith("in worker processes"):
        return Execution(execution, "workers", 0, "", "")
    inline = "in the caller's thread, no batch thread and "
    if execution.startswith(inline):
        place, reads = "this thread", execution[len(inline):]
    elif "; " in execution:
        batch, reads = execution.split("; ", 1)
        if batch.startswith("on the batch thread"):
            place = "batch thread"
        elif batch.startswith("in the caller's thread"):
            place = "this thread"
        else:
            raise ValueError(f"not a decided batch thread: {batch!r}")
    else:
        raise ValueError(f"not an execution line of a started iterator: {execution!r}")
    counted = re.match(r"(\d+) read threads?:", reads)
    if counted:
        return Execution(execution, place, int(counted.group(1)), "", reads)
    if not reads.startswith("no read threads:"):
        raise ValueError(f"not a decided read-thread count: {reads!r}")
    if reads.startswith("no read threads: ReadOptions("):
        why = "forbidden"
    elif reads.startswith("no read threads: the first chunk was empty"):
        why = "empty"
    elif "capped at this process's share of the cores" in reads:
        why = "capped"
    else:
        why = "cheap"
    return Execution(execution, place, 0, why, reads)


def chosen_shape(execution: str) -> str:
    """The shape an iterator's `execution` says ran: `caller`, `caller_read`, `batch` or
    `batch_read`, read by `read_execution`."""
    ran = read_execution(execution)
    if ran.place == "workers":
        raise ValueError(f"no batch-thread decision in execution={execution!r}")
    thread = "batch" if ran.place == "batch thread" else "caller"
    return f"{thread}_read" if ran.read_threads else thread


def run_child(pipeline: str, shape: str, num_records: int, step_ms: float) -> dict:
    import numpy as np

    import course_lib as grain

    _force(shape)
    scale, blur = _transforms()
    source = Images(num_records, READ_WAIT_S if pipeline == "io_wait" else 0.0)
    transform = blur if pipeline == "costly" else scale
    sample = [source[key] for key in range(64)]  # a record's cost, before the clock
    started = time.perf_counter()
    for image in sample:
        transform.map(image)
    record_us = (time.perf_counter() - started) / len(sample) * 1e6
    loader = grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(num_records, shuffle=True, seed=SEED, num_epochs=1),
        operations=[transform, grain.Batch(BATCH_SIZE, drop_remainder=True)],
        read_options=grain.ReadOptions())
    batches = 0
    started = time.perf_counter()
    with iter(loader) as iterator:
        for batch in iterator:
            assert np.asarray(batch).shape == (BATCH_SIZE, 28, 28), np.asarray(batch).shape
            time.sleep(step_ms / 1e3)  # the training step, off the interpreter lock
            batches += 1
        execution = iterator.execution
    seconds = time.perf_counter() - started
    ran = chosen_shape(execution)
    if shape != "probe" and ran != shape:
        return {"error": f"forced {shape}, but {ran} ran: {execution}"}
    return {"pipeline": pipeline, "shape": shape, "ran": ran, "seconds": seconds,
            "batches": batches, "records_per_s": batches * BATCH_SIZE / seconds,
            "transform_us_per_record": record_us, "execution": execution}


def _spawn(pipeline: str, shape: str, num_records: int, step_ms: float,
           timeout: float) -> dict:
    arguments = ["--child", pipeline, shape, "--records", str(num_records),
                 "--step-ms", str(step_ms)]
    try:
        result = subprocess.run([sys.executable, __file__, *arguments], capture_output=True,
                                text=True, timeout=timeout, cwd=HERE.parent)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout:.0f} s"}
    if result.returncode != 0:
        return {"error": (result.stderr.strip().splitlines() or ["no error output"])[-1]}
    return json.loads(result.stdout.strip().splitlines()[-1])


# -- the verdicts ---------------------------------------------------------------------------
WHAT = {"caller": "the caller's thread, no read threads",
        "caller_read": "the caller's thread with read threads",
        "batch": "the batch thread, no read threads",
        "batch_read": "the batch thread with read threads"}


def _flip(shape: str, probe: str) -> str:
    """The shape the `probe` ("batch" or "read") would have given by choosing otherwise."""
    batch_thread, read_threads = SHAPES[shape]
    if probe == "batch":
        batch_thread = not batch_thread
    else:
        read_threads = not read_threads
    return next(name for name in FORCED if SHAPES[name] == (batch_thread, read_threads))


def choice_sentence(what: str, chosen: str, chosen_seconds: list[float], rejected: str,
                    rejected_seconds: list[float]) -> str:
    """`what` (a probe, or the probed run) against the shape it did not run, by the course's
    margin rule on the medians of the rounds: one branch per verdict of `table.verdict`."""
    from course_lib.course.table import FASTER, NOISY, SAME, Estimate, margin, verdict

    ours, theirs = Estimate.of(chosen_seconds), Estimate.of(rejected_seconds)
    said = verdict(ours, theirs)
    figures = (f"{chosen} {ours.value:.3f} s against {rejected} {theirs.value:.3f} s, "
               f"{ours.value / theirs.value:.2f}x, margin {margin(ours, theirs):.0%}")
    if said == SAME:
        return f"{what}: as fast as {rejected} within the noise ({figures})."
    if said == NOISY:
        return f"{what}: too noisy to tell from {rejected} ({figures})."
    if said == FASTER:
        return f"{what}: faster than {rejected}, it pays ({figures})."
    return f"{what}: slower than {rejected}, it costs ({figures})."


def summarize(runs: dict) -> dict:
    """Per pipeline: per shape the epoch times, the shapes the probes chose, and the
    sentences: each probe's choice against the other option (forced shapes both), and the
    probed run against the fastest forced shape."""
    summary = {}
    for pipeline in PIPELINES:
        ok = {shape: [run for run in runs[pipeline][shape] if "error" not in run]
              for shape in SHAPES}
        seconds = {shape: [run["seconds"] for run in ok[shape]] for shape in SHAPES}
        chose = [run["ran"] for run in ok["probe"]]
        entry = {"seconds": seconds, "probe_chose": chose, "sentences": [],
                 "errors": [run["error"] for shape in SHAPES for run in runs[pipeline][shape]
                            if "error" in run],
                 "transform_us_per_record": (ok["probe"] or [{}])[0].get(
                     "transform_us_per_record")}
        summary[pipeline] = entry
        if not chose or not all(seconds[shape] for shape in FORCED):
            continue
        usual = max(set(chose), key=chose.count)  # the rounds may disagree: the usual one
        for probe, name in (("batch", "the batch thread, always started"),
                            ("read", "the read-thread probe (first chunk per record)")):
            other = _flip(usual, probe)
            entry["sentences"].append(choice_sentence(
                f"{pipeline}, {name}, ran {WHAT[usual]}", usual, seconds[usual], other,
                seconds[other]))
        best = min(FORCED, key=lambda shape: statistics.median(seconds[shape]))
        entry["sentences"].append(choice_sentence(
            f"{pipeline}, the probed run (timings included) against the fastest forced shape",
            "probe", seconds["probe"], best, seconds[best]))
    return summary


def render(summary: dict, meta: dict) -> str:
    def cell(values: list[float]) -> str:
        if not values:
            return "failed"
        return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"

    lines = [SECTION, "",
             f"Written by `benchmarks/bench_probes.py` ({meta['mode']}: {meta['repeats']} "
             f"rounds of {meta['records']:,} records per run, batches of {BATCH_SIZE}, a "
             f"{meta['step_ms']:g} ms step per batch; {meta['cores']} cores, load average "
             f"{meta['load'][0]:.1f} at start, Python {meta['python']}). Seconds per epoch, "
             "median (min-max) of the rounds; `probe` runs as the timings choose, the "
             "others are forced.", "",
             "| pipeline | transform µs/record | probes chose | "
             + " | ".join(SHAPES) + " |",
             "| --- | ---: | --- | " + " | ".join("---:" for _ in SHAPES) + " |"]
    for pipeline in PIPELINES:
        entry = summary[pipeline]
        cost = entry["transform_us_per_record"]
        lines.append(f"| {pipeline} | {'' if cost is None else f'{cost:.1f}'} | "
                     f"{', '.join(sorted(set(entry['probe_chose']))) or 'failed'} | "
                     + " | ".join(cell(entry["seconds"][shape]) for shape in SHAPES) + " |")
    lines.append("")
    for pipeline in PIPELINES:
        entry = summary[pipeline]
        lines += [f"- {sentence}" for sentence in entry["sentences"]]
        for error in sorted(set(entry["errors"])):
            lines.append(f"- {pipeline}: a run failed: {error[:160]}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--append", action="store_true",
                        help="replace the probes section of the results file")
    parser.add_argument("--results", type=Path, default=HERE / "RESULTS.md",
                        help="the results file --append writes (default: benchmarks/RESULTS.md)")
    parser.add_argument("--child", nargs=2, metavar=("PIPELINE", "SHAPE"))
    parser.add_argument("--records", type=int)
    parser.add_argument("--step-ms", type=float, default=STEP_MS)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_child(*args.child, args.records, args.step_ms)))
        return
    records = args.records or (QUICK_RECORDS if args.quick else FULL_RECORDS)
    repeats = QUICK_REPEATS if args.quick else FULL_REPEATS
    meta = {"mode": "quick" if args.quick else "full", "repeats": repeats, "records": records,
            "step_ms": args.step_ms, "cores": os.cpu_count(), "load": os.getloadavg(),
            "python": sys.version.split()[0]}
    runs = {pipeline: {shape: [] for shape in SHAPES} for pipeline in PIPELINES}
    for round_index in range(repeats):
        for pipeline in PIPELINES:
            for shape in SHAPES:
                result = _spawn(pipeline, shape, records, args.step_ms, args.timeout)
                runs[pipeline][shape].append(result)
                shown = (f"{result['seconds']:.3f} s ({result['ran']})"
                         if "error" not in result else f"failed: {result['error']}")
                print(f"round {round_index + 1}/{repeats} {pipeline} {shape}: {shown}",
                      flush=True)
    summary = summarize(runs)
    text = render(summary, meta)
    print("\n" + text)
    work = HERE / "_work"
    work.mkdir(exist_ok=True)
    (work / "probes.json").write_text(json.dumps({"meta": meta, "summary": summary,
                                                  "runs": runs}, indent=1))
    if args.append:
        replace_section(text, args.results, SECTION)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    main()
