"""How the benchmark measures: fresh processes, repetitions, the clock and memory sampling.

Every repetition of every configuration runs in a fresh process (run_benchmarks.py re-run
with `--child NAME`), so imports, caches and worker start-up are paid as a learner pays
them. Repetitions are interleaved (round 1 of every configuration, then round 2, ...) so
that a change in machine load hits all configurations alike. The parent samples the
resident memory of the child's process tree every 0.1 s with psutil, the child's workers
on their own as well (multiprocessing's resource tracker is not a worker; the fork server
that course_lib forks its workers from counts with them), and never
reports less than the child's own `getrusage` high-water mark.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import bench_decode
from bench_common import make_data
from bench_configs import DECODE, PIPELINES, Config

try:
    import psutil
except ImportError:  # peak memory then comes from resource.getrusage in the child
    psutil = None

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / "_work"  # git-ignored: logs, per-run result files, profiles
RUNNER = HERE / "run_benchmarks.py"
MONITOR_INTERVAL_S = 0.1


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


def records_for(config: Config, records: dict[str, int]) -> int:
    """The records a configuration runs with: its own fixed number, or its pipeline's."""
    return config.fixed_records or records[config.pipeline]


def expected_batches(config: Config, num_records: int) -> int:
    return num_records // PIPELINES[config.pipeline].batch_size


def time_epoch(make_iterator, expected: int, batch_shortfall_ok: int = 0,
               pipeline: str = "reference") -> dict:
    """Time one epoch from iterator creation; check the first and last batch afterwards.

    `batch_shortfall_ok`: how many batches fewer than `expected` are accepted (Grain's
    legacy DataLoader batches inside each worker and drops each worker's remainder).
    """
    spec = PIPELINES[pipeline]
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
    spec.check(first)
    spec.check(last)
    assert expected - batch_shortfall_ok <= batches <= expected, (
        f"{batches} batches, expected {expected}")
    records = batches * spec.batch_size
    return {
        "batches": batches,
        "records": records,
        "total_s": end - start,
        "first_batch_s": first_at - start,
        "records_per_s": records / (end - start),
        "steady_records_per_s": ((records - spec.batch_size) / (end - first_at)
                                 if batches > 1 else None),
    }


def load_data(config: Config, num_records: int) -> dict:
    """The pipeline's arrays, or the decode pipeline's PNG folder (written once, reused)."""
    if config.pipeline == DECODE:
        directory = bench_decode.ensure_image_folder(WORK, num_records)
        return {"directory": str(directory), "num_records": num_records}
    if config.pipeline == "compute":
        import bench_compute

        return {"image": bench_compute.make_images(num_records)}
    return make_data(num_records)


def build(config: Config, data: dict):
    module_name, function_name = config.builder_path()
    builder = getattr(importlib.import_module(module_name), function_name)
    return builder(dict(config.options), data)


def prepare_imports(config: Config) -> None:
    """What a configuration's process imports before anything else (see bench_configs.py)."""
    if config.options.get("block_prometheus"):
        sys.modules["prometheus_client"] = None  # `import prometheus_client` now fails
    if config.imports_jax:
        import jax  # noqa: F401


def _stop_fork_server() -> None:
    """course_lib's workers are forked from multiprocessing's fork server, a child of this
    process: their CPU time reaches RUSAGE_CHILDREN once the server (which waited for them)
    has exited and been waited for. Its own start-up is counted with them."""
    forkserver = sys.modules.get("multiprocessing.forkserver")
    if forkserver is not None:
        forkserver._forkserver._stop()


def run_child(config: Config, num_records: int) -> dict:
    started = time.perf_counter()
    prepare_imports(config)
    result: dict = {"config": config.name, "pid": os.getpid(),
                    "imports_s": time.perf_counter() - started,
                    "course_lib_sources_sha256": course_lib_fingerprint()}
    started = time.perf_counter()
    data = load_data(config, num_records)
    result["data_s"] = time.perf_counter() - started
    result["rss_after_data_mb"] = _rss_mb()
    try:
        started = time.perf_counter()
        make_iterator, info = build(config, data)
        result["build_s"] = time.perf_counter() - started
        result["info"] = info
        # Grain's legacy loader with N workers batches in each worker and drops up to N-1
        # partial batches.
        legacy_grain = config.family == "grain" and config.builder is None
        shortfall = config.workers - 1 if legacy_grain and config.workers else 0
        cpu_before = _cpu_s(resource.RUSAGE_SELF), _cpu_s(resource.RUSAGE_CHILDREN)
        result.update(time_epoch(make_iterator, expected_batches(config, num_records),
                                 shortfall, config.pipeline))
        _stop_fork_server()
        # CPU seconds of this process and of its workers (counted once they have exited and
        # been joined, which every loader here does when its epoch ends, and for course_lib
        # once the fork server has exited too), over the epoch.
        result["cpu_main_s"] = _cpu_s(resource.RUSAGE_SELF) - cpu_before[0]
        result["cpu_workers_s"] = _cpu_s(resource.RUSAGE_CHILDREN) - cpu_before[1]
        result["status"] = "ok"
    except Exception as error:  # reported, never raised: one config must not stop the run
        result["status"] = "unavailable" if _is_unavailable(config, error) else "failed"
        result["error"] = f"{type(error).__name__}: {error}"
        result["traceback"] = traceback.format_exc()
    result["jax_imported"] = "jax" in sys.modules
    result["maxrss_self_mb"] = _maxrss_mb(resource.RUSAGE_SELF)
    result["maxrss_children_mb"] = _maxrss_mb(resource.RUSAGE_CHILDREN)
    return result


# -- the parent: fresh processes, memory watching, summaries ----------------------------------
def _rss_sum_mb(processes) -> float:
    total = 0
    for member in processes:
        with contextlib.suppress(psutil.Error):  # it may exit between listing and reading
            total += member.memory_info().rss
    return total / 2**20


def _is_helper(process, roles: dict[int, bool]) -> bool:
    """Whether a descendant is multiprocessing's resource tracker rather than a worker."""
    if process.pid not in roles:
        roles[process.pid] = any("resource_tracker" in part for part in process.cmdline())
    return roles[process.pid]


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
    command = [sys.executable, str(RUNNER), "--child", config.name,
               "--num-records", str(num_records), "--result-file", str(result_path)]
    environment = {**os.environ, **config.options.get("environment", {})}
    peak_tree_mb = peak_workers_mb = 0.0
    roles: dict[int, bool] = {}
    started = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                env=environment)
        watched = psutil.Process(proc.pid) if psutil is not None else None
        while proc.poll() is None:
            if time.monotonic() - started > timeout_s:
                _kill_tree(proc)
                return {"config": config.name, "status": "failed",
                        "error": f"timed out after {timeout_s:.0f} s (log: {log_path})"}
            if watched is not None:
                with contextlib.suppress(psutil.Error):
                    descendants = watched.children(recursive=True)
                    helpers = [member for member in descendants if _is_helper(member, roles)]
                    workers_mb = _rss_sum_mb([m for m in descendants if m not in helpers])
                    helpers_mb = _rss_sum_mb(helpers)
                    peak_workers_mb = max(peak_workers_mb, workers_mb)
                    peak_tree_mb = max(peak_tree_mb,
                                       workers_mb + helpers_mb + _rss_sum_mb([watched]))
            time.sleep(MONITOR_INTERVAL_S)
    wall_s = time.monotonic() - started
    if not result_path.exists():
        tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
        return {"config": config.name, "status": "failed", "process_wall_s": wall_s,
                "error": f"exit code {proc.returncode}, no result ({log_path}): "
                         + " | ".join(tail)}
    result = json.loads(result_path.read_text())
    result["process_wall_s"] = wall_s
    result["peak_tree_rss_sampled_mb"] = peak_tree_mb if watched is not None else None
    result["workers_rss_mb"] = (peak_workers_mb if watched is not None and config.workers
                                else None)
    # The sampler may miss a short spike; the child's own high-water mark cannot.
    result["peak_rss_mb"] = max(peak_tree_mb, result["maxrss_self_mb"])
    return result


def run_rounds(configs: list[Config], records: dict[str, int], repeats: int,
               timeout_s: float, on_result) -> dict[str, list[dict]]:
    """Every configuration once per round, `repeats` rounds; `on_result(config, i, result)`."""
    runs: dict[str, list[dict]] = {config.name: [] for config in configs}
    active = list(configs)
    for repetition in range(repeats):
        for config in list(active):
            result = spawn_run(config, records_for(config, records), repetition, timeout_s)
            runs[config.name].append(result)
            on_result(config, repetition, result)
            if result["status"] != "ok":  # neither a crash nor a missing feature will change
                active.remove(config)
    return runs


def _median_per_record(runs: list[dict], key: str) -> float | None:
    values = [run[key] / run["records"] * 1e6 for run in runs if run.get(key) is not None]
    return statistics.median(values) if values else None


def _median(values) -> float | None:
    values = [value for value in values if value is not None]
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
        firsts = [run["first_batch_s"] for run in ok]
        summary.update({
            "records_per_s_median": statistics.median(rates),
            "records_per_s_min": min(rates),
            "records_per_s_max": max(rates),
            "steady_records_per_s_median": _median(run["steady_records_per_s"] for run in ok),
            "first_batch_s_median": statistics.median(firsts),
            "first_batch_s_max": max(firsts),
            "epoch_s_median": statistics.median(run["total_s"] for run in ok),
            "peak_rss_mb_max": max(run["peak_rss_mb"] for run in ok),
            "workers_rss_mb_median": _median(run.get("workers_rss_mb") for run in ok),
            "cpu_main_us_per_record_median": _median_per_record(ok, "cpu_main_s"),
            "cpu_workers_us_per_record_median": _median_per_record(ok, "cpu_workers_s"),
            "batches_min": min(run["batches"] for run in ok),
            "jax_imported": any(run.get("jax_imported") for run in ok),
            "info": ok[0].get("info"),
        })
    return summary


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


def course_lib_fingerprint() -> str:
    """A hash of course_lib's sources: which code these numbers belong to (it is not committed)."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "course_lib").glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def busy_processes(seconds: float = 1.0) -> list[dict]:
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
        "versions": {package: _version(package) for package in
                     ("numpy", "jax", "grain", "torch", "psutil", "prometheus_client")},
        "course_lib_sources_sha256": course_lib_fingerprint(),
        "course_lib_has_workers_module": (ROOT / "course_lib" / "workers.py").exists(),
        "malloc_environment": {name: os.environ[name] for name in
                               ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                                "COURSE_LIB_MALLOC_TUNING") if name in os.environ},
    }
