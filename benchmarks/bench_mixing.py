"""Mixing two data sets at 70/30: course_lib's Dataset API against Grain's, decode-bound.

Two folders of PNG files (the digits upscaled to 64x64, written twice: `a` and `b`, each
record tagged with its folder, each repeated 4 times so that a run lasts seconds), mixed
with `MapDataset.mix([a, b], weights=[0.7, 0.3])`, then per record: decode with Pillow
and scale to floats; batches of 32, one pass over the mixture. The chain is written once
and run with `import course_lib as grain` (`course_lib_mix_w{0,2}`) and with Grain 0.2.18
(`grain_mix_w{0,2}`), `mp_prefetch(MultiprocessingOptions(num_workers=2))` for workers;
`course_lib_one_w{0,2}` reads folder `a` alone through the same steps, to show what the
mix itself costs. Every run is a fresh process, rounds interleaved; records/s count
delivered records over the time from building the iterator to the last batch (start-up
included), and the share of folder `a` in what was delivered is printed beside it.

    .venv/bin/python benchmarks/bench_mixing.py            # 3 rounds
    .venv/bin/python benchmarks/bench_mixing.py --quick    # 1 round
    .venv/bin/python benchmarks/bench_mixing.py --append   # also replace the mixing
                                                           # section of RESULTS.md
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SECTION = "## Mixing two data sets (70/30, decode-bound)"
SIDE, BATCH_SIZE, WEIGHTS, EPOCHS = 64, 32, (0.7, 0.3), 4
FULL_REPEATS, QUICK_REPEATS = 3, 1
TARGET_RATIO = 1.0  # course_lib's mix at least as fast as Grain's at the same worker count
CONFIGS = [f"{name}_w{workers}" for workers in (0, 2)
           for name in ("course_lib_mix", "course_lib_one", "grain_mix")]


class TaggedPngs:
    """The PNG files of one folder; each record says which folder it came from."""

    def __init__(self, folder: str, tag: int):
        self.files = sorted(str(path) for path in Path(folder).glob("*.png"))
        self.tag = tag

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, record_key: int) -> dict:
        with open(self.files[record_key], "rb") as file:
            return {"png": file.read(), "folder": self.tag}


def decode(record: dict) -> dict:
    from PIL import Image

    with Image.open(io.BytesIO(record["png"])) as picture:
        pixels = np.asarray(picture, dtype=np.float32) * np.float32(1 / 255)
    return {"image": pixels, "folder": np.int32(record["folder"])}


def _folders() -> tuple[str, str]:
    from course_lib import course

    work = HERE / "_work"
    first = course.digit_images_on_disk(SIDE, work / f"mix_a_{SIDE}px")
    second = course.digit_images_on_disk(SIDE, work / f"mix_b_{SIDE}px")
    return str(first), str(second)


def batches(name: str):
    """The chain, written once; `name` picks the library, the mix and the workers."""
    if name.startswith("grain"):
        from absl import flags

        if not flags.FLAGS.is_parsed():
            flags.FLAGS.mark_as_parsed()  # Grain's workers read absl flags
        import grain
    else:
        import course_lib as grain
    workers = int(name.rsplit("_w", 1)[1])
    first, second = _folders()
    a = grain.MapDataset.source(TaggedPngs(first, 0)).repeat(EPOCHS)
    b = grain.MapDataset.source(TaggedPngs(second, 1)).repeat(EPOCHS)
    mixed = a if "_one_" in name else grain.MapDataset.mix([a, b], weights=list(WEIGHTS))
    dataset = (mixed.map(decode).batch(BATCH_SIZE, drop_remainder=True)
               .to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=128)))
    if workers:
        dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return iter(dataset)


def run_child(name: str) -> dict:
    import jax  # noqa: F401  - every configuration imports jax first, as elsewhere

    _folders()  # written before the clock starts
    started = time.perf_counter()
    iterator = batches(name)
    records = from_a = 0
    first_batch_s = None
    for batch in iterator:
        if first_batch_s is None:
            first_batch_s = time.perf_counter() - started
        records += len(batch["folder"])
        from_a += int(np.count_nonzero(np.asarray(batch["folder"]) == 0))
    seconds = time.perf_counter() - started
    close = getattr(iterator, "close", None)
    if close is not None:
        close()
    return {"name": name, "records": records, "seconds": seconds,
            "records_per_s": records / seconds, "first_batch_s": first_batch_s,
            "share_a": from_a / records}


def _spawn(name: str, timeout: float) -> dict:
    from bench_common import run_in_fresh_process

    return run_in_fresh_process(__file__, ["--child", name], name, timeout, HERE.parent)


def summarize(runs: list[dict]) -> dict:
    ok = [run for run in runs if "error" not in run]
    if not ok:
        return {"error": runs[0]["error"] if runs else "not run"}
    rates = [run["records_per_s"] for run in ok]
    return {"rate": statistics.median(rates), "rate_min": min(rates), "rate_max": max(rates),
            "first_batch_s": statistics.median(run["first_batch_s"] for run in ok),
            "records": ok[0]["records"], "share_a": ok[0]["share_a"], "runs_ok": len(ok)}


def targets(summaries: dict[str, dict]) -> list[dict]:
    rows = []
    for workers in (0, 2):
        ours = summaries.get(f"course_lib_mix_w{workers}", {}).get("rate")
        theirs = summaries.get(f"grain_mix_w{workers}", {}).get("rate")
        one = summaries.get(f"course_lib_one_w{workers}", {}).get("rate")
        if ours and theirs:
            rows.append({"label": f"course_lib_mix_w{workers} / grain_mix_w{workers}",
                         "ratio": ours / theirs, "met": ours / theirs >= TARGET_RATIO})
        if ours and one:
            rows.append({"label": f"course_lib_mix_w{workers} / course_lib_one_w{workers} "
                         "(the cost of mixing)", "ratio": ours / one, "met": None})
    return rows


def render(summaries: dict[str, dict], rows: list[dict], meta: dict) -> str:
    lines = [SECTION, "",
             f"Written by `benchmarks/bench_mixing.py` ({meta['mode']}: {meta['repeats']} "
             f"round(s), each run a fresh process, rounds interleaved; {meta['cores']} cores, "
             f"load average {meta['load_start']:.1f} at start and {meta['load_end']:.1f} at "
             f"the end; whole run {meta['seconds']:.0f} s). Two folders of {SIDE}x{SIDE} PNG "
             f"files mixed {WEIGHTS[0]:.0%} / {WEIGHTS[1]:.0%} with `MapDataset.mix`, Pillow "
             f"decode and scale per record, batches of {BATCH_SIZE}, one pass over the "
             f"mixture of the folders repeated {EPOCHS} times; `ReadOptions(num_threads=2, "
             "prefetch_buffer_size=128)`. Records/s from building the iterator to the last "
             "batch (start-up included).", "",
             "| configuration | records/s (median) | min | max | first batch (s) | records "
             "| share of folder a |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, summary in summaries.items():
        if "error" in summary:
            lines.append(f"| {name} | failed: {summary['error'][:90]} | | | | | |")
            continue
        lines.append(f"| {name} | {summary['rate']:,.0f} | {summary['rate_min']:,.0f} | "
                     f"{summary['rate_max']:,.0f} | {summary['first_batch_s']:.2f} | "
                     f"{summary['records']:,} | {summary['share_a']:.1%} |")
    lines += ["", f"Target: course_lib's mix at least {TARGET_RATIO:.1f}x Grain's at the same "
              "worker count; the cost of mixing is shown, with no target.", "",
              "| ratio | value | met |", "| --- | ---: | --- |"]
    for row in rows:
        met = "-" if row["met"] is None else ("yes" if row["met"] else "NO")
        lines.append(f"| {row['label']} | {row['ratio']:.2f}x | {met} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--append", action="store_true",
                        help="replace the mixing section of benchmarks/RESULTS.md")
    parser.add_argument("--child")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args.child)))
        return
    from bench_common import replace_section

    repeats = QUICK_REPEATS if args.quick else FULL_REPEATS
    _folders()
    started, load_start = time.perf_counter(), os.getloadavg()[0]
    results: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    for round_index in range(repeats):
        for name in CONFIGS:
            result = _spawn(name, args.timeout)
            results[name].append(result)
            shown = (f"{result['records_per_s']:,.0f} records/s, first batch "
                     f"{result['first_batch_s']:.2f} s, folder a {result['share_a']:.1%}"
                     if "error" not in result else f"failed: {result['error']}")
            print(f"round {round_index + 1}/{repeats} {name}: {shown}", flush=True)
    meta = {"mode": "quick" if args.quick else "full", "repeats": repeats,
            "cores": os.cpu_count(), "load_start": load_start, "load_end": os.getloadavg()[0],
            "seconds": time.perf_counter() - started}
    summaries = {name: summarize(runs) for name, runs in results.items()}
    text = render(summaries, targets(summaries), meta)
    print("\n" + text)
    if args.append:
        replace_section(text, HERE / "RESULTS.md", SECTION)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    main()
