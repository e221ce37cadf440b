"""Benchmark the lessons' reference pipeline on course_lib, Grain, torch and plain NumPy.

The pipeline (see bench_common.py): 60000 random 28x28 uint8 images with int labels in
memory, per-record normalize and random horizontal flip (p=0.5), Batch(64,
drop_remainder=True), one shuffled epoch.

Every repetition of every configuration runs in a fresh process (this script, re-run with
`--child NAME`), so imports, caches and worker start-up are paid as a learner pays them.
Repetitions are interleaved (round 1 of every config, then round 2, ...) so that a change in
machine load hits all configurations alike.

    .venv/bin/python benchmarks/run_benchmarks.py                 # all configs, 5 rounds
    .venv/bin/python benchmarks/run_benchmarks.py --quick         # smoke run, small data
    .venv/bin/python benchmarks/run_benchmarks.py --only 'course_lib_w0*,grain_w0_*'
    .venv/bin/python benchmarks/run_benchmarks.py --list
    .venv/bin/python benchmarks/run_benchmarks.py --profile course_lib_w0

A full run (no --quick, no --only) writes benchmarks/RESULTS.md and benchmarks/results.json;
other runs write them under benchmarks/_work/ unless --out-dir says otherwise.
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


# -- the configurations ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    family: str  # numpy | course_lib | grain | torch
    description: str
    options: dict = dataclasses.field(default_factory=dict)

    @property
    def workers(self) -> int:
        return self.options.get("worker_count", 0)


BUILDERS = {
    "numpy": ("bench_common", "build_numpy"),
    "course_lib": ("bench_course_lib", "build_course_lib"),
    "grain": ("bench_grain", "build_grain"),
    "torch": ("bench_torch", "build_torch"),
}

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
           {"worker_count": 0, "read_threads": 0, "vectorized": True}),
    Config("course_lib_w0_plain_ops", "course_lib",
           "diagnostic: the plain transforms Grain/torch use, worker_count=0, "
           "ReadOptions(num_threads=0)",
           {"worker_count": 0, "read_threads": 0, "transforms": "plain"}),
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
]}

COURSE_LIB_W0_READ_CONFIGS = ("course_lib_w0", "course_lib_w0_default_read")
GRAIN_IN_PROCESS_PATTERN = "grain_w0_*"


@dataclasses.dataclass(frozen=True)
class Ratio:
    label: str
    numerator: tuple[str, ...]  # the best (highest median) of these configs
    denominator: tuple[str, ...]
    target: float
    aim: float | None = None


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


def time_epoch(make_iterator, expected_batches: int, batch_shortfall_ok: int = 0) -> dict:
    """Time one epoch from iterator creation; check the first and last batch afterwards.

    `batch_shortfall_ok`: how many batches fewer than `expected_batches` are accepted (Grain
    batches inside each worker and drops each worker's remainder).
    """
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
    check_batch(first)
    check_batch(last)
    assert expected_batches - batch_shortfall_ok <= batches <= expected_batches, (
        f"{batches} batches, expected {expected_batches}")
    records = batches * BATCH_SIZE
    return {
        "batches": batches,
        "records": records,
        "total_s": end - start,
        "first_batch_s": first_at - start,
        "records_per_s": records / (end - start),
        "steady_records_per_s": ((records - BATCH_SIZE) / (end - first_at)
                                 if batches > 1 else None),
    }


def build(config: Config, data: dict):
    module_name, function_name = BUILDERS[config.family]
    builder = getattr(importlib.import_module(module_name), function_name)
    return builder(dict(config.options), data)


def run_child(config: Config, num_records: int) -> dict:
    result: dict = {"config": config.name, "pid": os.getpid(),
                    "course_lib_sources_sha256": _course_lib_fingerprint()}
    started = time.perf_counter()
    data = make_data(num_records)
    result["data_s"] = time.perf_counter() - started
    result["rss_after_data_mb"] = _rss_mb()
    try:
        started = time.perf_counter()
        make_iterator, info = build(config, data)
        result["build_s"] = time.perf_counter() - started
        result["info"] = info
        # Grain with N workers batches in each worker and drops up to N-1 partial batches.
        shortfall = config.workers - 1 if config.family == "grain" and config.workers else 0
        result.update(time_epoch(make_iterator, num_records // BATCH_SIZE, shortfall))
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
            "batches_min": min(run["batches"] for run in ok),
            "info": ok[0].get("info"),
        })
    return summary


def _best(names, summaries: dict) -> tuple[str, float] | None:
    measured = [(summaries[name]["records_per_s_median"], name) for name in names
                if summaries.get(name, {}).get("records_per_s_median") is not None]
    if not measured:
        return None
    rate, name = max(measured)
    return name, rate


def compute_ratios(summaries: dict) -> list[dict]:
    results = []
    for ratio in _ratios():
        numerator, denominator = _best(ratio.numerator, summaries), _best(ratio.denominator,
                                                                            summaries)
        entry = {"label": ratio.label, "target": ratio.target, "aim": ratio.aim}
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


def _fmt_mb(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ratio_line(entry: dict) -> str:
    if entry["value"] is None:
        return f"{entry['label']}: n/a ({entry['note']})"
    line = (f"{entry['label']}: {entry['value']:.2f}x ({entry['numerator']} / "
            f"{entry['denominator']}), target >= {entry['target']:g}x: {entry['verdict']}")
    if entry.get("aim") is not None:
        line += f"; aim >= {entry['aim']:g}x: {'met' if entry['aim_met'] else 'not met'}"
    return line


def render_markdown(report: dict) -> str:
    machine, run = report["machine"], report["run"]
    versions = machine["versions"]
    load = ", ".join(f"{value:.2f}" for value in run["load_average_start"])
    load_end = ", ".join(f"{value:.2f}" for value in run["load_average_end"])
    data_mb = run["num_records"] * (np.prod(IMAGE_SHAPE) + 8) / 2**20
    busy = ", ".join(f"{entry['name']} ({entry['cpu_percent']:.0f}%)"
                     for entry in run["busy_processes_start"]) or "none above 20% of a core"
    lines = [
        "# Loader benchmark results",
        "",
        "Generated by `benchmarks/run_benchmarks.py`; every number below was measured in the "
        "run described here. Do not edit by hand: re-run the script.",
        "",
        f"- Date: {run['started']} (the run took {run['wall_s']:.0f} s)",
        f"- Mode: {run['mode']}; {run['num_records']:,} records, batch {BATCH_SIZE}, "
        f"{run['repeats']} fresh-process repetitions per config (interleaved)",
        f"- Machine: {machine['cpu_count']} cores ({machine['cpu_model']}), "
        f"{machine['memory_gb']} GB RAM, {machine['platform']}",
        f"- Python {machine['python']}, numpy {versions['numpy']}, jax {versions['jax']}, "
        f"grain {versions['grain']}, torch {versions['torch']}",
        f"- course_lib sources sha256 {machine['course_lib_sources_sha256']} "
        f"(workers module present: {machine['course_lib_has_workers_module']})",
        f"- Load average at start: {load}; at end: {load_end}; busy processes at start: {busy}",
        "",
        "Records/s counts delivered records (whole batches) over the time from iterator "
        "creation to the last batch; first batch is the time from iterator creation to the "
        "first batch (median); µs/record is 1e6 / median records/s; peak memory is the "
        "largest RSS of the process tree seen in any repetition (it includes the "
        f"{data_mb:.0f} MiB data set and the imports).",
        "",
        "| config | records/s median | min | max | µs/record | first batch ms | peak RSS MB "
        "| runs | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, summary in report["summaries"].items():
        note = CONFIGS[name].description
        if summary["status"] == "unavailable":
            note = f"not available: {summary['error']}"
        elif summary["status"] == "failed":
            note = f"FAILED: {summary['error']}"
        note = note.replace("|", "\\|").replace("\n", " ")
        lines.append(
            f"| {name} | {_fmt_rate(summary.get('records_per_s_median'))} "
            f"| {_fmt_rate(summary.get('records_per_s_min'))} "
            f"| {_fmt_rate(summary.get('records_per_s_max'))} "
            f"| {_fmt_us(summary.get('records_per_s_median'))} "
            f"| {_fmt_ms(summary.get('first_batch_s_median'))} "
            f"| {_fmt_mb(summary.get('peak_rss_mb_max'))} "
            f"| {summary['runs_ok']}/{summary['runs']} | {note} |")
    lines += ["", "## Ratios (medians)", ""]
    lines += [f"- {_ratio_line(entry)}" for entry in report["ratios"]]
    if report["notes"]:
        lines += ["", "## Notes", ""]
        lines += [f"- {note}" for note in report["notes"]]
    return "\n".join(lines) + "\n"


def print_table(summaries: dict) -> None:
    header = (f"{'config':30} {'rec/s med':>11} {'min':>11} {'max':>11} {'1st ms':>8} "
              f"{'peak MB':>8}  runs")
    print(header)
    print("-" * len(header))
    for name, summary in summaries.items():
        if summary["status"] != "ok" and not summary["runs_ok"]:
            word = "not available" if summary["status"] == "unavailable" else "FAILED"
            print(f"{name:30} {word}: {summary['error']}")
            continue
        print(f"{name:30} {_fmt_rate(summary['records_per_s_median']):>11} "
              f"{_fmt_rate(summary['records_per_s_min']):>11} "
              f"{_fmt_rate(summary['records_per_s_max']):>11} "
              f"{_fmt_ms(summary['first_batch_s_median']):>8} "
              f"{_fmt_mb(summary['peak_rss_mb_max']):>8}  "
              f"{summary['runs_ok']}/{summary['runs']}")


def _run_line(config: Config, repetition: int, repeats: int, result: dict) -> str:
    prefix = f"[{repetition + 1}/{repeats}] {config.name:30}"
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


def _run_notes(runs: dict, summaries: dict, num_records: int) -> list[str]:
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
    expected = num_records // BATCH_SIZE
    for name, summary in summaries.items():
        if summary.get("batches_min", expected) < expected:
            notes.append(f"{name} delivered {summary['batches_min']} batches instead of "
                         f"{expected}: Grain batches inside each worker and drops each "
                         "worker's partial batch.")
    return notes


def run_all(args) -> None:
    configs = select(args.only)
    quick = args.quick
    num_records = args.num_records or (QUICK_RECORDS if quick else NUM_RECORDS)
    repeats = args.repeats or (QUICK_REPEATS if quick else 5)
    full = not quick and not args.only and args.num_records is None
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
    print(f"{len(configs)} configs x {repeats} repetitions, {num_records:,} records each\n",
          flush=True)

    started_at = datetime.datetime.now().astimezone()
    started = time.monotonic()
    runs: dict[str, list[dict]] = {config.name: [] for config in configs}
    active = list(configs)
    for repetition in range(repeats):
        for config in list(active):
            result = spawn_run(config, num_records, repetition, args.timeout)
            runs[config.name].append(result)
            print(_run_line(config, repetition, repeats, result), flush=True)
            if result["status"] != "ok":  # neither a crash nor a missing feature will change
                active.remove(config)
    wall_s = time.monotonic() - started

    summaries = {name: summarize(config_runs) for name, config_runs in runs.items()}
    ratios = compute_ratios(summaries)
    notes += _run_notes(runs, summaries, num_records)
    best_read = _best(COURSE_LIB_W0_READ_CONFIGS, summaries)
    if best_read is not None:
        notes.append(f"course_lib_w0 in the ratios is its best read configuration: "
                     f"{best_read[0]} ({CONFIGS[best_read[0]].description}).")
    report = {
        "run": {
            "started": started_at.isoformat(timespec="seconds"),
            "wall_s": wall_s,
            "mode": "quick" if quick else ("full" if full else "partial"),
            "num_records": num_records,
            "repeats": repeats,
            "selected": [config.name for config in configs],
            "load_average_start": load_start,
            "load_average_end": os.getloadavg(),
            "busy_processes_start": busy,
            "argv": sys.argv[1:],
        },
        "machine": machine,
        "configs": {config.name: {"family": config.family, "description": config.description,
                                  "options": config.options} for config in configs},
        "summaries": summaries,
        "ratios": ratios,
        "notes": notes,
        "runs": runs,
    }

    print()
    print_table(summaries)
    print()
    for entry in ratios:
        print(_ratio_line(entry))
    for note in notes:
        print(f"NOTE: {note}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out_dir / "RESULTS.md").write_text(render_markdown(report))
    print(f"\nTook {wall_s:.0f} s; load average at end {os.getloadavg()}. "
          f"Wrote {out_dir / 'RESULTS.md'} and {out_dir / 'results.json'}.")


def profile(args) -> None:
    """One epoch of one config in this process, under cProfile; print the top entries."""
    config = CONFIGS[args.profile]
    num_records = args.num_records or (QUICK_RECORDS if args.quick else NUM_RECORDS)
    data = make_data(num_records)
    make_iterator, info = build(config, data)
    print(f"{config.name}: {info}")
    profiler = cProfile.Profile()
    result = profiler.runcall(time_epoch, make_iterator, num_records // BATCH_SIZE)
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
    parser.add_argument("--num-records", type=int, help=f"default {NUM_RECORDS}")
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
    args = parser.parse_args(argv)
    if args.child:
        result = run_child(CONFIGS[args.child], args.num_records or NUM_RECORDS)
        Path(args.result_file).write_text(json.dumps(result, default=str))
        if result["status"] == "failed":
            print(result["traceback"], file=sys.stderr)
        return
    if args.list:
        for config in CONFIGS.values():
            print(f"{config.name:30} {config.description}")
        return
    if args.profile:
        profile(args)
        return
    run_all(args)


if __name__ == "__main__":
    main()
