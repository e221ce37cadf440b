"""The worker-scaling figure of RESULTS.md: records/s against worker count, per library.

One panel per pipeline (in-memory reference, decode-bound, compute-bound); x is the worker
count, y the median records/s over the repetitions with min-max error bars, one line per
library; a vertical line marks the number of cores. Only the numbers of the run in `report`
are used.
"""

from __future__ import annotations

from pathlib import Path

FAMILIES = {  # family -> (label, colour, marker)
    "course_lib": ("course_lib", "tab:blue", "o"),
    "grain": ("Grain 0.2.18 (best API)", "tab:orange", "s"),
    "torch": ("torch DataLoader", "tab:green", "^"),
}
PANELS = [  # pipeline -> (title, log y axis)
    ("reference", "In-memory reference pipeline\n(28×28 uint8, normalize + flip, batch 64)", True),
    ("decode", "Decode-bound pipeline\n(PNG files, Pillow decode + crop + flip + normalize, "
               "batch 32)", False),
    ("compute", "Compute-bound pipeline\n(about 1 ms of NumPy per record, batch 64, jax "
                "imported)", False),
]
WORKER_COUNTS = (0, 1, 2)


def scaling_points(report: dict, configs: dict) -> dict:
    """{pipeline: {family: [(workers, config, median, min, max), ...]}} from the summaries.

    Where several configurations share a point (course_lib and Grain in-process with
    different read options) the one with the highest median stands for it.
    """
    points: dict = {}
    for name, summary in report["summaries"].items():
        config = configs[name]
        median = summary.get("records_per_s_median")
        if not config.scaling or config.family not in FAMILIES or median is None:
            continue
        family = points.setdefault(config.pipeline, {}).setdefault(config.family, {})
        best = family.get(config.workers)
        if best is None or median > best[2]:
            family[config.workers] = (config.workers, name, median,
                                      summary["records_per_s_min"],
                                      summary["records_per_s_max"])
    return {pipeline: {family: [by_workers[w] for w in sorted(by_workers)]
                       for family, by_workers in families.items()}
            for pipeline, families in points.items()}


def plot_worker_scaling(report: dict, configs: dict, path: Path) -> dict | None:
    """Draw the figure into `path` (PNG); return what was plotted, or None if nothing was."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = scaling_points(report, configs)
    panels = [panel for panel in PANELS if points.get(panel[0])]
    if not panels:
        return None
    machine, run = report["machine"], report["run"]
    cores = machine["cpu_count"]
    load = ", ".join(f"{value:.2f}" for value in run["load_average_start"])
    figure, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.8), squeeze=False)
    decode = report.get("decode_data") or {}
    for axis, (pipeline, title, log_y) in zip(axes[0], panels, strict=True):
        if pipeline == "decode" and decode.get("image_shape"):
            height, width, _ = decode["image_shape"]
            title = title.replace("(PNG files", f"({decode['num_records']:,} {height}×{width} PNG "
                                  "files")
        for family, family_points in points[pipeline].items():
            label, colour, marker = FAMILIES[family]
            workers = [p[0] for p in family_points]
            medians = [p[2] for p in family_points]
            errors = [[p[2] - p[3] for p in family_points], [p[4] - p[2] for p in family_points]]
            axis.errorbar(workers, medians, yerr=errors, label=label, color=colour,
                          marker=marker, capsize=4, linewidth=1.8)
            for worker_count, median in zip(workers, medians, strict=True):
                # The highest line at this worker count is labelled above, the others
                # below, so that close values do not print over each other.
                highest = max(p[2] for other in points[pipeline].values() for p in other
                              if p[0] == worker_count)
                axis.annotate(f"{median:,.0f}", (worker_count, median),
                              textcoords="offset points", fontsize=7, color=colour,
                              xytext=(7, 5) if median == highest else (7, -12))
        limit = report["summaries"].get("numpy_limit", {}).get("records_per_s_median")
        if pipeline == "reference" and limit is not None:
            axis.axhline(limit, color="grey", linestyle=":", linewidth=1.2,
                         label=f"pure NumPy limit ({limit:,.0f}/s)")
        if cores <= max(WORKER_COUNTS):
            axis.axvline(cores, color="red", linestyle="--", linewidth=1.2,
                         label=f"workers = cores ({cores}); main process competes")
        else:
            axis.text(0.98, 0.02, f"{cores} cores: all points have a core per worker",
                      transform=axis.transAxes, ha="right", va="bottom", fontsize=8,
                      color="red")
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("worker processes (0 = in the main process)")
        axis.set_ylabel("records/s (median, bars: min-max)")
        axis.set_xticks(WORKER_COUNTS)
        axis.set_xlim(-0.3, max(WORKER_COUNTS) + 0.3)
        if log_y:
            axis.set_yscale("log")
        else:
            axis.set_ylim(bottom=0)
        axis.grid(True, which="major", alpha=0.3)
        axis.legend(fontsize=8, loc="best")
    figure.suptitle(f"Worker scaling on {cores} cores (os.cpu_count()), load average at start "
                    f"{load}\n{run['mode']} run, {run['repeats']} repetitions, "
                    f"{run['started']}", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    described = "; ".join(
        f"{pipeline} {family}: " + ", ".join(f"w{p[0]}={p[1]}" for p in family_points)
        for pipeline, families in points.items() for family, family_points in families.items())
    return {"path": str(path), "points": described}
