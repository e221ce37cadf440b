"""Benchmark the lessons' reference pipeline on course_lib, Grain, torch and plain NumPy.

The reference pipeline (see bench_common.py): 60000 random 28x28 uint8 images with int
labels in memory, per-record normalize and random horizontal flip (p=0.5), Batch(64,
drop_remainder=True), one shuffled epoch.

The decode-bound pipeline (see bench_decode.py): 6000 PNG files on disk (RGB, written once
to a cache folder under benchmarks/_work/), per record Pillow decode, pad-and-random-crop,
random horizontal flip and per-channel normalize (0.5-1 ms per record on one core),
Batch(32, drop_remainder=True), one shuffled epoch; with 0, 1 and 2 workers.

Every repetition of every configuration runs in a fresh process (this script, re-run with
`--child NAME`), so imports, caches and worker start-up are paid as a learner pays them.
Repetitions are interleaved (round 1 of every config, then round 2, ...) so that a change in
machine load hits all configurations alike.

    .venv/bin/python benchmarks/run_benchmarks.py                 # all configs, 5 rounds
    .venv/bin/python benchmarks/run_benchmarks.py --quick         # smoke run, small data
    .venv/bin/python benchmarks/run_benchmarks.py --only 'course_lib_w0*,grain_w0_*'
    .venv/bin/python benchmarks/run_benchmarks.py --list
    .venv/bin/python benchmarks/run_benchmarks.py --profile course_lib_w0
    .venv/bin/python benchmarks/run_benchmarks.py --profile course_lib_decode_w0

A full run (no --quick, no --only) writes benchmarks/RESULTS.md, benchmarks/results.json and
benchmarks/worker_scaling.png; other runs write them under benchmarks/_work/ unless --out-dir
says otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import datetime
import fnmatch
import hashlib
import importlib
import importlib.metadata
import json
import os
import platform
import pstats
import resource
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import bench_decode
import numpy as np
from bench_common import BATCH_SIZE, IMAGE_SHAPE, MULTIPLIER, NUM_RECORDS, OFFSET, make_data

try:
    import psutil
except ImportError:  # peak memory then comes from resource.getrusage in the child
    psutil = None

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / "_work"  # git-ignored: logs, per-run result files, profiles
QUICK_RECORDS = 8192
QUICK_REPEATS = 2
MONITOR_INTERVAL_S = 0.1
PLOT_NAME = "worker_scaling.png"


# -- the configurations ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    family: str  # numpy | course_lib | grain | torch
    description: str
    options: dict = dataclasses.field(default_factory=dict)
    pipeline: str = "reference"  # reference (in memory) | decode (PNG files, bench_decode.py)
    scaling: bool = True  # a point of the worker-scaling plot (False: diagnostics)

    @property
    def workers(self) -> int:
        return self.options.get("worker_count", 0)


BUILDERS = {
    ("numpy", "reference"): ("bench_common", "build_numpy"),
    ("course_lib", "reference"): ("bench_course_lib", "build_course_lib"),
    ("grain", "reference"): ("bench_grain", "build_grain"),
    ("torch", "reference"): ("bench_torch", "build_torch"),
    ("course_lib", "decode"): ("bench_course_lib", "build_course_lib_decode"),
    ("grain", "decode"): ("bench_grain", "build_grain_decode"),
    ("torch", "decode"): ("bench_torch", "build_torch_decode"),
}
DECODE = "decode"

CONFIGS = {config.name: config for config in [
    Config("numpy_limit", "numpy",
           "pure NumPy: permutation, fancy index, scale and masked flip per batch"),
    Config("course_lib_w0", "course_lib",
           "per-record augment transforms, worker_count=0, ReadOptions(num_threads=0)",
           {"worker_count": 0, "read_threads": 0}),
    Config("course_lib_w0_default_read", "course_lib",
           "per-record augment transforms, worker_count=0, default ReadOptions()",
           {"worker_count": 0, "read_threads": None}),
    Config("course_lib_w0_vectorized", "course_lib",
           "augment transforms with batched=True after Batch, worker_count=0, "
           "ReadOptions(num_threads=0)",
           {"worker_count": 0, "read_threads": 0, "vectorized": True}, scaling=False),
    Config("course_lib_w0_plain_ops", "course_lib",
           "diagnostic: the plain transforms Grain/torch use, worker_count=0, "
           "ReadOptions(num_threads=0)",
           {"worker_count": 0, "read_threads": 0, "transforms": "plain"}, scaling=False),
    Config("grain_w0_default_read", "grain",
           "Grain, worker_count=0, default ReadOptions() (16 threads)",
           {"worker_count": 0, "read_threads": None}),
    Config("grain_w0_read_t0", "grain", "Grain, worker_count=0, ReadOptions(num_threads=0)",
           {"worker_count": 0, "read_threads": 0}),
    Config("grain_w0_read_t1", "grain", "Grain, worker_count=0, ReadOptions(num_threads=1)",
           {"worker_count": 0, "read_threads": 1}),
    Config("grain_w0_read_t2", "grain", "Grain, worker_count=0, ReadOptions(num_threads=2)",
           {"worker_count": 0, "read_threads": 2}),
    Config("torch_w0", "torch", "torch DataLoader, num_workers=0, default collate",
           {"worker_count": 0}),
    Config("course_lib_w1", "course_lib", "per-record augment transforms, worker_count=1",
           {"worker_count": 1, "read_threads": None}),
    Config("course_lib_w2", "course_lib", "per-record augment transforms, worker_count=2",
           {"worker_count": 2, "read_threads": None}),
    Config("grain_w1", "grain", "Grain, worker_count=1, default ReadOptions()",
           {"worker_count": 1, "read_threads": None}),
    Config("grain_w2", "grain", "Grain, worker_count=2, default ReadOptions()",
           {"worker_count": 2, "read_threads": None}),
    Config("torch_w1", "torch", "torch DataLoader, num_workers=1, persistent_workers=False",
           {"worker_count": 1}),
    Config("torch_w2", "torch", "torch DataLoader, num_workers=2, persistent_workers=False",
           {"worker_count": 2}),
    # The decode-bound pipeline: PNG files, Pillow decode + crop + flip + normalize.
    Config("course_lib_decode_w0", "course_lib",
           "decode-bound: course_lib.augment transforms, worker_count=0, "
           "ReadOptions(num_threads=0)",
           {"worker_count": 0, "read_threads": 0}, pipeline=DECODE),
    Config("course_lib_decode_w0_default_read", "course_lib",
           "decode-bound: course_lib.augment transforms, worker_count=0, default ReadOptions() "
           "(16 threads read the files)",
           {"worker_count": 0, "read_threads": None}, pipeline=DECODE),
    Config("course_lib_decode_w1", "course_lib",
           "decode-bound: course_lib.augment transforms, worker_count=1, default ReadOptions()",
           {"worker_count": 1, "read_threads": None}, pipeline=DECODE),
    Config("course_lib_decode_w2", "course_lib",
           "decode-bound: course_lib.augment transforms, worker_count=2, default ReadOptions()",
           {"worker_count": 2, "read_threads": None}, pipeline=DECODE),
    Config("grain_decode_w0_read_t0", "grain",
           "decode-bound: Grain, worker_count=0, ReadOptions(num_threads=0)",
           {"worker_count": 0, "read_threads": 0}, pipeline=DECODE),
    Config("grain_decode_w0_default_read", "grain",
           "decode-bound: Grain, worker_count=0, default ReadOptions() (16 threads)",
           {"worker_count": 0, "read_threads": None}, pipeline=DECODE),
    Config("grain_decode_w1", "grain",
           "decode-bound: Grain, worker_count=1, default ReadOptions()",
           {"worker_count": 1, "read_threads": None}, pipeline=DECODE),
    Config("grain_decode_w2", "grain",
           "decode-bound: Grain, worker_count=2, default ReadOptions()",
           {"worker_count": 2, "read_threads": None}, pipeline=DECODE),
    Config("torch_decode_w0", "torch",
           "decode-bound: torch DataLoader, num_workers=0, default collate",
           {"worker_count": 0}, pipeline=DECODE),
    Config("torch_decode_w1", "torch",
           "decode-bound: torch DataLoader, num_workers=1, persistent_workers=False",
           {"worker_count": 1}, pipeline=DECODE),
    Config("torch_decode_w2", "torch",
           "decode-bound: torch DataLoader, num_workers=2, persistent_workers=False",
           {"worker_count": 2}, pipeline=DECODE),
]}

COURSE_LIB_W0_READ_CONFIGS = ("course_lib_w0", "course_lib_w0_default_read")
GRAIN_IN_PROCESS_PATTERN = "grain_w0_*"
COURSE_LIB_DECODE_W0_CONFIGS = ("course_lib_decode_w0", "course_lib_decode_w0_default_read")
FIRST_BATCH_LIMIT_S = 0.3


@dataclasses.dataclass(frozen=True)
class Ratio:
    label: str
    numerator: tuple[str, ...]  # the best (highest median) of these configs
    denominator: tuple[str, ...]
    target: float
    aim: float | None = None
    # "ratio": best median records/s of numerator over denominator, must be >= target.
    # "steady_ratio": the same, counting only the records after the first batch (start-up
    # excluded; the first-batch time is checked on its own).
    # "max_first_batch": the numerator's median first-batch time (s), must be <= target.
    kind: str = "ratio"


def _ratios() -> list[Ratio]:
    grain_in_process = tuple(name for name in CONFIGS
                             if fnmatch.fnmatch(name, GRAIN_IN_PROCESS_PATTERN))
    return [
        Ratio("course_lib_w0 / Grain's best in-process", COURSE_LIB_W0_READ_CONFIGS,
              grain_in_process, target=2.0),
        Ratio("course_lib_w0 / torch_w0", COURSE_LIB_W0_READ_CONFIGS, ("torch_w0",),
              target=1.0),
        Ratio("course_lib_w0_vectorized / numpy_limit", ("course_lib_w0_vectorized",),
              ("numpy_limit",), target=0.25, aim=0.5),
        Ratio("course_lib_w2 / grain_w2 (in-memory reference)", ("course_lib_w2",),
              ("grain_w2",), target=2.0),
        Ratio("course_lib_w2 / torch_w2 (in-memory reference)", ("course_lib_w2",),
              ("torch_w2",), target=1.0),
        Ratio("decode-bound course_lib_decode_w2 / course_lib w0 (best read), whole epoch",
              ("course_lib_decode_w2",), COURSE_LIB_DECODE_W0_CONFIGS, target=1.7),
        Ratio("decode-bound course_lib_decode_w2 / course_lib w0 (best read), steady state",
              ("course_lib_decode_w2",), COURSE_LIB_DECODE_W0_CONFIGS, target=1.7,
              kind="steady_ratio"),
        Ratio("course_lib_w2 first batch (in-memory reference)", ("course_lib_w2",), (),
              target=FIRST_BATCH_LIMIT_S, kind="max_first_batch"),
    ]


# -- one epoch, in a child process -----------------------------------------------------------
def _is_unavailable(config: Config, error: BaseException) -> bool:
    """Missing features (workers not written yet, a library not installed) are skipped."""
    if not isinstance(error, NotImplementedError | ImportError):
        return False
    return config.workers > 0 or config.family in ("grain", "torch")


def _rss_mb() -> float | None:
    if psutil is None:
        return None
    return psutil.Process().memory_info().rss / 2**20


def _cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _maxrss_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # KiB on Linux


def check_batch(batch) -> None:
    """Raise AssertionError unless `batch` is a normalised batch of the reference pipeline."""
    images, labels = (np.asarray(batch[key]) for key in ("image", "label"))
    assert images.shape == (BATCH_SIZE, *IMAGE_SHAPE), f"image batch shape {images.shape}"
    assert images.dtype == np.float32, f"image dtype {images.dtype}"
    assert labels.shape == (BATCH_SIZE,), f"label batch shape {labels.shape}"
    low, high = float(OFFSET), float(255 * MULTIPLIER + OFFSET)
    assert low - 1e-4 <= images.min() and images.max() <= high + 1e-4, "values not normalised"


def time_epoch(make_iterator, expected_batches: int, batch_shortfall_ok: int = 0,
               pipeline: str = "reference") -> dict:
    """Time one epoch from iterator creation; check the first and last batch afterwards.

    `batch_shortfall_ok`: how many batches fewer than `expected_batches` are accepted (Grain
    batches inside each worker and drops each worker's remainder).
    """
    batch_size, check = _batch_spec(pipeline)
    start = time.perf_counter()
    iterator = make_iterator()
    try:
        first = last = next(iterator)
        first_at = time.perf_counter()
        batches = 1
        for last in iterator:  # noqa: B007 - `last` is checked after the clock stops
            batches += 1
        end = time.perf_counter()
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
    check(first)
    check(last)
    assert expected_batches - batch_shortfall_ok <= batches <= expected_batches, (
        f"{batches} batches, expected {expected_batches}")
    records = batches * batch_size
    return {
        "batches": batches,
        "records": records,
        "total_s": end - start,
        "first_batch_s": first_at - start,
        "records_per_s": records / (end - start),
        "steady_records_per_s": ((records - batch_size) / (end - first_at)
                                 if batches > 1 else None),
    }


def _batch_spec(pipeline: str):
    """`(batch_size, check_batch)` of a pipeline."""
    if pipeline == DECODE:
        return bench_decode.BATCH_SIZE, bench_decode.check_batch
    return BATCH_SIZE, check_batch


def expected_batches(config: Config, num_records: int) -> int:
    return num_records // _batch_spec(config.pipeline)[0]


def load_data(config: Config, num_records: int) -> dict:
    """The reference arrays, or the decode pipeline's PNG folder (written once, then reused)."""
    if config.pipeline == DECODE:
        directory = bench_decode.ensure_image_folder(WORK, num_records)
        return {"directory": str(directory), "num_records": num_records}
    return make_data(num_records)


def build(config: Config, data: dict):
    module_name, function_name = BUILDERS[config.family, config.pipeline]
    builder = getattr(importlib.import_module(module_name), function_name)
    return builder(dict(config.options), data)


def run_child(config: Config, num_records: int) -> dict:
    result: dict = {"config": config.name, "pid": os.getpid(),
                    "course_lib_sources_sha256": _course_lib_fingerprint()}
    started = time.perf_counter()
    data = load_data(config, num_records)
    result["data_s"] = time.perf_counter() - started
    result["rss_after_data_mb"] = _rss_mb()
    try:
        started = time.perf_counter()
        make_iterator, info = build(config, data)
        result["build_s"] = time.perf_counter() - started
        result["info"] = info
        # Grain with N workers batches in each worker and drops up to N-1 partial batches.
        shortfall = config.workers - 1 if config.family == "grain" and config.workers else 0
        cpu_before = _cpu_s(resource.RUSAGE_SELF), _cpu_s(resource.RUSAGE_CHILDREN)
        result.update(time_epoch(make_iterator, expected_batches(config, num_records),
                                 shortfall, config.pipeline))
        # CPU seconds of this process and of its workers (counted once they have exited and
        # been joined, which every loader here does when its epoch ends), over the epoch.
        result["cpu_main_s"] = _cpu_s(resource.RUSAGE_SELF) - cpu_before[0]
        result["cpu_workers_s"] = _cpu_s(resource.RUSAGE_CHILDREN) - cpu_before[1]
        result["status"] = "ok"
    except Exception as error:  # reported, never raised: one config must not stop the run
        result["status"] = "unavailable" if _is_unavailable(config, error) else "failed"
        result["error"] = f"{type(error).__name__}: {error}"
        result["traceback"] = traceback.format_exc()
    result["maxrss_self_mb"] = _maxrss_mb(resource.RUSAGE_SELF)
    result["maxrss_children_mb"] = _maxrss_mb(resource.RUSAGE_CHILDREN)
    return result


# -- the parent: fresh processes, memory watching, summaries ----------------------------------
def _tree_rss_mb(process) -> float:
    total = 0
    for member in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # it may exit between listing and reading
            total += member.memory_info().rss
    return total / 2**20


def _kill_tree(proc: subprocess.Popen) -> None:
    if psutil is not None:
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
        except psutil.Error:
            pass
    proc.kill()
    proc.wait()


def spawn_run(config: Config, num_records: int, repetition: int, timeout_s: float) -> dict:
    """Run one repetition in a fresh process; watch the memory of its process tree."""
    WORK.mkdir(exist_ok=True)
    result_path = WORK / f"{config.name}.{repetition}.json"
    log_path = WORK / f"{config.name}.{repetition}.log"
    result_path.unlink(missing_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", config.name,
               "--num-records", str(num_records), "--result-file", str(result_path)]
    peak_sampled_mb = 0.0
    started = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        watched = psutil.Process(proc.pid) if psutil is not None else None
        while proc.poll() is None:
            if time.monotonic() - started > timeout_s:
                _kill_tree(proc)
                return {"config": config.name, "status": "failed",
                        "error": f"timed out after {timeout_s:.0f} s (log: {log_path})"}
            if watched is not None:
                with contextlib.suppress(psutil.Error):
                    peak_sampled_mb = max(peak_sampled_mb, _tree_rss_mb(watched))
            time.sleep(MONITOR_INTERVAL_S)
    wall_s = time.monotonic() - started
    if not result_path.exists():
        tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
        return {"config": config.name, "status": "failed", "process_wall_s": wall_s,
                "error": f"exit code {proc.returncode}, no result ({log_path}): "
                         + " | ".join(tail)}
    result = json.loads(result_path.read_text())
    result["process_wall_s"] = wall_s
    result["peak_tree_rss_sampled_mb"] = peak_sampled_mb if watched is not None else None
    # The sampler may miss a short spike; the child's own high-water mark cannot.
    result["peak_rss_mb"] = max(peak_sampled_mb, result["maxrss_self_mb"])
    return result


def _median_per_record(runs: list[dict], key: str) -> float | None:
    values = [run[key] / run["records"] * 1e6 for run in runs if run.get(key) is not None]
    return statistics.median(values) if values else None


def summarize(runs: list[dict]) -> dict:
    ok = [run for run in runs if run["status"] == "ok"]
    bad = [run for run in runs if run["status"] != "ok"]
    summary: dict = {"runs_ok": len(ok), "runs": len(runs),
                     "status": bad[0]["status"] if bad else "ok"}
    if bad:
        summary["error"] = bad[0]["error"]
    if ok:
        rates = [run["records_per_s"] for run in ok]
        steady = [run["steady_records_per_s"] for run in ok
                  if run["steady_records_per_s"] is not None]
        firsts = [run["first_batch_s"] for run in ok]
        summary.update({
            "records_per_s_median": statistics.median(rates),
            "records_per_s_min": min(rates),
            "records_per_s_max": max(rates),
            "steady_records_per_s_median": statistics.median(steady) if steady else None,
            "first_batch_s_median": statistics.median(firsts),
            "first_batch_s_max": max(firsts),
            "epoch_s_median": statistics.median(run["total_s"] for run in ok),
            "peak_rss_mb_max": max(run["peak_rss_mb"] for run in ok),
            "cpu_main_us_per_record_median": _median_per_record(ok, "cpu_main_s"),
            "cpu_workers_us_per_record_median": _median_per_record(ok, "cpu_workers_s"),
            "batches_min": min(run["batches"] for run in ok),
            "info": ok[0].get("info"),
        })
    return summary


def _best(names, summaries: dict, key: str = "records_per_s_median"
          ) -> tuple[str, float] | None:
    measured = [(summaries[name][key], name) for name in names
                if summaries.get(name, {}).get(key) is not None]
    if not measured:
        return None
    rate, name = max(measured)
    return name, rate


def compute_ratios(summaries: dict) -> list[dict]:
    results = []
    for ratio in _ratios():
        entry = {"label": ratio.label, "target": ratio.target, "aim": ratio.aim,
                 "kind": ratio.kind}
        if ratio.kind == "max_first_batch":
            name, = ratio.numerator
            value = summaries.get(name, {}).get("first_batch_s_median")
            if value is None:
                entry.update(value=None, verdict="n/a", note=f"not measured in this run: {name}")
            else:
                entry.update(value=value, numerator=name,
                             worst=summaries[name]["first_batch_s_max"],
                             verdict="PASS" if value <= ratio.target else "FAIL")
            results.append(entry)
            continue
        key = ("steady_records_per_s_median" if ratio.kind == "steady_ratio"
               else "records_per_s_median")
        numerator = _best(ratio.numerator, summaries, key)
        denominator = _best(ratio.denominator, summaries, key)
        if numerator is None or denominator is None:
            missing = ratio.numerator if numerator is None else ratio.denominator
            entry.update(value=None, verdict="n/a",
                         note=f"not measured in this run: {', '.join(missing)}")
        else:
            value = numerator[1] / denominator[1]
            entry.update(value=value, numerator=numerator[0], denominator=denominator[0],
                         verdict="PASS" if value >= ratio.target else "FAIL")
            if ratio.aim is not None:
                entry["aim_met"] = value >= ratio.aim
        results.append(entry)
    return results


# -- machine description -----------------------------------------------------------------------
def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _course_lib_fingerprint() -> str:
    """A hash of course_lib's sources: which code these numbers belong to (it is not committed)."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "course_lib").glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def _busy_processes(seconds: float = 1.0) -> list[dict]:
    """Other processes using over 20% of a core, sampled over `seconds`."""
    if psutil is None:
        return []
    processes = []
    for process in psutil.process_iter(["pid", "name"]):
        try:
            process.cpu_percent(None)
            processes.append(process)
        except psutil.Error:
            pass
    time.sleep(seconds)
    busy = []
    for process in processes:
        try:
            percent = process.cpu_percent(None)
        except psutil.Error:
            continue
        if percent > 20 and process.pid != os.getpid():
            busy.append({"pid": process.pid, "name": process.info["name"], "cpu_percent": percent})
    return sorted(busy, key=lambda entry: -entry["cpu_percent"])


def machine_info() -> dict:
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": _cpu_model(),
        "memory_gb": (round(psutil.virtual_memory().total / 2**30, 1)
                      if psutil is not None else None),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {package: _version(package)
                     for package in ("numpy", "jax", "grain", "torch", "psutil")},
        "course_lib_sources_sha256": _course_lib_fingerprint(),
        "course_lib_has_workers_module": (ROOT / "course_lib" / "workers.py").exists(),
    }


# -- output ------------------------------------------------------------------------------------
def _fmt_rate(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _fmt_us(rate) -> str:
    return "-" if rate is None else f"{1e6 / rate:.2f}"


def _fmt_ms(value) -> str:
    return "-" if value is None else f"{value * 1e3:,.1f}"


def _fmt_cpu(summary: dict) -> str:
    main = summary.get("cpu_main_us_per_record_median")
    workers = summary.get("cpu_workers_us_per_record_median")
    if main is None:
        return "-"
    return f"{main:,.1f}" if not workers else f"{main:,.1f} + {workers:,.1f}"


def _fmt_mb(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ratio_line(entry: dict) -> str:
    if entry["value"] is None:
        return f"{entry['label']}: n/a ({entry['note']})"
    if entry.get("kind") == "max_first_batch":
        return (f"{entry['label']}: {entry['value'] * 1e3:.0f} ms median (worst repetition "
                f"{entry['worst'] * 1e3:.0f} ms), target <= {entry['target'] * 1e3:.0f} ms: "
                f"{entry['verdict']}")
    line = (f"{entry['label']}: {entry['value']:.2f}x ({entry['numerator']} / "
            f"{entry['denominator']}), target >= {entry['target']:g}x: {entry['verdict']}")
    if entry.get("aim") is not None:
        line += f"; aim >= {entry['aim']:g}x: {'met' if entry['aim_met'] else 'not met'}"
    return line


def _table_rows(report: dict, pipeline: str) -> list[str]:
    rows = [
        "| config | records/s median | min | max | µs/record | first batch ms | peak RSS MB "
        "| CPU µs/record main + workers | runs | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, summary in report["summaries"].items():
        if CONFIGS[name].pipeline != pipeline:
            continue
        note = CONFIGS[name].description
        if summary["status"] == "unavailable":
            note = f"not available: {summary['error']}"
        elif summary["status"] == "failed":
            note = f"FAILED: {summary['error']}"
        note = note.replace("|", "\\|").replace("\n", " ")
        rows.append(
            f"| {name} | {_fmt_rate(summary.get('records_per_s_median'))} "
            f"| {_fmt_rate(summary.get('records_per_s_min'))} "
            f"| {_fmt_rate(summary.get('records_per_s_max'))} "
            f"| {_fmt_us(summary.get('records_per_s_median'))} "
            f"| {_fmt_ms(summary.get('first_batch_s_median'))} "
            f"| {_fmt_mb(summary.get('peak_rss_mb_max'))} "
            f"| {_fmt_cpu(summary)} "
            f"| {summary['runs_ok']}/{summary['runs']} | {note} |")
    return rows


def render_markdown(report: dict) -> str:
    machine, run = report["machine"], report["run"]
    versions = machine["versions"]
    load = ", ".join(f"{value:.2f}" for value in run["load_average_start"])
    load_end = ", ".join(f"{value:.2f}" for value in run["load_average_end"])
    data_mb = run["num_records"] * (np.prod(IMAGE_SHAPE) + 8) / 2**20
    busy = ", ".join(f"{entry['name']} ({entry['cpu_percent']:.0f}%)"
                     for entry in run["busy_processes_start"]) or "none above 20% of a core"
    pipelines = {CONFIGS[name].pipeline for name in report["summaries"]}
    decode = report.get("decode_data")
    cores = machine["cpu_count"]
    lines = [
        "# Loader benchmark results",
        "",
        "Generated by `benchmarks/run_benchmarks.py`; every number below was measured in the "
        "run described here. Do not edit by hand: re-run the script.",
        "",
        f"- Date: {run['started']} (the run took {run['wall_s']:.0f} s)",
        f"- Mode: {run['mode']}; in-memory reference pipeline {run['num_records']:,} records, "
        f"batch {BATCH_SIZE}; decode-bound pipeline {run.get('decode_num_records', 0):,} PNG "
        f"files, batch {decode['batch_size'] if decode else '-'}; {run['repeats']} "
        "fresh-process repetitions per config (interleaved)",
        f"- Machine: {cores} cores ({machine['cpu_model']}), "
        f"{machine['memory_gb']} GB RAM, {machine['platform']}",
        f"- Python {machine['python']}, numpy {versions['numpy']}, jax {versions['jax']}, "
        f"grain {versions['grain']}, torch {versions['torch']}",
        f"- course_lib sources sha256 {machine['course_lib_sources_sha256']} "
        f"(workers module present: {machine['course_lib_has_workers_module']})",
        f"- Load average at start: {load}; at end: {load_end}; busy processes at start: {busy}",
        "",
        "Records/s counts delivered records (whole batches) over the time from iterator "
        "creation to the last batch (worker start-up included); first batch is the time from "
        "iterator creation to the first batch (median); µs/record is 1e6 / median records/s; "
        "peak memory is the largest RSS of the process tree (the process and its workers) "
        "seen in any repetition, imports included; CPU µs/record is the CPU time (user + "
        "system) of the main process and of its exited worker processes over the epoch, per "
        "delivered record (median): above the wall-clock µs/record when processes run in "
        "parallel, and a worker's start-up (interpreter, imports) counts in it.",
    ]
    if "reference" in pipelines:
        lines += [
            "",
            "## In-memory reference pipeline",
            "",
            f"{run['num_records']:,} random 28×28 uint8 images in memory ({data_mb:.0f} MiB, "
            "included in peak memory), per-record normalize and random flip, "
            f"Batch({BATCH_SIZE}, drop_remainder=True), one shuffled epoch.",
            "",
            *_table_rows(report, "reference"),
        ]
    if DECODE in pipelines and decode is not None:
        side = decode["image_shape"]
        lines += [
            "",
            "## Decode-bound pipeline",
            "",
            f"{decode['num_records']:,} PNG files ({side[0]}×{side[1]} RGB, smooth colour "
            f"waves plus noise; {decode['encoded_mb']:.1f} MiB encoded, "
            f"{decode['encoded_mb'] / decode['raw_mb']:.0%} of the raw size) in "
            f"`{decode['directory']}`, written once with `write_image_folder` and read from "
            "the page cache; per record: read the bytes, Pillow decode, zero-pad by "
            f"{decode['padding']} and random-crop back to {side[0]}×{side[1]}, random "
            "horizontal flip, per-channel normalize to float32; "
            f"Batch({decode['batch_size']}, drop_remainder=True), one shuffled epoch. "
            "Grain and torch run the same Pillow/NumPy code (benchmarks/bench_decode.py).",
            "",
            *_table_rows(report, DECODE),
        ]
        if report.get("decode_per_record_cost"):
            lines += ["", _cost_line(report["decode_per_record_cost"], decode)]
    lines += ["", "## Ratios and limits (medians, this run)", ""]
    lines += [f"- {_ratio_line(entry)}" for entry in report["ratios"]]
    if report.get("plot"):
        plot = report["plot"]
        lines += [
            "",
            "## Worker scaling",
            "",
            f"![Records/s against worker count]({PLOT_NAME})",
            "",
            f"Measured on {cores} cores (os.cpu_count(); {machine.get('cpus_usable')} usable "
            f"by this process) with a load average of {load} at the start and {load_end} at "
            "the end of the run. Each point is the median records/s over the repetitions, "
            "the bars span min to max; worker count 0 means in the main process (for "
            "course_lib and Grain its best read option). From "
            f"{cores} workers on, the workers and the main process share the {cores} cores. "
            f"Points: {plot['points']}.",
        ]
    if report["notes"]:
        lines += ["", "## Notes", ""]
        lines += [f"- {note}" for note in report["notes"]]
    return "\n".join(lines) + "\n"


def print_table(summaries: dict) -> None:
    header = (f"{'config':34} {'rec/s med':>11} {'min':>11} {'max':>11} {'1st ms':>8} "
              f"{'peak MB':>8} {'CPU us/rec main + workers':>26}  runs")
    print(header)
    print("-" * len(header))
    for name, summary in summaries.items():
        if summary["status"] != "ok" and not summary["runs_ok"]:
            word = "not available" if summary["status"] == "unavailable" else "FAILED"
            print(f"{name:34} {word}: {summary['error']}")
            continue
        print(f"{name:34} {_fmt_rate(summary['records_per_s_median']):>11} "
              f"{_fmt_rate(summary['records_per_s_min']):>11} "
              f"{_fmt_rate(summary['records_per_s_max']):>11} "
              f"{_fmt_ms(summary['first_batch_s_median']):>8} "
              f"{_fmt_mb(summary['peak_rss_mb_max']):>8} {_fmt_cpu(summary):>26}  "
              f"{summary['runs_ok']}/{summary['runs']}")


def _run_line(config: Config, repetition: int, repeats: int, result: dict) -> str:
    prefix = f"[{repetition + 1}/{repeats}] {config.name:34}"
    if result["status"] == "unavailable":
        return f"{prefix} not available: {result['error']}"
    if result["status"] != "ok":
        return f"{prefix} FAILED: {result['error']}"
    return (f"{prefix} {result['records_per_s']:>10,.0f} rec/s  first batch "
            f"{result['first_batch_s'] * 1e3:7.1f} ms  peak {result['peak_rss_mb']:6.0f} MB  "
            f"(process {result['process_wall_s']:.1f} s)")


# -- entry points ------------------------------------------------------------------------------
def select(only: str | None) -> list[Config]:
    if not only:
        return list(CONFIGS.values())
    patterns = [pattern.strip() for pattern in only.split(",") if pattern.strip()]
    unknown = [p for p in patterns if not any(fnmatch.fnmatch(n, p) for n in CONFIGS)]
    if unknown:
        raise SystemExit(f"--only: no config matches {unknown}; see --list.")
    return [config for name, config in CONFIGS.items()
            if any(fnmatch.fnmatch(name, pattern) for pattern in patterns)]


def _run_notes(runs: dict, summaries: dict, records: dict[str, int]) -> list[str]:
    """Facts about this run a reader needs: changed sources, short epochs."""
    notes = []
    hashes: dict[str, list[str]] = {}
    for name, config_runs in runs.items():
        for index, run in enumerate(config_runs):
            sha = run.get("course_lib_sources_sha256")
            if sha:
                hashes.setdefault(sha, []).append(f"{name}#{index + 1}")
    if len(hashes) > 1:
        where = "; ".join(f"{sha}: {len(names)} runs, first {names[0]}"
                          for sha, names in hashes.items())
        notes.append(f"course_lib's sources CHANGED during this run ({where}); the "
                     "course_lib numbers mix code versions. Re-run on a quiet tree.")
    for name, summary in summaries.items():
        expected = expected_batches(CONFIGS[name], records[CONFIGS[name].pipeline])
        if summary.get("batches_min", expected) < expected:
            notes.append(f"{name} delivered {summary['batches_min']} batches instead of "
                         f"{expected}: Grain batches inside each worker and drops each "
                         "worker's partial batch.")
    return notes


def _decode_records(args) -> int:
    return args.decode_records or (bench_decode.QUICK_RECORDS if args.quick
                                   else bench_decode.NUM_RECORDS)


def _prepare_decode_folder(num_records: int) -> dict:
    """Write (or find) the PNG cache once, before any timed process reads it."""
    started = time.perf_counter()
    existed = (bench_decode.cache_dir(WORK, num_records) / "manifest.json").is_file()
    if not existed:
        # In a separate process: Linux children inherit the RSS high-water mark of the process
        # that forks them (getrusage's ru_maxrss survives fork and exec), so generating the
        # images here would inflate every later child's peak memory.
        print(f"Writing {num_records:,} PNG files for the decode-bound pipeline...", flush=True)
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--write-decode-folder",
                        str(num_records)], check=True, cwd=ROOT)
    directory = bench_decode.ensure_image_folder(WORK, num_records)
    raw = num_records * int(np.prod(bench_decode.IMAGE_SHAPE))
    encoded = bench_decode.folder_bytes(directory)
    info = {
        "directory": str(directory.relative_to(ROOT)),
        "num_records": num_records,
        "image_shape": list(bench_decode.IMAGE_SHAPE),
        "encoded_mb": encoded / 2**20,
        "raw_mb": raw / 2**20,
        "reused": existed,
        "prepare_s": time.perf_counter() - started,
        "batch_size": bench_decode.BATCH_SIZE,
        "padding": bench_decode.PADDING,
        "per_record_target_ms": [t * 1e3 for t in bench_decode.PER_RECORD_TARGET_S],
    }
    print(f"Decode-bound data: {num_records:,} PNG files "
          f"{'reused' if existed else 'written'} in {info['directory']} "
          f"({info['encoded_mb']:.1f} MiB encoded, {info['encoded_mb'] / info['raw_mb']:.0%} of "
          f"the raw {info['raw_mb']:.1f} MiB; {info['prepare_s']:.1f} s)", flush=True)
    return info


def per_record_costs(summaries: dict, decode_info: dict | None) -> list[dict]:
    """The decode-bound pipeline's cost per record of every worker_count=0 configuration."""
    if decode_info is None:
        return []
    costs = []
    for name, summary in summaries.items():
        config = CONFIGS[name]
        rate = summary.get("records_per_s_median")
        if config.pipeline != DECODE or config.workers or rate is None:
            continue
        costs.append({"config": name, "per_record_ms": 1e3 / rate})
    return costs


def _cost_line(costs: list[dict], decode_info: dict) -> str:
    """The costs, and whether the pipeline's own cost (the fastest loader's) is on target."""
    low, high = decode_info["per_record_target_ms"]
    parts = ", ".join(f"{entry['config']} {entry['per_record_ms']:.2f} ms" for entry in costs)
    fastest = min(costs, key=lambda entry: entry["per_record_ms"])
    target = f"the {low:g}-{high:g} ms target"
    verdict = (f"inside {target}" if low <= fastest["per_record_ms"] <= high
               else f"OUTSIDE {target} (tune bench_decode.IMAGE_SIDE)")
    return (f"Decode-bound per-record cost at worker_count=0 (1 / median records/s, the whole "
            f"pipeline on one core): {parts}. The pipeline's cost (the fastest of them, "
            f"{fastest['config']}) is {fastest['per_record_ms']:.2f} ms per record: {verdict}; "
            "the others add their loader's own overhead.")


def run_all(args) -> None:
    configs = select(args.only)
    quick = args.quick
    num_records = args.num_records or (QUICK_RECORDS if quick else NUM_RECORDS)
    decode_records = _decode_records(args)
    records = {"reference": num_records, DECODE: decode_records}
    repeats = args.repeats or (QUICK_REPEATS if quick else 5)
    full = (not quick and not args.only and args.num_records is None
            and args.decode_records is None)
    out_dir = Path(args.out_dir) if args.out_dir else (HERE if full else WORK)
    cores = os.cpu_count() or 1

    notes = []
    for config in configs:
        if config.workers > cores:
            notes.append(f"{config.name}: {config.workers} workers requested on a machine with "
                         f"{cores} cores (os.cpu_count()), more workers than cores.")
        elif config.workers and config.workers + 1 > cores:
            notes.append(f"{config.name}: {config.workers} workers plus the main process on "
                         f"{cores} cores: they compete for the cores.")
    if psutil is None:
        notes.append("psutil is not installed: peak memory is the child's own "
                     "resource.getrusage high-water mark, without worker processes.")

    print("Sampling machine load (1 s)...", flush=True)
    load_start = os.getloadavg()
    busy = _busy_processes()
    machine = machine_info()
    print(f"{cores} cores, python {machine['python']}, versions {machine['versions']}")
    print(f"load average at start: {load_start}; busy processes: "
          f"{[(entry['name'], entry['cpu_percent']) for entry in busy] or 'none'}")
    for note in notes:
        print(f"NOTE: {note}")
    decode_info = (_prepare_decode_folder(decode_records)
                   if any(config.pipeline == DECODE for config in configs) else None)
    print(f"{len(configs)} configs x {repeats} repetitions, {num_records:,} records each "
          f"(reference), {decode_records:,} (decode-bound)\n", flush=True)

    started_at = datetime.datetime.now().astimezone()
    started = time.monotonic()
    runs: dict[str, list[dict]] = {config.name: [] for config in configs}
    active = list(configs)
    for repetition in range(repeats):
        for config in list(active):
            result = spawn_run(config, records[config.pipeline], repetition, args.timeout)
            runs[config.name].append(result)
            print(_run_line(config, repetition, repeats, result), flush=True)
            if result["status"] != "ok":  # neither a crash nor a missing feature will change
                active.remove(config)
    wall_s = time.monotonic() - started

    summaries = {name: summarize(config_runs) for name, config_runs in runs.items()}
    ratios = compute_ratios(summaries)
    notes += _run_notes(runs, summaries, records)
    best_read = _best(COURSE_LIB_W0_READ_CONFIGS, summaries)
    if best_read is not None:
        notes.append(f"course_lib_w0 in the ratios is its best read configuration: "
                     f"{best_read[0]} ({CONFIGS[best_read[0]].description}).")
    best_decode_read = _best(COURSE_LIB_DECODE_W0_CONFIGS, summaries)
    if best_decode_read is not None:
        notes.append(f"course_lib decode w0 in the ratios and the plot is its best read "
                     f"configuration: {best_decode_read[0]}.")
    costs = per_record_costs(summaries, decode_info)
    report = {
        "run": {
            "started": started_at.isoformat(timespec="seconds"),
            "wall_s": wall_s,
            "mode": "quick" if quick else ("full" if full else "partial"),
            "num_records": num_records,
            "decode_num_records": decode_records,
            "repeats": repeats,
            "selected": [config.name for config in configs],
            "load_average_start": load_start,
            "load_average_end": os.getloadavg(),
            "busy_processes_start": busy,
            "argv": sys.argv[1:],
        },
        "machine": machine,
        "configs": {config.name: {"family": config.family, "pipeline": config.pipeline,
                                  "description": config.description,
                                  "options": config.options} for config in configs},
        "decode_data": decode_info,
        "decode_per_record_cost": costs,
        "summaries": summaries,
        "ratios": ratios,
        "notes": notes,
        "runs": runs,
    }

    print()
    print_table(summaries)
    print()
    if costs:
        print(_cost_line(costs, decode_info))
    for entry in ratios:
        print(_ratio_line(entry))
    for note in notes:
        print(f"NOTE: {note}")
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_path = out_dir / PLOT_NAME
    try:
        from bench_plot import plot_worker_scaling

        report["plot"] = plot_worker_scaling(report, CONFIGS, plot_path)
    except Exception as error:  # a missing matplotlib must not lose the measurements
        report["plot"] = None
        report["notes"].append(f"worker-scaling plot not written: {type(error).__name__}: "
                               f"{error}")
        print(f"NOTE: {report['notes'][-1]}")
    (out_dir / "results.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out_dir / "RESULTS.md").write_text(render_markdown(report))
    print(f"\nTook {wall_s:.0f} s; load average at end {os.getloadavg()}. "
          f"Wrote {out_dir / 'RESULTS.md'}, {out_dir / 'results.json'}"
          + (f" and {plot_path}." if report["plot"] else "."))


def profile(args) -> None:
    """One epoch of one config in this process, under cProfile; print the top entries.

    Only this (main) process is profiled: with workers it shows what the main process does
    while they work (waiting, receiving, rebuilding results around shared memory), not
    the workers' own work.
    """
    config = CONFIGS[args.profile]
    if config.pipeline == DECODE:
        num_records = _decode_records(args)
    else:
        num_records = args.num_records or (QUICK_RECORDS if args.quick else NUM_RECORDS)
    data = load_data(config, num_records)
    make_iterator, info = build(config, data)
    print(f"{config.name}: {info}")
    profiler = cProfile.Profile()
    shortfall = config.workers - 1 if config.family == "grain" and config.workers else 0
    result = profiler.runcall(time_epoch, make_iterator, expected_batches(config, num_records),
                              shortfall, config.pipeline)
    print(f"under cProfile: {result['records_per_s']:,.0f} records/s "
          f"({result['total_s'] / result['records'] * 1e6:.2f} us per record, profiled)")
    WORK.mkdir(exist_ok=True)
    stats_path = WORK / f"profile_{config.name}.pstats"
    profiler.dump_stats(stats_path)
    stats = pstats.Stats(profiler, stream=sys.stdout).strip_dirs()
    for order in ("tottime", "cumulative"):
        print(f"\n=== top {args.top} by {order} ===")
        stats.sort_stats(order).print_stats(args.top)
    print(f"Saved {stats_path} (open with python -m pstats).")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated config names or glob patterns")
    parser.add_argument("--repeats", type=int, help="fresh-process repetitions (default 5)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK_RECORDS} records, {QUICK_REPEATS} repetitions")
    parser.add_argument("--num-records", type=int,
                        help=f"records of the in-memory reference pipeline, default {NUM_RECORDS}")
    parser.add_argument("--decode-records", type=int,
                        help=f"PNG files of the decode-bound pipeline, default "
                             f"{bench_decode.NUM_RECORDS} ({bench_decode.QUICK_RECORDS} with "
                             "--quick)")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds per repetition before it is killed and reported failed")
    parser.add_argument("--out-dir", help="where to write RESULTS.md and results.json")
    parser.add_argument("--list", action="store_true", help="list the configs and exit")
    parser.add_argument("--profile", metavar="CONFIG", choices=sorted(CONFIGS),
                        help="profile one epoch of CONFIG in this process")
    parser.add_argument("--top", type=int, default=25, help="entries shown by --profile")
    parser.add_argument("--child", metavar="CONFIG", choices=sorted(CONFIGS),
                        help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    parser.add_argument("--write-decode-folder", type=int, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write_decode_folder:
        print(bench_decode.ensure_image_folder(WORK, args.write_decode_folder))
        return
    if args.child:
        result = run_child(CONFIGS[args.child], args.num_records or NUM_RECORDS)
        Path(args.result_file).write_text(json.dumps(result, default=str))
        if result["status"] == "failed":
            print(result["traceback"], file=sys.stderr)
        return
    if args.list:
        for config in CONFIGS.values():
            print(f"{config.name:34} {config.description}")
        return
    if args.profile:
        profile(args)
        return
    run_all(args)


if __name__ == "__main__":
    main()
