"""Train a small byte-level language model with N JAX processes; resume exactly after a crash.

Everything the course built, in one script you can read top to bottom and run:

    python -m course_lib.launch -n 2 course_lib/scripts/train_lm.py --data DIR --out RUN --steps 60

- the data is one Dataset chain (Grain's Dataset API, on course_lib): two corpora, each
  in its own ArrayRecord shards read through one `ArrayRecordDataSource` (lesson 9); each
  process takes every `process_count`-th record of each (lesson 5), shuffles them with a
  seed of their own (one per process and corpus, from `--seed`) and repeats them
  endlessly; `MapDataset.mix` interleaves the two at `--mix` (lesson 13);
  `FirstFitPackIterDataset` packs the byte strings into rows of one length with segment ids
  and positions (lesson 10), so the step has one shape, and `.batch` stacks the rows;
  `--workers` reads and decodes in worker processes (`mp_prefetch`, lesson 4) without
  changing a batch;
- each process's packed local batch becomes one global `jax.Array` (`make_global_batch`,
  lesson 5) and a jitted step, guarded by `chex.assert_max_traces(n=1)`, trains the decoder
  of `course_lib.language_model` on it (lesson 6: it must never compile twice);
- `StepProfiler` times each step's wait for data and its compute (lessons 1 and 7);
- every `--checkpoint-every` steps one Orbax checkpoint stores the model, the optimizer and
  every process's data position (lesson 8); started again with the same `--out`, the script
  resumes from the latest one.

Rank 0 writes one JSON line per step to `RUN/steps.jsonl`: the loss, the real tokens,
checksums of the global batch's tokens, segment ids and positions, and of each process's
rows of it. Every rank writes `RUN/rank<r>.json` at the end: its timings (the waits for
data, the steps and the checkpoint saves), the checksums of its own local batches, the
shapes of its local and of the global batch, its trace count and a fingerprint of the final
weights and optimizer state. `--kill-rank R --kill-at-step S` makes rank R send itself
SIGKILL right after step S, as an out-of-memory kill or a lost machine would.
`--ignore-data-position` resumes the weights and the optimizer but not the data position:
the broken resume a proof of exactness must catch.

On a cluster the same script runs under the scheduler instead of the course's launcher
(`srun python -m course_lib.scripts.train_lm ...`): `initialize_from_env` finds the
cluster. Started by neither, it refuses to run unless `--single-process` says that one
process alone is meant. `--data` and `--out` are local paths (a shared file system on a
cluster): the script reads and writes them through `pathlib`, so a URL such as `gs://...`
is refused.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import numpy as np

from course_lib.transforms import MapTransform


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="folder of *.array_record shards")
    parser.add_argument("--out", required=True, help="folder for checkpoints and logs")
    parser.add_argument("--steps", type=int, default=60, help="steps in the whole run")
    parser.add_argument("--batch-size", type=int, default=8, help="rows per process and step")
    parser.add_argument("--row-length", type=int, default=128, help="bytes per packed row")
    parser.add_argument("--features", type=int, default=64, help="the model's width")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between saves")
    parser.add_argument("--seed", type=int, default=0, help="weights and shuffle")
    parser.add_argument("--mix", type=float, default=0.7,
                        help="weight of the docstrings (the code's: 1 - mix); the mix turns "
                        "the two into whole numbers, the smallest scaled to 100, truncated")
    parser.add_argument("--workers", type=int, default=0,
                        help="worker processes reading and decoding records (mp_prefetch)")
    parser.add_argument("--kill-rank", type=int, default=None, help="rank that dies")
    parser.add_argument("--kill-at-step", type=int, default=None, help="...after this step")
    parser.add_argument("--ignore-data-position", action="store_true",
                        help="resume weights and optimizer only (a broken resume, on purpose)")
    parser.add_argument("--single-process", action="store_true",
                        help="allow running alone, without the launcher or a scheduler")
    args = parser.parse_args(argv)
    for name in ("data", "out"):
        if "://" in getattr(args, name):
            parser.error(f"--{name}={getattr(args, name)!r} is a URL; this script reads and "
                         "writes local or shared file systems only (through pathlib). Copy "
                         "the data to a shared file system, or mount the bucket (e.g. with "
                         "gcsfuse), and pass that path.")
    for name in ("steps", "batch_size", "row_length", "features", "checkpoint_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}={getattr(args, name)} must be >= 1.")
    if not 0 < args.mix < 1:
        parser.error(f"--mix={args.mix} must be between 0 and 1 (exclusive): the share of "
                     "records from the docstrings, e.g. 0.7; both corpora are mixed.")
    if args.workers < 0:
        parser.error(f"--workers={args.workers} must be >= 0 (0: read in this process).")
    if (args.kill_rank is None) != (args.kill_at_step is None):
        parser.error("pass --kill-rank and --kill-at-step together, or neither.")
    return args


CORPORA = ("docstrings", "code")  # file prefixes in --data, in the order of --mix's weights


class ByteTokens(MapTransform):
    """A record is UTF-8 text as bytes; the model reads it as int32 byte tokens. Each token
    also carries the number of its corpus (1, 2), packed beside it, so that every batch
    says what it holds."""

    def __init__(self, corpus: int):
        self.corpus = corpus

    def map(self, record: bytes) -> dict[str, np.ndarray]:
        tokens = np.frombuffer(record, np.uint8).astype(np.int32)
        return {"tokens": tokens, "corpus": np.full(len(tokens), self.corpus, np.int32)}


def shuffle_seed(seed: int, process_index: int, corpus: int) -> int:
    """The shuffle seed of one corpus in one process, derived from the run's `--seed`. Each
    component of the mix gets its own, as Grain's tests advise: one seed would shuffle two
    corpora of equal length alike."""
    return int(np.random.SeedSequence([seed, process_index, corpus]).generate_state(1)[0])


def make_dataset(data: Path, args: argparse.Namespace, process_index: int | None = None,
                 process_count: int | None = None):
    """Source, shard by process, shuffle and repeat, for each corpus; mix; pack; batch."""
    import jax

    import course_lib as grain
    from course_lib.array_record import ArrayRecordDataSource
    from course_lib.experimental import FirstFitPackIterDataset

    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
    corpora = []
    for number, name in enumerate(CORPORA, start=1):
        paths = sorted(data.glob(f"{name}-*.array_record"))
        if not paths:
            raise FileNotFoundError(f"--data={str(data)!r} holds no {name}-*.array_record "
                                    "files.")
        corpora.append(grain.MapDataset.source(ArrayRecordDataSource(paths))
                       [process_index::process_count]  # this process's records
                       .shuffle(seed=shuffle_seed(args.seed, process_index, number))
                       .repeat()  # endless: the mix never runs out, every rank runs --steps
                       .map(ByteTokens(number)))
    mixed = grain.MapDataset.mix(corpora, weights=[args.mix, 1 - args.mix])
    stream = mixed.to_iter_dataset()
    if args.workers:
        stream = stream.mp_prefetch(grain.MultiprocessingOptions(num_workers=args.workers))
    # No truncation: the corpora are cut into pieces of at most --row-length bytes when they
    # are written, so a longer record means data cut for another row length, and the
    # packer stops with an error naming it instead of silently dropping its tail.
    rows = FirstFitPackIterDataset(
        stream, length_struct={"tokens": args.row_length, "corpus": args.row_length},
        num_packing_bins=args.batch_size, seed=args.seed)
    return rows.batch(args.batch_size, drop_remainder=True)


def mixture(batch: dict[str, np.ndarray]) -> list[int]:
    """What a packed batch holds: records of corpus 1, of corpus 2, then their tokens."""
    starts = (batch["tokens_positions"] == 0) & (batch["corpus"] > 0)
    return [int(np.sum(starts & (batch["corpus"] == number))) for number in (1, 2)] + [
        int(np.sum(batch["corpus"] == number)) for number in (1, 2)]


def resume(manager, model, optimizer, iterator, args: argparse.Namespace) -> int:
    """Restore the latest checkpoint, if there is one, into the model, the optimizer and the
    data iterator; return the step it was saved after (0: start from scratch)."""
    from course_lib.checkpoint import restore_training

    if manager.latest_step() is None:
        return 0
    if not args.ignore_data_position:
        return restore_training(manager, model, optimizer, iterator)
    elsewhere = iter(make_dataset(Path(args.data), args))  # the broken resume: the data
    try:                                                  # position goes to an unused copy
        return restore_training(manager, model, optimizer, elsewhere)
    finally:
        elsewhere.close()


def fingerprint(*parts) -> str:
    """SHA-256 of every array of the given nnx objects' state, bit for bit."""
    import hashlib

    import jax
    from flax import nnx

    digest = hashlib.sha256()
    for part in parts:
        for leaf in jax.tree.leaves(nnx.state(part)):
            local = leaf.addressable_data(0) if isinstance(leaf, jax.Array) else leaf
            digest.update(np.ascontiguousarray(np.asarray(local)).tobytes())
    return digest.hexdigest()


def replicate(tree, sharding):
    """The same host values on every device of every process, as global arrays."""
    import jax

    def one(leaf):
        host = np.asarray(leaf)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(one, tree)


def main(argv=None) -> None:
    args = parse_args(argv)
    from course_lib.launch import initialize_from_env

    # The launcher or a cluster; one process alone only when --single-process asks for it.
    try:
        info = initialize_from_env(required=not args.single_process)
    except RuntimeError as error:
        hint = "" if args.single_process else (" For this script: pass --single-process to "
                                               "train with one process alone.")
        raise RuntimeError(f"{error}{hint}") from error

    import chex
    import jax
    import jax.numpy as jnp
    import orbax.checkpoint as ocp
    from flax import nnx

    from course_lib import language_model
    from course_lib.checkpoint import save_training  # registers the data position's handler
    from course_lib.device import data_parallel_mesh, make_global_batch, replicated_sharding
    from course_lib.profiling import StepProfiler

    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    mesh = data_parallel_mesh()
    model, optimizer = language_model.create_training(args.row_length, seed=args.seed,
                                                      features=args.features)
    for part in (model, optimizer):  # every process starts from the same weights
        nnx.update(part, replicate(nnx.state(part), replicated_sharding(mesh)))

    traces = []

    def counted_step(model, optimizer, tokens, segment_ids, positions):
        traces.append(len(traces) + 1)  # runs only while tracing
        metrics = language_model.train_step(model, optimizer, tokens, segment_ids, positions)
        checksum = language_model.batch_checksum
        rows_of_each_process = jnp.split(tokens, info.num_processes)  # in the mesh's order
        return {**metrics, "segment_checksum": checksum(segment_ids),
                "position_checksum": checksum(positions),
                "process_checksums": jnp.stack([checksum(rows)
                                                for rows in rows_of_each_process])}

    chex.clear_trace_counter()
    step_fn = nnx.jit(chex.assert_max_traces(counted_step, n=1))

    # Keep the latest 2 checkpoints. Orbax 0.12.8 keeps every one by default, and marks
    # max_to_keep deprecated in favour of preservation_policy (lesson 8).
    options = ocp.CheckpointManagerOptions(
        preservation_policy=ocp.checkpoint_managers.LatestN(2), create=True)
    manager = ocp.CheckpointManager(out / "checkpoints", options=options)
    iterator = iter(make_dataset(Path(args.data), args))
    start_step = resume(manager, model, optimizer, iterator, args)
    if start_step:
        print(f"rank {info.process_id}: resumed from the checkpoint of step {start_step}",
              flush=True)
    profiler = StepProfiler(warmup_steps=1)
    log = (out / "steps.jsonl").open("a") if info.process_id == 0 else None
    started = time.perf_counter()
    step = start_step
    local_checksums, save_spans, shapes, mixtures = [], [], {}, []
    try:
        for local in profiler.wrap(iterator, args.steps - start_step):
            tokens, segment_ids, positions = (local["tokens"], local["tokens_segment_ids"],
                                              local["tokens_positions"])
            with profiler.step():
                batch = make_global_batch((tokens, segment_ids, positions), mesh)
                metrics = profiler.sync(step_fn(model, optimizer, *batch))
            step += 1
            shapes = {"local_shape": list(tokens.shape), "global_shape": list(batch[0].shape)}
            local_checksums.append(int(language_model.batch_checksum(jnp.asarray(tokens))))
            mixtures.append(mixture(local))
            if log is not None:
                record = {"step": step, "loss": float(metrics["loss"]),
                          "real_tokens": int(metrics["real_tokens"]),
                          "checksum": int(metrics["checksum"]),
                          "segment_checksum": int(metrics["segment_checksum"]),
                          "position_checksum": int(metrics["position_checksum"]),
                          "process_checksums": [int(c) for c in metrics["process_checksums"]],
                          "time": time.time()}
                log.write(json.dumps(record) + "\n")
                log.flush()
            if step % args.checkpoint_every == 0:
                save_started = profiler.now()  # the profiler's clock, for the timeline
                save_training(manager, step, model, optimizer, iterator)
                save_spans.append((step, save_started, profiler.now()))
            if info.process_id == args.kill_rank and step == args.kill_at_step:
                print(f"rank {info.process_id}: killing itself with SIGKILL after step "
                      f"{step}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
    finally:
        if log is not None:
            log.close()
        iterator.close()
        manager.close()
    report = {"rank": info.process_id, "processes": info.num_processes,
              "start_step": start_step, "steps": step, "traces": len(traces),
              "seconds": time.perf_counter() - started,
              "idle_share": profiler.idle_fraction if profiler.num_steps else None,
              "wait_spans": profiler.wait_spans.tolist(),
              "step_spans": profiler.step_spans.tolist(),
              "save_spans": save_spans, "local_checksums": local_checksums, **shapes,
              "mixture": mixtures, "mix": args.mix,
              "devices": jax.device_count(), "local_rows": args.batch_size,
              "fingerprint": fingerprint(model, optimizer)}
    (out / f"rank{info.process_id}.json").write_text(json.dumps(report))
    traced = "once" if len(traces) == 1 else f"{len(traces)} times"
    print(f"rank {info.process_id}: steps {start_step + 1}..{step} done, traced {traced}, "
          f"idle {100 * (report['idle_share'] or 0):.0f}%", flush=True)


if __name__ == "__main__":
    main()
