"""Packed tokens per second and fill: course_lib's PackAndBatchOperation against Grain's.

The sequences are lesson 10's: the docstrings of the installed Python's standard library of
at most 128 bytes, as byte tokens, put once in a fixed shuffled order that every loader
reads in order (first fit's fill depends on the order), several epochs in one stream. Each
configuration packs them into rows of 128, batches of 8, first fit:

- `course_lib_pack_w{0,2}`: course_lib's `DataLoader` with
  `experimental.PackAndBatchOperation(128, 8)` last;
- `course_lib_firstfit_w{0,2}`: the `grain_firstfit` chain below with `import course_lib
  as grain` (course_lib packs in the main process, on the elements its workers make, so
  the packed rows do not change with the worker count);
- `grain_pack_w{0,2}`: Grain 0.2.18's legacy `DataLoader` with its
  `experimental.PackAndBatchOperation(128, 8)` last;
- `grain_firstfit_w{0,2}`: Grain's Dataset API, `MapDataset.source().repeat()
  .to_iter_dataset()`, `experimental.FirstFitPackIterDataset(length_struct={"tokens": 128},
  num_packing_bins=8, shuffle_bins=False)`, `.batch(8)`, and for workers `mp_prefetch`
  (the packer then runs in each worker, on its share of the records).

Each repetition of each configuration runs in a fresh process, repetitions interleaved
(round 1 of all, then round 2), as in run_benchmarks.py. A run reads the sequences first,
then starts the clock, and counts the real tokens (segment id > 0) it receives: tokens/s
is real tokens over the time from building the loader to the last batch, fill is real
tokens over the slots of the rows in use (a row with at least one token). The
targets: at each worker count, course_lib's tokens/s and fill at least those of both Grain
configurations.

    .venv/bin/python benchmarks/bench_packing.py            # 3 rounds, 2 epochs each
    .venv/bin/python benchmarks/bench_packing.py --quick    # 2 rounds, 1 epoch
    .venv/bin/python benchmarks/bench_packing.py --append   # also replace the packing
                                                            # section of RESULTS.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_common import replace_section

HERE = Path(__file__).resolve().parent
ROW_LENGTH, BATCH_SIZE, SEED = 128, 8, 0
FULL_EPOCHS, QUICK_EPOCHS = 2, 1
FULL_REPEATS, QUICK_REPEATS = 3, 2
SECTION = "## Packing variable-length sequences"


@dataclasses.dataclass(frozen=True)
class PackConfig:
    name: str
    family: str  # course_lib | grain
    api: str  # loader | dataset
    worker_count: int


CONFIGS = [PackConfig(f"{family}_{kind}_w{workers}", family, api, workers)
           for workers in (0, 2)
           for family, kind, api in (("course_lib", "pack", "loader"),
                                     ("course_lib", "firstfit", "dataset"),
                                     ("grain", "pack", "loader"),
                                     ("grain", "firstfit", "dataset"))]


def _sequences():
    """The sequences in one fixed shuffled order, which every loader then reads in order:
    first fit's fill depends on the order, so all of them see the same one."""
    import numpy as np

    from course_lib.course.variable_length import SequenceSource, docstring_sequences

    sequences = docstring_sequences(ROW_LENGTH)
    order = np.random.default_rng(SEED).permutation(len(sequences))
    return SequenceSource([sequences[index] for index in order])


def _course_lib_batches(config: PackConfig, epochs: int, source):
    import course_lib as grain

    if config.api == "dataset":  # grain_firstfit's chain, with the import changed
        dataset = (grain.MapDataset.source(source).repeat(epochs)
                   .map(lambda tokens: {"tokens": tokens}))
        packed = grain.experimental.FirstFitPackIterDataset(
            dataset.to_iter_dataset(grain.ReadOptions(num_threads=0)),
            length_struct={"tokens": ROW_LENGTH}, num_packing_bins=BATCH_SIZE,
            shuffle_bins=False)
        batched = packed.batch(BATCH_SIZE)
        if config.worker_count:
            batched = batched.mp_prefetch(grain.MultiprocessingOptions(
                num_workers=config.worker_count))
        with iter(batched) as iterator:
            for batch in iterator:
                yield batch["tokens_segment_ids"]
        return
    loader = grain.DataLoader(
        data_source=source, worker_count=config.worker_count,
        sampler=grain.IndexSampler(len(source), num_epochs=epochs),
        operations=[grain.experimental.PackAndBatchOperation(ROW_LENGTH, BATCH_SIZE)])
    with iter(loader) as iterator:
        for _, segment_ids, _ in iterator:
            yield segment_ids


class _GrainSource:
    """A Grain data source over the sequences (its repr is what Grain checks in a state)."""

    def __init__(self, source):
        self.source = source

    def __len__(self):
        return len(self.source)

    def __getitem__(self, record_key):
        return self.source[record_key]

    def __repr__(self):
        return repr(self.source)


def _grain_batches(config: PackConfig, epochs: int, source):
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()  # Grain's workers read absl flags
    source = _GrainSource(source)
    if config.api == "loader":
        import grain.python as pygrain

        loader = pygrain.DataLoader(
            data_source=source, worker_count=config.worker_count,
            sampler=pygrain.IndexSampler(len(source), shard_options=pygrain.NoSharding(),
                                         shuffle=False, num_epochs=epochs, seed=SEED),
            operations=[pygrain.experimental.PackAndBatchOperation(ROW_LENGTH, BATCH_SIZE)])
        for _, segment_ids, _ in loader:
            yield segment_ids
        return
    import grain

    dataset = (grain.MapDataset.source(source).repeat(epochs)
               .map(lambda tokens: {"tokens": tokens}))
    packed = grain.experimental.FirstFitPackIterDataset(
        dataset.to_iter_dataset(grain.ReadOptions(num_threads=0)),
        length_struct={"tokens": ROW_LENGTH}, num_packing_bins=BATCH_SIZE, shuffle_bins=False)
    batched = packed.batch(BATCH_SIZE)
    if config.worker_count:
        batched = batched.mp_prefetch(grain.MultiprocessingOptions(
            num_workers=config.worker_count))
    for batch in batched:
        yield batch["tokens_segment_ids"]


def run_child(name: str, epochs: int) -> dict:
    import jax  # noqa: F401  - every configuration imports jax first, as in run_benchmarks.py
    import numpy as np

    config = next(config for config in CONFIGS if config.name == name)
    batches = _course_lib_batches if config.family == "course_lib" else _grain_batches
    source = _sequences()  # read before the clock starts
    tokens = slots = used_slots = count = 0
    shapes = set()
    start = time.perf_counter()
    for segment_ids in batches(config, epochs, source):
        segment_ids = np.asarray(segment_ids)
        tokens += int(np.count_nonzero(segment_ids))
        slots += segment_ids.size
        used_slots += int(np.count_nonzero(segment_ids.any(axis=-1))) * segment_ids.shape[-1]
        shapes.add(segment_ids.shape)
        count += 1
    seconds = time.perf_counter() - start
    return {"config": name, "tokens": tokens, "slots": slots, "batches": count,
            "seconds": seconds, "tokens_per_s": tokens / seconds, "fill": tokens / used_slots,
            "fill_all_slots": tokens / slots, "shapes": sorted(map(list, shapes)),
            "sequences": len(source)}


def _spawn(name: str, epochs: int, timeout: float) -> dict:
    result = subprocess.run([sys.executable, __file__, "--child", name, "--epochs", str(epochs)],
                            capture_output=True, text=True, timeout=timeout, cwd=HERE.parent)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no error output"])[-1]
        return {"config": name, "error": last}
    return json.loads(result.stdout.strip().splitlines()[-1])


def summarize(runs: list[dict]) -> dict:
    ok = [run for run in runs if "error" not in run]
    if not ok:
        return {"error": runs[0]["error"]}
    rates = [run["tokens_per_s"] for run in ok]
    return {"tokens_per_s_median": statistics.median(rates), "tokens_per_s_min": min(rates),
            "tokens_per_s_max": max(rates), "fill": statistics.median(r["fill"] for r in ok),
            "fill_all_slots": statistics.median(r["fill_all_slots"] for r in ok),
            "sequences": ok[0]["sequences"],
            "batches": ok[0]["batches"], "tokens": ok[0]["tokens"], "runs_ok": len(ok),
            "shapes": ok[0]["shapes"]}


def targets(summaries: dict) -> list[dict]:
    """course_lib against each Grain configuration at the same worker count."""
    rows = []
    pairs = [(f"course_lib_pack_w{workers}", theirs)
             for workers in (0, 2)
             for theirs in (f"grain_pack_w{workers}", f"grain_firstfit_w{workers}")]
    pairs += [(f"course_lib_firstfit_w{workers}", f"grain_firstfit_w{workers}")
              for workers in (0, 2)]
    for ours_name, theirs_name in pairs:
        ours, theirs = summaries.get(ours_name, {}), summaries.get(theirs_name, {})
        for key, what in (("tokens_per_s_median", "tokens/s"), ("fill", "fill")):
            if key in ours and key in theirs:
                ratio = ours[key] / theirs[key]
                rows.append({"label": f"{ours_name} / {theirs_name}, {what}",
                             "ratio": ratio, "target": 1.0, "met": ratio >= 1.0})
    return rows


def render(summaries: dict, rows: list[dict], meta: dict) -> str:
    lines = [SECTION, "",
             f"Written by `benchmarks/bench_packing.py` ({meta['mode']}: {meta['repeats']} "
             f"rounds, {meta['epochs']} epoch(s) of {meta['sequences']} stdlib docstrings per "
             f"run, rows of {ROW_LENGTH}, batches of {BATCH_SIZE}; {meta['cores']} cores, load "
             f"average {meta['load'][0]:.1f} at start, Python {meta['python']}). Tokens/s counts "
             "real tokens only, from building the iterator to the last batch.", "",
             "Fill is real tokens over the slots of the rows in use; a final batch's empty "
             "rows (course_lib's last batch keeps its 8 rows, Grain's Dataset API hands out a "
             "shorter one) count only in the last column.", "",
             "| configuration | real tokens/s (median) | min | max | fill | batches | fill of "
             "all slots |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for config in CONFIGS:
        summary = summaries[config.name]
        if "error" in summary:
            lines.append(f"| {config.name} | failed: {summary['error'][:80]} | | | | | |")
            continue
        lines.append(f"| {config.name} | {summary['tokens_per_s_median']:,.0f} | "
                     f"{summary['tokens_per_s_min']:,.0f} | {summary['tokens_per_s_max']:,.0f} "
                     f"| {summary['fill']:.1%} | {summary['batches']} | "
                     f"{summary['fill_all_slots']:.1%} |")
    lines += ["", "| target | ratio | target | met |", "| --- | ---: | ---: | --- |"]
    lines += [f"| {row['label']} | {row['ratio']:.2f} | ≥ {row['target']:.1f} | "
              f"{'yes' if row['met'] else 'NO'} |" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--append", action="store_true",
                        help="replace the packing section of benchmarks/RESULTS.md")
    parser.add_argument("--child")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args.child, args.epochs)))
        return
    epochs = args.epochs or (QUICK_EPOCHS if args.quick else FULL_EPOCHS)
    repeats = QUICK_REPEATS if args.quick else FULL_REPEATS
    meta = {"mode": "quick" if args.quick else "full", "repeats": repeats, "epochs": epochs,
            "cores": os.cpu_count(), "load": os.getloadavg(),
            "python": sys.version.split()[0], "sequences": None}
    runs: dict[str, list[dict]] = {config.name: [] for config in CONFIGS}
    for round_index in range(repeats):
        for config in CONFIGS:
            result = _spawn(config.name, epochs, args.timeout)
            runs[config.name].append(result)
            shown = (f"{result['tokens_per_s']:,.0f} tokens/s, fill {result['fill']:.1%}"
                     if "error" not in result else f"failed: {result['error']}")
            print(f"round {round_index + 1}/{repeats} {config.name}: {shown}", flush=True)
    summaries = {name: summarize(config_runs) for name, config_runs in runs.items()}
    meta["sequences"] = next((summary["sequences"] for summary in summaries.values()
                              if "sequences" in summary), None)
    rows = targets(summaries)
    text = render(summaries, rows, meta)
    print("\n" + text)
    work = HERE / "_work"
    work.mkdir(exist_ok=True)
    (work / "packing.json").write_text(json.dumps({"meta": meta, "summaries": summaries,
                                                   "targets": rows, "runs": runs}, indent=1))
    if args.append:
        replace_section(text, HERE / "RESULTS.md", SECTION)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    main()
