"""The training loop, fed: course_lib against Grain's DataLoader and Dataset API.

Lesson 7's pipeline, at lesson 11's size: 1,500 of the digits upscaled to 128x128 and
written as PNG files; per record read the file, decode it with Pillow, shift it at random
(pad 8 pixels, cut back to 128x128) and scale it to floats; batches of 64, shuffled, endless.
It feeds the lessons' Flax NNX MLP and jitted Adam step (`course_lib.training`), hidden
layer 128 (the lessons' step) or 256 (a step about twice as heavy). Every feed reads with
`ReadOptions(num_threads=2, prefetch_buffer_size=128)`, as in lesson 11:

- `course_lib_w{0,2}`: `course_lib.DataLoader` with `DecodeImage`, `RandomCrop`,
  `Normalize`, `Batch(64, drop_remainder=True)`;
- `course_lib_ds_w{0,2}`: course_lib's Dataset API, the same chain as `grain_ds` below
  with course_lib's transforms (`MapDataset.source(...).shuffle().repeat().map()
  .random_map().map().batch().to_iter_dataset(read_options)`, `.mp_prefetch(...)`);
- `grain_dl_w{0,2}`: Grain 0.2.18's `DataLoader`, the same operations written as Grain
  transforms (Pillow decode, pad and cut, scale);
- `grain_ds_w{0,2}`: Grain's Dataset API, `MapDataset.source(...).shuffle().repeat()
  .map().random_map().map().batch().to_iter_dataset(read_options)`, and `.mp_prefetch(
  MultiprocessingOptions(num_workers=2))` for workers.

Each run is a fresh process; rounds are interleaved (round 1 of every configuration, then
round 2, ...). A training run builds the iterator, takes `WARMUP_STEPS` steps (compiling,
starting workers), then times `--steps` steps: steps/s over that window, idle share = the
window's time spent waiting in `next()`. The run also reports its start-up (iterator built
to first batch) against the window, so that start-up cannot decide a ranking unseen. Beside
the feeds the same run measures this machine's ideal: the step alone on ready batches
(`step_alone_*`), and each loader alone (`*_loader`, batches/s with no step).

A second table holds course_lib's loader alone at `num_threads` 0, 1, 2 and 4 and
`worker_count` 0 and 2, its Dataset API alone at `num_threads=0` (`course_lib_ds_w0_t0`,
what the face costs beside `course_lib_w0_t0`), plus a diagnostic with the thread cap of
`record_stage.threads_for_work` lifted (`_uncapped`), which shows why the cap exists.

    .venv/bin/python benchmarks/bench_feeds.py            # 3 rounds (about 10 minutes)
    .venv/bin/python benchmarks/bench_feeds.py --quick    # 1 round, fewer steps
    .venv/bin/python benchmarks/bench_feeds.py --append   # also replace the section of
                                                          # RESULTS.md
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing course_lib

SECTION = "## The training loop, fed (lesson 11's pipeline)"
SIDE, PADDING, BATCH_SIZE, NUM_TRAIN, SEED = 128, 8, 64, 1500, 0
NUM_THREADS, PREFETCH = 2, 128
WARMUP_STEPS = 5
# Steps timed per run, by step and worker count: more with workers, whose start-up is
# longer, so that it stays small beside the window (the table prints the share).
FULL = {"repeats": 3, "steps": {("lesson", 0): 400, ("lesson", 2): 800, ("heavy", 0): 240,
                                ("heavy", 2): 400}, "loader_batches": 150}
QUICK = {"repeats": 1, "steps": {("lesson", 0): 120, ("lesson", 2): 120, ("heavy", 0): 80,
                                 ("heavy", 2): 80}, "loader_batches": 60}
HIDDEN = {"lesson": 128, "heavy": 256}
FAMILIES = ("course_lib", "course_lib_ds", "grain_dl", "grain_ds")
TARGET_RATIO = 1.2  # course_lib against the best Grain feed at the same worker count
FACES_SHARE = 0.95  # course_lib's Dataset API within 5% of its DataLoader
STEP_LIMIT_SHARE = 0.95  # or, where the step alone is the limit, within 5% of it


@dataclasses.dataclass(frozen=True)
class Run:
    name: str
    kind: str  # "train", "loader" or "step"
    family: str = ""  # "course_lib", "course_lib_ds", "grain_dl", "grain_ds"
    workers: int = 0
    step: str = "lesson"
    num_threads: int = NUM_THREADS
    uncapped: bool = False


def training_runs() -> list[Run]:
    runs = []
    for step in ("lesson", "heavy"):
        runs.append(Run(f"step_alone_{step}", "step", step=step))
        for family in FAMILIES:
            for workers in (0, 2):
                runs.append(Run(f"{family}_w{workers}_{step}", "train", family, workers, step))
    for family in FAMILIES:
        for workers in (0, 2):
            runs.append(Run(f"{family}_w{workers}_loader", "loader", family, workers))
    return runs


def thread_runs() -> list[Run]:
    runs = [Run(f"course_lib_w{workers}_t{threads}", "loader", "course_lib", workers,
                num_threads=threads)
            for workers in (0, 2) for threads in (0, 1, 2, 4)]
    runs += [Run(f"course_lib_w0_t{threads}_uncapped", "loader", "course_lib", 0,
                 num_threads=threads, uncapped=True) for threads in (2, 4)]
    # The Dataset face in the single-threaded mode, beside `course_lib_w0_t0`: what the
    # face itself costs, with no thread to hide it.
    runs.append(Run("course_lib_ds_w0_t0", "loader", "course_lib_ds", 0, num_threads=0))
    return runs


# -- Grain's side of the pipeline (importable by Grain's spawned workers) ---------------------
def _grain_classes():
    import grain.python as grain
    from PIL import Image

    class PngFiles(grain.RandomAccessDataSource):
        def __init__(self, folder):
            self.files = sorted(Path(folder).glob("*.png"))
            self.labels = np.load(Path(folder) / "labels.npy").astype(np.int32)

        def __len__(self):
            return len(self.files)

        def __getitem__(self, record_key):
            return {"image": self.files[record_key].read_bytes(),
                    "label": self.labels[record_key]}

    class DecodePng(grain.MapTransform):
        def map(self, element):
            with Image.open(io.BytesIO(element["image"])) as picture:
                return {**element, "image": np.asarray(picture)}

    class RandomShift(grain.RandomMapTransform):
        def random_map(self, element, rng):
            height, width = element["image"].shape
            top, left = rng.integers(0, 2 * PADDING + 1, size=2)
            padded = np.pad(element["image"], PADDING)
            return {**element, "image": padded[top:top + height, left:left + width]}

    class ToFloat(grain.MapTransform):
        def map(self, element):
            return {**element, "image": element["image"].astype(np.float32) * np.float32(1 / 255)}

    return PngFiles, DecodePng, RandomShift, ToFloat


if __name__ != "__main__" and "grain" in sys.modules:  # in a Grain worker: the same classes
    PngFiles, DecodePng, RandomShift, ToFloat = _grain_classes()


def _course_lib_batches(folder, run: Run):
    import course_lib as grain

    if run.uncapped:
        import course_lib.record_stage as record_stage

        record_stage.threads_for_work = lambda num_threads, worker_count=0: num_threads
    source = grain.ImageFolderDataSource(folder)
    read_options = grain.ReadOptions(num_threads=run.num_threads, prefetch_buffer_size=PREFETCH)
    if run.family == "course_lib_ds":  # the Dataset face: grain_ds's chain, word for word
        dataset = (grain.MapDataset.source(source)[:NUM_TRAIN].shuffle(seed=SEED).repeat()
                   .map(grain.DecodeImage())
                   .random_map(grain.RandomCrop(SIDE, padding=PADDING), seed=SEED)
                   .map(grain.Normalize()).batch(BATCH_SIZE, drop_remainder=True)
                   .to_iter_dataset(read_options))
        if run.workers:
            dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=run.workers))
        return iter(dataset)
    sampler = grain.IndexSampler(num_records=NUM_TRAIN, shuffle=True, seed=SEED)
    operations = [grain.DecodeImage(), grain.RandomCrop(SIDE, padding=PADDING),
                  grain.Normalize(), grain.Batch(BATCH_SIZE, drop_remainder=True)]
    loader = grain.DataLoader(data_source=source, sampler=sampler, operations=operations,
                              worker_count=run.workers, read_options=read_options)
    return iter(loader)


def _grain_batches(folder, run: Run):
    import grain.python as grain
    from absl import flags

    if not flags.FLAGS.is_parsed():  # Grain's workers read absl flags
        flags.FLAGS.mark_as_parsed()
    import bench_feeds  # the classes from an importable module, for spawned workers

    files, decode, shift, to_float = (bench_feeds.PngFiles, bench_feeds.DecodePng,
                                      bench_feeds.RandomShift, bench_feeds.ToFloat)
    read_options = grain.ReadOptions(num_threads=NUM_THREADS, prefetch_buffer_size=PREFETCH)
    if run.family == "grain_dl":
        sampler = grain.IndexSampler(num_records=NUM_TRAIN, shuffle=True, seed=SEED,
                                     shard_options=grain.NoSharding())
        loader = grain.DataLoader(
            data_source=files(folder), sampler=sampler, worker_count=run.workers,
            operations=[decode(), shift(), to_float(),
                        grain.Batch(BATCH_SIZE, drop_remainder=True)],
            read_options=read_options)
        return iter(loader)
    dataset = (grain.MapDataset.source(files(folder))[:NUM_TRAIN].shuffle(seed=SEED).repeat()
               .map(decode()).random_map(shift(), seed=SEED).map(to_float())
               .batch(BATCH_SIZE, drop_remainder=True).to_iter_dataset(read_options))
    if run.workers:
        dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=run.workers))
    return iter(dataset)


def _close(iterator) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def run_child(name: str, steps: int) -> dict:
    import jax

    from course_lib import course
    from course_lib.training import create_model, train_step

    run = next(run for run in training_runs() + thread_runs() if run.name == name)
    folder = course.digit_images_on_disk(SIDE)
    model, optimizer = create_model(SIDE * SIDE, seed=SEED, hidden=HIDDEN[run.step])
    if run.kind == "step":
        rng = np.random.default_rng(SEED)
        ready = [{"image": rng.random((BATCH_SIZE, SIDE, SIDE), dtype=np.float32),
                  "label": rng.integers(0, 10, BATCH_SIZE).astype(np.int32)} for _ in range(4)]
        batches, started = iter(lambda: ready[len(ready) - 1], None), time.perf_counter()
    else:
        started = time.perf_counter()
        make = _course_lib_batches if run.family.startswith("course_lib") else _grain_batches
        batches = make(folder, run)
    train = run.kind != "loader"
    first_batch_s = None
    for _ in range(WARMUP_STEPS):
        batch = next(batches)
        if first_batch_s is None:
            first_batch_s = time.perf_counter() - started
        if train:
            jax.block_until_ready(train_step(model, optimizer, batch["image"], batch["label"]))
    waited = 0.0
    window_start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(steps):
        asked = time.perf_counter()
        batch = next(batches)
        waited += time.perf_counter() - asked
        if train:
            jax.block_until_ready(train_step(model, optimizer, batch["image"], batch["label"]))
    window = time.perf_counter() - window_start
    cpu = time.process_time() - cpu_start
    _close(batches)
    return {"name": name, "steps": steps, "window_s": window, "rate": steps / window,
            "idle": waited / window, "first_batch_s": first_batch_s,
            "startup_share": first_batch_s / window, "main_cpu_ms": 1e3 * cpu / steps}


def _spawn(name: str, steps: int, timeout: float) -> dict:
    from bench_common import run_in_fresh_process

    return run_in_fresh_process(__file__, ["--child", name, "--steps", str(steps)], name,
                                timeout, HERE.parent)


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def summarize(results: dict[str, list[dict]]) -> dict[str, dict]:
    summaries = {}
    for name, runs in results.items():
        ok = [run for run in runs if "error" not in run]
        if not ok:
            summaries[name] = {"error": runs[0]["error"] if runs else "not run"}
            continue
        summaries[name] = {"rate": _median(ok, "rate"), "rate_min": min(r["rate"] for r in ok),
                           "rate_max": max(r["rate"] for r in ok), "idle": _median(ok, "idle"),
                           "first_batch_s": _median(ok, "first_batch_s"),
                           "startup_share": max(r["startup_share"] for r in ok),
                           "window_s": _median(ok, "window_s"), "steps": ok[0]["steps"],
                           "runs_ok": len(ok)}
    return summaries


def targets(summaries: dict[str, dict]) -> list[dict]:
    """course_lib against the best Grain feed at the same worker count, per step; where the
    step alone is the limit (no feed could beat it), within 5% of the step alone instead."""
    rows = []
    for step in ("lesson", "heavy"):
        step_alone = summaries.get(f"step_alone_{step}", {}).get("rate")
        for workers in (0, 2):
            ours = summaries.get(f"course_lib_w{workers}_{step}", {}).get("rate")
            grains = {name: summaries.get(f"{name}_w{workers}_{step}", {}).get("rate")
                      for name in ("grain_dl", "grain_ds")}
            grains = {name: rate for name, rate in grains.items() if rate}
            if not ours or not grains:
                continue
            best_name, best = max(grains.items(), key=lambda item: item[1])
            ratio = ours / best
            of_step = ours / step_alone if step_alone else None
            met = ratio >= TARGET_RATIO or (of_step is not None and of_step >= STEP_LIMIT_SHARE)
            rows.append({"label": f"course_lib_w{workers}_{step} / {best_name}_w{workers}_{step}",
                         "ratio": ratio, "of_step": of_step, "met": met})
    return rows


def faces_targets(summaries: dict[str, dict]) -> list[dict]:
    """course_lib's Dataset API against its `DataLoader` (within 5%) and against Grain's
    Dataset API (at least 1.2x, or within 5% of the step alone where the step is the limit),
    at the same worker count and step."""
    rows = []
    for step in ("lesson", "heavy"):
        step_alone = summaries.get(f"step_alone_{step}", {}).get("rate")
        for workers in (0, 2):
            rate = {family: summaries.get(f"{family}_w{workers}_{step}", {}).get("rate")
                    for family in ("course_lib_ds", "course_lib", "grain_ds")}
            if not all(rate.values()):
                continue
            of_step = rate["course_lib_ds"] / step_alone if step_alone else None
            faces = rate["course_lib_ds"] / rate["course_lib"]
            against_grain = rate["course_lib_ds"] / rate["grain_ds"]
            rows.append({"label": f"w{workers}_{step}", "faces": faces,
                         "faces_met": faces >= FACES_SHARE, "grain": against_grain,
                         "of_step": of_step,
                         "grain_met": against_grain >= TARGET_RATIO or (
                             of_step is not None and of_step >= STEP_LIMIT_SHARE)})
    return rows


def render(summaries: dict[str, dict], rows: list[dict], meta: dict,
           faces_rows: list[dict] = ()) -> str:
    lines = [SECTION, "",
             f"Written by `benchmarks/bench_feeds.py` ({meta['mode']}: {meta['repeats']} "
             f"round(s), each run a fresh process, rounds interleaved; {meta['cores']} cores, "
             f"load average {meta['load_start']:.1f} at start and {meta['load_end']:.1f} at "
             f"the end; whole run {meta['seconds']:.0f} s). Every feed reads with "
             f"ReadOptions(num_threads={NUM_THREADS}, prefetch_buffer_size={PREFETCH}). "
             "Steps/s are over the timed window after "
             f"{WARMUP_STEPS} warm-up steps; idle is the window's share spent waiting in "
             "`next()`; start-up is building the iterator to its first batch, shown against "
             "the window (the largest of the rounds). The accelerator here is the CPU that "
             "also loads the data: the step (XLA's threads) and the loader share 2 cores.", "",
             "| configuration | steps/s (median) | min | max | idle | steps timed | window "
             "(s) | start-up (s) | start-up / window |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [_row(name, summary) for name, summary in summaries.items()
              if not _is_thread_run(name)]
    lines += ["", "Loader alone, course_lib (batches/s, no step): `num_threads` 0 is the "
              "single-threaded mode; above 0 a background thread batches ahead and the "
              "per-record work gets `threads_for_work` threads when a record costs enough "
              f"(on {meta['cores']} cores: {meta['work_threads_w0']} in process, "
              f"{meta['work_threads_w2']} per worker with 2 workers). `_uncapped` lifts that "
              "cap, a diagnostic; `course_lib_ds_w0_t0` is the Dataset API's chain at "
              "`num_threads=0`, to set beside `course_lib_w0_t0`.", "",
              "| configuration | batches/s (median) | min | max | timed | window (s) | "
              "start-up (s) | start-up / window |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [_row(name, summary, idle=False) for name, summary in summaries.items()
              if _is_thread_run(name)]
    lines += ["", f"Targets: course_lib at least {TARGET_RATIO}x the best Grain feed at the "
              "same worker count, or, where the step alone is the limit, at least "
              f"{STEP_LIMIT_SHARE:.0%} of the step alone.", "",
              "| course_lib against the best Grain feed | ratio | of the step alone | met |",
              "| --- | ---: | ---: | --- |"]
    for row in rows:
        of_step = f"{row['of_step']:.0%}" if row["of_step"] is not None else "n/a"
        lines.append(f"| {row['label']} | {row['ratio']:.2f}x | {of_step} | "
                     f"{'yes' if row['met'] else 'NO'} |")
    lines += ["", "The Dataset face: course_lib's Dataset API (`course_lib_ds`) against its "
              f"`DataLoader` (target: at least {FACES_SHARE:.0%} of its steps/s) and against "
              f"Grain's Dataset API (target: at least {TARGET_RATIO}x, or at least "
              f"{STEP_LIMIT_SHARE:.0%} of the step alone).", "",
              "| worker count, step | course_lib_ds / course_lib | met | course_lib_ds / "
              "grain_ds | of the step alone | met |", "| --- | ---: | --- | ---: | ---: | --- |"]
    for row in faces_rows:
        of_step = f"{row['of_step']:.0%}" if row["of_step"] is not None else "n/a"
        lines.append(f"| {row['label']} | {row['faces']:.2f}x | "
                     f"{'yes' if row['faces_met'] else 'NO'} | {row['grain']:.2f}x | {of_step} "
                     f"| {'yes' if row['grain_met'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def _is_thread_run(name: str) -> bool:
    return name in {run.name for run in thread_runs()}


def _row(name: str, summary: dict, idle: bool = True) -> str:
    if "error" in summary:
        return f"| {name} | failed: {summary['error'][:90]} |" + " |" * (7 if idle else 6)
    cells = [name, f"{summary['rate']:.1f}", f"{summary['rate_min']:.1f}",
             f"{summary['rate_max']:.1f}"]
    if idle:
        cells.append(f"{summary['idle']:.0%}")
    cells += [str(summary["steps"]), f"{summary['window_s']:.1f}",
              f"{summary['first_batch_s']:.2f}", f"{summary['startup_share']:.1%}"]
    return "| " + " | ".join(cells) + " |"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--append", action="store_true",
                        help="replace this benchmark's section of benchmarks/RESULTS.md")
    parser.add_argument("--only", default="", help="comma-separated run names (a subset)")
    parser.add_argument("--child")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args.child, args.steps)))
        return
    from bench_common import replace_section

    from course_lib.record_stage import threads_for_work

    plan = QUICK if args.quick else FULL
    runs = training_runs() + thread_runs()
    if args.only:
        runs = [run for run in runs if run.name in args.only.split(",")]
    started, load_start = time.perf_counter(), os.getloadavg()[0]
    results: dict[str, list[dict]] = {run.name: [] for run in runs}
    for round_index in range(plan["repeats"]):
        for run in runs:
            steps = (plan["loader_batches"] if run.kind == "loader"
                     else plan["steps"][run.step, run.workers])
            result = _spawn(run.name, steps, args.timeout)
            results[run.name].append(result)
            shown = (f"{result['rate']:.1f}/s, idle {result['idle']:.0%}, start-up "
                     f"{result['first_batch_s']:.2f} s" if "error" not in result
                     else result["error"])
            print(f"round {round_index + 1}: {run.name}: {shown}", flush=True)
    meta = {"mode": "quick" if args.quick else "full", "repeats": plan["repeats"],
            "cores": os.cpu_count(), "load_start": load_start, "load_end": os.getloadavg()[0],
            "seconds": time.perf_counter() - started,
            "work_threads_w0": threads_for_work(16, 0), "work_threads_w2": threads_for_work(16, 2)}
    summaries = summarize(results)
    text = render(summaries, targets(summaries), meta, faces_targets(summaries))
    print(text)
    if args.append and not args.only:
        replace_section(text, HERE / "RESULTS.md", SECTION)
    (HERE / "_work").mkdir(exist_ok=True)
    (HERE / "_work" / "bench_feeds.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
