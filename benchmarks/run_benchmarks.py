"""Benchmark course_lib against Grain, torch and plain NumPy on the lessons' pipelines.

The pipelines (bench_configs.py has the list, each builder's module the details):
- the in-memory reference pipeline (bench_common.py): 60000 random 28x28 uint8 images with
  int labels, per-record normalize and random horizontal flip, Batch(64), one shuffled epoch;
- the decode-bound pipeline (bench_decode.py): 6000 PNG files, Pillow decode, crop, flip,
  normalize, Batch(32);
- the compute-bound pipeline (bench_compute.py): about 1 ms of NumPy work per record,
  6400 records, with and without `import jax` first;
- reaching a source's arrays (bench_course_lib.py): a custom source against ArrayDataSource
  at 60000 and 300000 records with 2 workers, first batch and worker memory.

The modules: bench_configs.py (what is measured and the targets), bench_harness.py (fresh
processes, repetitions, memory sampling), bench_report.py and bench_plot.py (tables, ratios,
RESULTS.md, the plot). This script is the command line.

    .venv/bin/python benchmarks/run_benchmarks.py                 # all configs, 5 rounds
    .venv/bin/python benchmarks/run_benchmarks.py --quick         # smoke run, small data
    .venv/bin/python benchmarks/run_benchmarks.py --only 'course_lib_w0*,grain_w0_*'
    .venv/bin/python benchmarks/run_benchmarks.py --list
    .venv/bin/python benchmarks/run_benchmarks.py --profile course_lib_decode_w0

A full run (no --quick, --only, --num-records, --decode-records or --compute-records)
writes benchmarks/RESULTS.md, benchmarks/results.json and benchmarks/worker_scaling.png;
other runs write them under benchmarks/_work/ unless --out-dir says otherwise.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

import bench_compute
import bench_decode
import bench_harness as harness
import bench_report as report_
import numpy as np
from bench_configs import CONFIGS, DECODE, PIPELINES, QUICK_RECORDS, select
from bench_harness import HERE, ROOT, WORK

QUICK_REPEATS = 2
FULL_REPEATS = 5


def _records(args) -> dict[str, int]:
    """Records per pipeline for this run (a configuration may fix its own)."""
    chosen = {"reference": args.num_records, DECODE: args.decode_records,
              "compute": args.compute_records}
    return {name: chosen.get(name) or (spec.quick_records if args.quick else spec.num_records)
            for name, spec in PIPELINES.items()}


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


def run_all(args) -> None:
    configs = select(args.only)
    records = _records(args)
    repeats = args.repeats or (QUICK_REPEATS if args.quick else FULL_REPEATS)
    full = not args.quick and not args.only and not any(
        (args.num_records, args.decode_records, args.compute_records))
    out_dir = Path(args.out_dir) if args.out_dir else (HERE if full else WORK)
    cores = os.cpu_count() or 1

    notes = report_.worker_notes(configs, cores)
    if harness.psutil is None:
        notes.append("psutil is not installed: peak memory is the child's own "
                     "resource.getrusage high-water mark, without worker processes.")
    print("Sampling machine load (1 s)...", flush=True)
    load_start = os.getloadavg()
    busy = harness.busy_processes()
    machine = harness.machine_info()
    print(f"{cores} cores, python {machine['python']}, versions {machine['versions']}")
    print(f"load average at start: {load_start}; busy processes: "
          f"{[(entry['name'], entry['cpu_percent']) for entry in busy] or 'none'}")
    for note in notes:
        print(f"NOTE: {note}")
    decode_info = (_prepare_decode_folder(records[DECODE])
                   if any(config.pipeline == DECODE for config in configs) else None)
    print(f"{len(configs)} configs x {repeats} repetitions; records per pipeline {records} "
          "(the sources configurations fix their own)\n", flush=True)

    started_at = datetime.datetime.now().astimezone()
    started = time.monotonic()
    runs = harness.run_rounds(
        configs, records, repeats, args.timeout,
        lambda config, repetition, result: print(
            report_.run_line(config, repetition, repeats, result), flush=True))
    wall_s = time.monotonic() - started

    summaries = {name: harness.summarize(config_runs) for name, config_runs in runs.items()}
    ratios = report_.compute_ratios(summaries)
    notes += report_.run_notes(runs, summaries, records)
    if any(CONFIGS[name].family == "grain" for name in summaries):
        notes.append(report_.prometheus_note(machine))
    costs = report_.per_record_costs(summaries, decode_info)
    report = {
        "run": {
            "started": started_at.isoformat(timespec="seconds"),
            "wall_s": wall_s,
            "mode": "quick" if args.quick else ("full" if full else "partial"),
            "num_records": records["reference"],
            "decode_num_records": records[DECODE],
            "compute_num_records": records["compute"],
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
    report_.print_table(summaries)
    print()
    if costs:
        print(report_.cost_line(costs, decode_info))
    for entry in ratios:
        print(report_.ratio_line(entry))
    for note in notes:
        print(f"NOTE: {note}")
    out_dir.mkdir(parents=True, exist_ok=True)
    report_.write_plot(report, out_dir)
    (out_dir / "results.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out_dir / "RESULTS.md").write_text(report_.render_markdown(report))
    print(f"\nTook {wall_s:.0f} s; load average at end {os.getloadavg()}. "
          f"Wrote {out_dir / 'RESULTS.md'}, {out_dir / 'results.json'}"
          + (f" and {out_dir / report_.PLOT_NAME}." if report["plot"] else "."))


def profile(args) -> None:
    """One epoch of one config in this process, under cProfile; print the top entries.

    Only this (main) process is profiled: with workers it shows what the main process does
    while they work (waiting, receiving, rebuilding results around shared memory), not
    the workers' own work.
    """
    config = CONFIGS[args.profile]
    num_records = harness.records_for(config, _records(args))
    harness.prepare_imports(config)
    data = harness.load_data(config, num_records)
    make_iterator, info = harness.build(config, data)
    print(f"{config.name}: {info}")
    profiler = cProfile.Profile()
    legacy_grain = config.family == "grain" and config.builder is None
    shortfall = config.workers - 1 if legacy_grain and config.workers else 0
    result = profiler.runcall(harness.time_epoch, make_iterator,
                              harness.expected_batches(config, num_records), shortfall,
                              config.pipeline)
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
    parser.add_argument("--repeats", type=int,
                        help=f"fresh-process repetitions (default {FULL_REPEATS})")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK_RECORDS} records, {QUICK_REPEATS} repetitions")
    parser.add_argument("--num-records", type=int,
                        help=f"records of the in-memory reference pipeline, default "
                             f"{PIPELINES['reference'].num_records}")
    parser.add_argument("--decode-records", type=int,
                        help=f"PNG files of the decode-bound pipeline, default "
                             f"{bench_decode.NUM_RECORDS} ({bench_decode.QUICK_RECORDS} with "
                             "--quick)")
    parser.add_argument("--compute-records", type=int,
                        help=f"records of the compute-bound pipeline, default "
                             f"{bench_compute.NUM_RECORDS} ({bench_compute.QUICK_RECORDS} with "
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
        result = harness.run_child(CONFIGS[args.child], args.num_records)
        Path(args.result_file).write_text(json.dumps(result, default=str))
        if result["status"] == "failed":
            print(result["traceback"], file=sys.stderr)
        return
    if args.list:
        for config in CONFIGS.values():
            print(f"{config.name:40} {config.description}")
        return
    if args.profile:
        profile(args)
        return
    run_all(args)


if __name__ == "__main__":
    main()
