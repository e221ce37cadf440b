"""What the benchmark reports: the ratios against their targets, the tables and the plot.

Everything here reads the `report` dict a run builds (machine, run, summaries, notes) and
nothing else, so RESULTS.md only ever shows numbers measured in the run it describes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from bench_common import BATCH_SIZE, IMAGE_SHAPE
from bench_configs import CONFIGS, DECODE, PIPELINES, Config, ratios
from bench_harness import expected_batches, records_for

PLOT_NAME = "worker_scaling.png"


# -- the ratios ----------------------------------------------------------------------------------
def _best(names, summaries: dict, key: str, lowest: bool = False) -> tuple[str, float] | None:
    measured = [(summaries[name][key], name) for name in names
                if summaries.get(name, {}).get(key) is not None]
    if not measured:
        return None
    value, name = min(measured) if lowest else max(measured)
    return name, value


def compute_ratios(summaries: dict) -> list[dict]:
    """Every ratio of bench_configs.ratios() on this run's medians, with its verdict."""
    results = []
    for ratio in ratios():
        entry = {"label": ratio.label, "target": ratio.target, "aim": ratio.aim,
                 "key": ratio.key, "at_most": ratio.at_most, "scale": ratio.scale,
                 "absolute": not ratio.denominator}
        numerator = _best(ratio.numerator, summaries, ratio.key, lowest=ratio.at_most)
        denominator = (_best(ratio.denominator, summaries, ratio.key, lowest=ratio.at_most)
                       if ratio.denominator else ("", 1.0))
        if numerator is None or denominator is None:
            missing = ratio.numerator if numerator is None else ratio.denominator
            entry.update(value=None, verdict="n/a",
                         note=f"not measured in this run: {', '.join(missing)}")
            results.append(entry)
            continue
        value = numerator[1] / (ratio.scale * denominator[1])
        entry.update(value=value, numerator=numerator[0], denominator=denominator[0])
        if not ratio.denominator and ratio.key == "first_batch_s_median":
            entry["worst"] = summaries[numerator[0]]["first_batch_s_max"]
        if ratio.target is None:
            entry["verdict"] = "info"
        else:
            met = value <= ratio.target if ratio.at_most else value >= ratio.target
            entry["verdict"] = "PASS" if met else "FAIL"
        if ratio.aim is not None:
            entry["aim_met"] = value >= ratio.aim
        results.append(entry)
    return results


def ratio_line(entry: dict) -> str:
    if entry["value"] is None:
        return f"{entry['label']}: n/a ({entry['note']})"
    rule = "<=" if entry.get("at_most") else ">="
    if entry.get("absolute"):
        worst = (f" (worst repetition {entry['worst'] * 1e3:.0f} ms)" if "worst" in entry
                 else "")
        return (f"{entry['label']}: {entry['value'] * 1e3:.0f} ms median{worst}, target "
                f"{rule} {entry['target'] * 1e3:.0f} ms: {entry['verdict']}")
    scale = f"{entry['scale']:g} x " if entry.get("scale", 1) != 1 else ""
    line = (f"{entry['label']}: {entry['value']:.2f}x ({entry['numerator']} / "
            f"{scale}{entry['denominator']})")
    if entry["target"] is None:
        return line + " (no target: shown for reference)"
    line += f", target {rule} {entry['target']:g}x: {entry['verdict']}"
    if entry.get("aim") is not None:
        line += f"; aim >= {entry['aim']:g}x: {'met' if entry['aim_met'] else 'not met'}"
    return line


# -- notes about the run -------------------------------------------------------------------------
def run_notes(runs: dict, summaries: dict, records: dict[str, int]) -> list[str]:
    """Facts about this run a reader needs: changed sources, short epochs, imports."""
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
        config = CONFIGS[name]
        expected = expected_batches(config, records_for(config, records))
        if summary.get("batches_min", expected) < expected:
            notes.append(f"{name} delivered {summary['batches_min']} batches instead of "
                         f"{expected}: Grain's DataLoader batches inside each worker and drops "
                         "each worker's partial batch.")
        if summary.get("jax_imported") and not config.imports_jax:
            notes.append(f"{name} is meant to run without jax, but its process imported it "
                         "(a library it uses imports jax).")
    return notes


def worker_notes(configs: list[Config], cores: int) -> list[str]:
    notes = []
    for config in configs:
        if config.workers > cores:
            notes.append(f"{config.name}: {config.workers} workers requested on a machine with "
                         f"{cores} cores (os.cpu_count()), more workers than cores.")
        elif config.workers and config.workers + 1 > cores:
            notes.append(f"{config.name}: {config.workers} workers plus the main process on "
                         f"{cores} cores: they compete for the cores.")
    return notes


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


def cost_line(costs: list[dict], decode_info: dict) -> str:
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


def prometheus_note(machine: dict) -> str:
    version = machine["versions"].get("prometheus_client", "not installed")
    present = (f"it was importable in this run (prometheus_client {version})"
               if version != "not installed" else "it was not installed in this run")
    return ("Grain records Prometheus metrics for every record whenever `prometheus_client` "
            f"is importable; {present}, so Grain's numbers include that cost. "
            "grain_ds_w0_read_t0_no_prometheus measures Grain without it (a diagnostic, "
            "not counted as Grain's best).")


# -- tables ----------------------------------------------------------------------------------------
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


def _table_rows(report: dict, pipeline: str) -> list[str]:
    rows = [
        "| config | records/s median | min | max | µs/record | first batch ms | peak RSS MB "
        "| workers RSS MB | CPU µs/record main + workers | runs | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
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
            f"| {_fmt_mb(summary.get('workers_rss_mb_median'))} "
            f"| {_fmt_cpu(summary)} "
            f"| {summary['runs_ok']}/{summary['runs']} | {note} |")
    return rows


def _pipeline_sections(report: dict) -> list[str]:
    run = report["run"]
    pipelines = {CONFIGS[name].pipeline for name in report["summaries"]}
    decode = report.get("decode_data")
    lines = []
    if "reference" in pipelines:
        data_mb = run["num_records"] * (np.prod(IMAGE_SHAPE) + 8) / 2**20
        lines += [
            "", "## In-memory reference pipeline", "",
            f"{run['num_records']:,} random 28×28 uint8 images in memory ({data_mb:.0f} MiB, "
            "included in peak memory), per-record normalize and random flip, "
            f"Batch({BATCH_SIZE}, drop_remainder=True), one shuffled epoch. Grain runs as its "
            "legacy `DataLoader` (`grain_w*`) and as its Dataset API (`grain_ds_*`: "
            "`MapDataset.source().shuffle().map().random_map().batch().to_iter_dataset()`, "
            "with `mp_prefetch` for workers).",
            "", *_table_rows(report, "reference"),
        ]
    if DECODE in pipelines and decode is not None:
        side = decode["image_shape"]
        lines += [
            "", "## Decode-bound pipeline", "",
            f"{decode['num_records']:,} PNG files ({side[0]}×{side[1]} RGB, smooth colour "
            f"waves plus noise; {decode['encoded_mb']:.1f} MiB encoded, "
            f"{decode['encoded_mb'] / decode['raw_mb']:.0%} of the raw size) in "
            f"`{decode['directory']}`, written once with `write_image_folder` and read from "
            "the page cache; per record: read the bytes, Pillow decode, zero-pad by "
            f"{decode['padding']} and random-crop back to {side[0]}×{side[1]}, random "
            "horizontal flip, per-channel normalize to float32; "
            f"Batch({decode['batch_size']}, drop_remainder=True), one shuffled epoch. "
            "Grain and torch run the same Pillow/NumPy code (benchmarks/bench_decode.py).",
            "", *_table_rows(report, DECODE),
        ]
        if report.get("decode_per_record_cost"):
            lines += ["", cost_line(report["decode_per_record_cost"], decode)]
    if "compute" in pipelines:
        lines += [
            "", "## Compute-bound pipeline (NumPy work in the loader's process)", "",
            f"{run['compute_num_records']:,} random 28×28 uint8 images; per record "
            "`bench_compute.compute_record`: upsample to 224×224 float32 with `np.kron`, a "
            "3×3 box blur from shifted slices four times, average back to 28×28 (about 1 ms "
            f"of NumPy); Batch({PIPELINES['compute'].batch_size}, drop_remainder=True), one "
            "shuffled epoch; every loader runs the same function. The `_no_jax` "
            "configurations never import jax; `course_lib_compute_w0_no_jax_untuned` also "
            "turns off course_lib's malloc tuning (`COURSE_LIB_MALLOC_TUNING=0`, see "
            "course_lib/allocator.py), which shows what glibc's default thresholds cost "
            "such a transform. The `numpy_compute_alone` configurations run the function "
            "with no loader at all, in the benchmark's process and in 2 spawned processes: "
            "what this machine's cores do with it, the yardstick for the worker ratios.",
            "", *_table_rows(report, "compute"),
        ]
    if "sources" in pipelines:
        lines += [
            "", "## Reaching a source's arrays from the workers", "",
            "Raw 28×28 uint8 images with int64 labels, Batch(64), 2 workers, one shuffled "
            "epoch; `ArrayDataSource` against a `RandomAccessDataSource` subclass holding the "
            "same arrays in attributes (the lessons' pattern). Workers RSS is the median over "
            "the repetitions of the peak resident memory of all the child's worker processes "
            "together (multiprocessing's resource tracker not counted, course_lib's fork server "
            "counted with the workers; shared pages count in each process that touched them).",
            "", *_table_rows(report, "sources"),
        ]
    return lines


def render_markdown(report: dict) -> str:
    machine, run = report["machine"], report["run"]
    versions = machine["versions"]
    load = ", ".join(f"{value:.2f}" for value in run["load_average_start"])
    load_end = ", ".join(f"{value:.2f}" for value in run["load_average_end"])
    busy = ", ".join(f"{entry['name']} ({entry['cpu_percent']:.0f}%)"
                     for entry in run["busy_processes_start"]) or "none above 20% of a core"
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
        f"files, batch {decode['batch_size'] if decode else '-'}; compute-bound pipeline "
        f"{run.get('compute_num_records', 0):,} records; {run['repeats']} fresh-process "
        "repetitions per config (interleaved)",
        f"- Machine: {cores} cores ({machine['cpu_model']}), "
        f"{machine['memory_gb']} GB RAM, {machine['platform']}",
        f"- Python {machine['python']}, numpy {versions['numpy']}, jax {versions['jax']}, "
        f"grain {versions['grain']}, torch {versions['torch']}, prometheus_client "
        f"{versions.get('prometheus_client', '-')}",
        f"- course_lib sources sha256 {machine['course_lib_sources_sha256']} "
        f"(workers module present: {machine['course_lib_has_workers_module']})",
        f"- Load average at start: {load}; at end: {load_end}; busy processes at start: {busy}",
        "",
        "Every configuration runs in fresh processes that import jax first (except the "
        "`_no_jax` ones), so that what an import does to the allocator does not decide a "
        "comparison. Records/s counts delivered records (whole batches) over the time from "
        "iterator creation to the last batch (worker start-up included); first batch is the "
        "time from iterator creation to the first batch (median); µs/record is 1e6 / median "
        "records/s; peak memory is the largest RSS of the process tree (the process and its "
        "workers) seen in any repetition, imports included; workers RSS is the median over "
        "the repetitions of the peak RSS of the worker processes together; CPU µs/record is "
        "the CPU time (user + system) of the main process and of its exited worker processes "
        "over the epoch, per delivered record (median): above the wall-clock µs/record when "
        "processes run in parallel, and a worker's start-up (interpreter, imports) counts "
        "in it.",
        *_pipeline_sections(report),
        "", "## Ratios and limits (medians, this run)", "",
        *[f"- {ratio_line(entry)}" for entry in report["ratios"]],
    ]
    if report.get("plot"):
        plot = report["plot"]
        lines += [
            "", "## Worker scaling", "",
            f"![Records/s against worker count]({PLOT_NAME})",
            "",
            f"Measured on {cores} cores (os.cpu_count(); {machine.get('cpus_usable')} usable "
            f"by this process) with a load average of {load} at the start and {load_end} at "
            "the end of the run. Each point is the median records/s over the repetitions, "
            "the bars span min to max; worker count 0 means in the main process (for "
            "course_lib and Grain its best read option; for Grain the better of its "
            "DataLoader and its Dataset API at each worker count). From "
            f"{cores} workers on, the workers and the main process share the {cores} cores. "
            f"Points: {plot['points']}.",
        ]
    if report["notes"]:
        lines += ["", "## Notes", "", *[f"- {note}" for note in report["notes"]]]
    return "\n".join(lines) + "\n"


def print_table(summaries: dict) -> None:
    header = (f"{'config':40} {'rec/s med':>11} {'min':>11} {'max':>11} {'1st ms':>8} "
              f"{'peak MB':>8} {'wrk MB':>7} {'CPU us/rec main + workers':>26}  runs")
    print(header)
    print("-" * len(header))
    for name, summary in summaries.items():
        if summary["status"] != "ok" and not summary["runs_ok"]:
            word = "not available" if summary["status"] == "unavailable" else "FAILED"
            print(f"{name:40} {word}: {summary['error']}")
            continue
        print(f"{name:40} {_fmt_rate(summary['records_per_s_median']):>11} "
              f"{_fmt_rate(summary['records_per_s_min']):>11} "
              f"{_fmt_rate(summary['records_per_s_max']):>11} "
              f"{_fmt_ms(summary['first_batch_s_median']):>8} "
              f"{_fmt_mb(summary['peak_rss_mb_max']):>8} "
              f"{_fmt_mb(summary.get('workers_rss_mb_median')):>7} {_fmt_cpu(summary):>26}  "
              f"{summary['runs_ok']}/{summary['runs']}")


def run_line(config: Config, repetition: int, repeats: int, result: dict) -> str:
    prefix = f"[{repetition + 1}/{repeats}] {config.name:40}"
    if result["status"] == "unavailable":
        return f"{prefix} not available: {result['error']}"
    if result["status"] != "ok":
        return f"{prefix} FAILED: {result['error']}"
    return (f"{prefix} {result['records_per_s']:>10,.0f} rec/s  first batch "
            f"{result['first_batch_s'] * 1e3:7.1f} ms  peak {result['peak_rss_mb']:6.0f} MB  "
            f"(process {result['process_wall_s']:.1f} s)")


def write_plot(report: dict, out_dir: Path) -> None:
    """Draw worker_scaling.png into `out_dir`; a failure becomes a note, never an error."""
    plot_path = out_dir / PLOT_NAME
    try:
        from bench_plot import plot_worker_scaling

        report["plot"] = plot_worker_scaling(report, CONFIGS, plot_path)
    except Exception as error:  # a missing matplotlib must not lose the measurements
        report["plot"] = None
        report["notes"].append(f"worker-scaling plot not written: {type(error).__name__}: "
                               f"{error}")
        print(f"NOTE: {report['notes'][-1]}")
