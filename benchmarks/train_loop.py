"""How much of a training loop is spent waiting for data, and what each loader fix buys.

The Flax NNX MLP of `course_lib.training` is trained on the 1797 digits for a fixed number
of steps, fed four ways:

  naive             a plain Python loop: per step pick random indices, then for each record
                    read the file, decode the PNG, normalise and crop it, and np.stack
  loader_w0         course_lib.load(...), everything in this process (worker_count=0)
  loader_w0_read0   the same without read-ahead threads, ReadOptions(num_threads=0): a
                    diagnostic row (the default read threads cost time on this source)
  loader_w2         the same loader with 2 worker processes
  loader_w2_prefetch  the same, plus course_lib.device.prefetch_to_device

To make loading cost what it costs with real image data, the digits are upscaled (8x8 to
32x32 by default) and written as one PNG file per record to a temporary folder; the loaders
read them with ImageFolderDataSource + DecodeImage + Normalize + RandomCrop. A StepProfiler
times every step (waiting for the batch, then the step synchronised on its loss); the first
steps (compilation, worker start-up) are left out of the statistics and reported apart.

    .venv/bin/python benchmarks/train_loop.py              # about 1 minute on 2 cores
    .venv/bin/python benchmarks/train_loop.py --steps 50   # a smoke run; writes to _work/

A full run (the default --steps, --batch-size, --image-size and --workers) writes
benchmarks/TRAIN_LOOP_RESULTS.md and benchmarks/train_loop_timeline.png; any other run
writes them to the git-ignored benchmarks/_work/.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing course_lib

import course_lib as grain  # noqa: E402
from course_lib.profiling import StepProfiler  # noqa: E402
from course_lib.training import create_model, train_step  # noqa: E402

DEFAULTS = {"steps": 300, "batch_size": 64, "image_size": 32, "workers": 2}
WARMUP_STEPS = 5  # compilation and worker start-up; timed, but left out of the statistics
PADDING = 4  # RandomCrop: pad 4 pixels on each side, cut back to image_size
SEED = 0
GPU_NOTE = "not measured: no GPU in this session"
RESULTS_MD = "TRAIN_LOOP_RESULTS.md"
TIMELINE_PNG = "train_loop_timeline.png"
TIMELINE_STEPS = 20  # steps drawn per timeline, so that single steps stay visible


# -- the data: digits as PNG files -----------------------------------------------------------
def write_digit_pngs(directory: Path, image_size: int) -> tuple[Path, float, float]:
    """Upscale the digits to `image_size` pixels a side (bilinear), write one PNG per record;
    return the folder and the mean and std of the pixels (as fractions of 255)."""
    digits = grain.load_digits()
    images = np.stack([
        np.asarray(Image.fromarray(image).resize((image_size, image_size), Image.BILINEAR))
        for image in digits["image"]])
    folder = grain.write_image_folder(images, digits["label"], directory / "digits_png")
    pixels = images.astype(np.float64) / 255
    return folder, float(pixels.mean()), float(pixels.std())


# -- the four ways to feed the loop -----------------------------------------------------------
def naive_batches(source, batch_size: int, mean: float, std: float,
                  seed: int = SEED) -> Iterator[dict]:
    """What one writes first: a Python loop over the records of every batch."""
    rng = np.random.default_rng(seed)
    while True:
        keys = rng.choice(len(source), size=batch_size, replace=False)
        images, labels = [], []
        for key in keys:
            record = source[int(key)]
            with Image.open(io.BytesIO(record["image"])) as picture:
                image = np.array(picture)
            image = (image.astype(np.float32) / 255 - mean) / std
            padded = np.pad(image, PADDING)
            top, left = rng.integers(0, 2 * PADDING + 1, size=2)
            images.append(padded[top:top + image.shape[0], left:left + image.shape[1]])
            labels.append(record["label"])
        yield {"image": np.stack(images), "label": np.array(labels, dtype=np.int32)}


def make_loader(source, batch_size: int, image_size: int, mean: float, std: float,
                worker_count: int, read_options=None) -> grain.DataLoader:
    return grain.load(
        source, num_epochs=None, shuffle=True, seed=SEED,
        transformations=[grain.DecodeImage(), grain.Normalize(mean=mean, std=std),
                         grain.RandomCrop(image_size, padding=PADDING)],
        batch_size=batch_size, drop_remainder=True, worker_count=worker_count,
        read_options=read_options)


@contextlib.contextmanager
def feed(name: str, source, options, mean: float, std: float):
    """The batch iterator of configuration `name`; closed (workers stopped) on exit."""
    if name == "naive":
        yield naive_batches(source, options.batch_size, mean, std)
        return
    workers = 0 if name.startswith("loader_w0") else options.workers
    read_options = grain.ReadOptions(num_threads=0) if name.endswith("_read0") else None
    loader = make_loader(source, options.batch_size, options.image_size, mean, std, workers,
                         read_options)
    with contextlib.ExitStack() as stack:
        batches = stack.enter_context(iter(loader))
        if name.endswith("_prefetch"):
            batches = stack.enter_context(grain.prefetch_to_device(batches, size=2))
        yield batches


# -- one measured training run ----------------------------------------------------------------
@dataclass
class Run:
    name: str
    profiler: StepProfiler
    first_batch_s: float  # from creating the iterator (workers start) to the first batch
    total_s: float  # the whole run, warm-up and start-up included
    losses: list[float] = field(default_factory=list)


def train(name: str, make_batches: Callable, num_steps: int, in_features: int) -> Run:
    """Train a fresh model (same seed every time) for `num_steps` measured steps."""
    model, optimizer = create_model(in_features, seed=SEED)
    profiler = StepProfiler()  # warmup_steps is set after the run, see below
    losses = []
    start = time.perf_counter()
    with make_batches() as batches:
        startup = time.perf_counter() - start  # worker_count > 0: iter() starts the workers
        for batch in profiler.wrap(batches, num_steps=WARMUP_STEPS + num_steps):
            with profiler.step():
                loss = train_step(model, optimizer, batch["image"], batch["label"])
                losses.append(float(profiler.sync(loss)))
    total = time.perf_counter() - start
    first_batch = startup + float(profiler.wait_times[0])
    profiler.warmup_steps = WARMUP_STEPS  # from here on, statistics skip the warm-up steps
    return Run(name, profiler, first_batch_s=first_batch, total_s=total, losses=losses)


def stats(run: Run) -> dict:
    profiler = run.profiler
    return {
        "steps_per_s": profiler.num_steps / profiler.wall_time,
        "wait_ms": 1e3 * float(profiler.wait_times.mean()),
        "step_ms": 1e3 * float(profiler.step_times.mean()),
        "idle": profiler.idle_fraction,
    }


# -- reporting ----------------------------------------------------------------------------------
def table(runs: list[Run], descriptions: dict[str, str]) -> list[str]:
    lines = [
        "| configuration | how batches are made | steps/s | mean wait per step (ms) "
        "| mean step (ms) | accelerator idle | first batch (s) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        s = stats(run)
        lines.append(
            f"| {run.name} | {descriptions[run.name]} | {s['steps_per_s']:.1f} "
            f"| {s['wait_ms']:.2f} | {s['step_ms']:.2f} | {100 * s['idle']:.1f}% "
            f"| {run.first_batch_s:.2f} |")
    lines.append(f"| GPU | {GPU_NOTE} | | | | | |")
    return lines


def checks(runs: list[Run]) -> list[str]:
    """Sanity checks computed from the runs: determinism across loaders, a falling loss."""
    by_name = {run.name: run for run in runs}
    lines = []
    reference = by_name.get("loader_w0")
    for run in runs:
        if run is reference or not run.name.startswith("loader") or reference is None:
            continue
        same = run.losses == reference.losses
        lines.append(f"- {run.name}: losses {'identical to' if same else 'DIFFER from'} "
                     f"loader_w0 at every step ({len(run.losses)} steps, warm-up included).")
    for run in runs:
        head, tail = np.mean(run.losses[:10]), np.mean(run.losses[-10:])
        lines.append(f"- {run.name}: mean loss of the first 10 steps {head:.3f}, "
                     f"of the last 10 {tail:.3f}.")
    return lines


def busiest(runs: list[Run]) -> Run:
    """The loader configuration that leaves the accelerator idle the least."""
    return min((run for run in runs if run.name != "naive"), key=lambda run: stats(run)["idle"])


def plot(runs: list[Run], path: Path) -> None:
    """Timelines of the naive loop and of the busiest loader, on one time axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    naive, best = runs[0], busiest(runs)
    figure, axes = plt.subplots(2, 1, figsize=(11, 4.6), sharex=True)
    for ax, run in zip(axes, (naive, best), strict=True):
        run.profiler.plot_timeline(ax=ax, max_steps=TIMELINE_STEPS)
        ax.set_title(f"{run.name}: {ax.get_title()}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_markdown(path: Path, runs: list[Run], options, descriptions: dict[str, str],
                   setup: dict, timeline_name: str, elapsed: float) -> None:
    import jax

    best = busiest(runs).name
    fastest = max(runs, key=lambda run: stats(run)["steps_per_s"]).name
    naive, busy = stats(runs[0]), stats(busiest(runs))
    busy_machine = max(setup["load_before"], setup["load_after"]) > setup["cores"]
    lines = [
        "# Training-loop benchmark",
        "",
        "Generated by `benchmarks/train_loop.py`; every number below is measured by that run.",
        "",
        "## Setup",
        "",
        f"- Model: `course_lib.training` MLP ({setup['in_features']} inputs, hidden 128, "
        "10 classes), Adam 1e-3, one jitted `train_step` per batch.",
        f"- Data: the 1797 digits upscaled to {options.image_size}x{options.image_size} and "
        "written as PNG files; per record: read file, decode, normalise, "
        f"random crop (padding {PADDING}). Batch {options.batch_size}, "
        "`drop_remainder=True`, shuffled, repeated epochs.",
        f"- {options.steps} measured steps per configuration, after {WARMUP_STEPS} warm-up "
        "steps (compilation, worker start-up) that are left out of the statistics; "
        "\"first batch\" is the time from creating the iterator (which starts the workers) "
        "to the first batch.",
        f"- Machine: {setup['cores']} CPU cores, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, JAX {jax.__version__} on "
        f"{jax.default_backend()} ({jax.devices()[0].device_kind}). Load average "
        f"(1 min) before the run {setup['load_before']:.2f}, after it "
        f"{setup['load_after']:.2f}.",
        f"- Whole run: {elapsed:.0f} s.",
        *([f"- **Warning: the load average exceeded the {setup['cores']} cores, so other "
           "programs were competing for them; these numbers are unreliable.**"]
          if busy_machine else []),
        "",
        "\"Accelerator idle\" is the share of the wall time not spent inside the "
        "(synchronised) training step: waiting for the batch plus the loop's own overhead. "
        "Here the accelerator is the CPU itself, so the step and the loader share the same "
        "cores.",
        "",
        "## Results",
        "",
        *table(runs, descriptions),
        "",
        f"The accelerator is busiest with {best}: idle {100 * naive['idle']:.1f}% of the "
        f"time with the naive loop, {100 * busy['idle']:.1f}% with {best}; "
        f"{naive['steps_per_s']:.1f} and {busy['steps_per_s']:.1f} steps/s "
        f"({busy['steps_per_s'] / naive['steps_per_s']:.2f}x). The most steps/s: {fastest}.",
        "",
        "Checks:",
        "",
        *checks(runs),
        *([f"- Note: worker_count={options.workers} is more than the {setup['cores']} "
           "cores here."] if options.workers > setup["cores"] else []),
        "",
        f"![timelines of naive and {best}]({timeline_name})",
        "",
        f"`{timeline_name}`: the first {TIMELINE_STEPS} measured steps of the naive loop and "
        f"of the configuration with the least accelerator idle time ({best}), on one time "
        "axis; red is waiting for data, green is the training step.",
        "",
    ]
    path.write_text("\n".join(lines))


# -- main -----------------------------------------------------------------------------------------
def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=DEFAULTS["steps"],
                        help="measured steps per configuration (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"])
    parser.add_argument("--image-size", type=int, default=DEFAULTS["image_size"],
                        help="side of the upscaled digit images (default %(default)s)")
    parser.add_argument("--workers", type=int, default=DEFAULTS["workers"],
                        help="worker processes of the loader_w* configurations")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write the results (default: benchmarks/ for a full "
                             "run, benchmarks/_work/ otherwise)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    options = parse_args(argv)
    full_run = all(getattr(options, key) == value for key, value in DEFAULTS.items())
    out = options.out or (HERE if full_run else HERE / "_work")
    out.mkdir(parents=True, exist_ok=True)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    setup = {"cores": cores, "load_before": os.getloadavg()[0],
             "in_features": options.image_size ** 2}
    if options.workers > cores:
        print(f"Note: --workers {options.workers} is more than the {cores} CPU cores here; "
              "the workers and the training step will compete for them.")
    if options.workers < 1:
        raise SystemExit("--workers must be at least 1 (loader_w0 already runs without).")
    w = options.workers
    descriptions = {
        "naive": "Python loop per record: read, decode, normalise, crop; np.stack",
        "loader_w0": "course_lib.load, worker_count=0",
        "loader_w0_read0": "the same with ReadOptions(num_threads=0) (diagnostic)",
        f"loader_w{w}": f"course_lib.load, worker_count={w}",
        f"loader_w{w}_prefetch": f"course_lib.load, worker_count={w}, + prefetch_to_device",
    }
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="train_loop_") as tmp:
        folder, mean, std = write_digit_pngs(Path(tmp), options.image_size)
        source = grain.ImageFolderDataSource(folder)
        size_kb = sum(p.stat().st_size for p in folder.glob("*.png")) / 1024
        print(f"{len(source)} PNG files of {options.image_size}x{options.image_size} "
              f"({size_kb:.0f} KiB) in {time.perf_counter() - start:.1f} s; {cores} cores.")
        runs = []
        for name in descriptions:
            run = train(name, lambda name=name: feed(name, source, options, mean, std),
                        options.steps, setup["in_features"])
            runs.append(run)
            print(f"\n{name} (total {run.total_s:.1f} s, first batch "
                  f"{run.first_batch_s:.2f} s)\n{run.profiler.summary()}")
    setup["load_after"] = os.getloadavg()[0]
    timeline = out / TIMELINE_PNG
    plot(runs, timeline)
    elapsed = time.perf_counter() - start
    print("\n" + "\n".join(table(runs, descriptions)) + "\n\n" + "\n".join(checks(runs)))
    write_markdown(out / RESULTS_MD, runs, options, descriptions, setup, timeline.name,
                   elapsed)
    print(f"\nWrote {out / RESULTS_MD} and {timeline} ({elapsed:.0f} s in all).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
