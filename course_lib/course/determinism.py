"""Lesson 3, determinism: per-record streams, seed collisions and the Feistel shuffle,
measured and drawn, and the sentences that read those measurements.

Every sentence below is decided by the numbers it is given, with one wording per outcome
(better, worse, or within the noise of the repetitions), so that a rerun on another machine,
or on a busy one, never prints a conclusion its own numbers contradict."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from course_lib.course.basics import (
    NOISY_EXPLANATION,
    TOO_NOISY_TO_TELL,
    Comparison,
    _axes,
    compare_runs,
    format_duration,
    format_times,
    round_significant,
)


def first_draws(sampler: Any, count: int) -> np.ndarray:
    """The first 63-bit integer each of the `count` first records' generators draws.

    Two records whose generators give the same first draw share their whole stream, so
    these numbers fingerprint the streams. Works with any sampler whose `[index]` has an
    `.rng` (course_lib's and Grain's `IndexSampler`).
    """
    return np.array([sampler[index].rng.integers(0, 2**63 - 1) for index in range(count)],
                    dtype=np.int64)


def shared_stream_count(sampler_a: Any, sampler_b: Any, count: int) -> int:
    """How many of `sampler_b`'s first `count` record streams also occur among
    `sampler_a`'s first `count` (0 when no stream of one seed is one of the other's)."""
    return int(np.isin(first_draws(sampler_b, count), first_draws(sampler_a, count)).sum())


def shared_stream_offsets(sampler_a: Any, sampler_b: Any, count: int) -> dict[int, int]:
    """Where the shared streams of `shared_stream_count` sit: {offset: how many}, the offset
    being the stream's position under `sampler_a` minus its position under `sampler_b`.

    Under Grain's `seed + index`, seed 8 at position p has seed 7's stream at p + 1, so every
    shared stream has the offset 1; an empty dict means no stream is shared."""
    draws_a = first_draws(sampler_a, count)
    where_a = {int(draw): position for position, draw in enumerate(draws_a)}
    offsets: dict[int, int] = {}
    for position, draw in enumerate(first_draws(sampler_b, count)):
        if int(draw) in where_a:
            offset = where_a[int(draw)] - position
            offsets[offset] = offsets.get(offset, 0) + 1
    return dict(sorted(offsets.items()))


def position_in_counter_word(word: int) -> Callable[[int, int], np.random.Generator]:
    """A record generator built like `record_rng` (Philox, its key hashed from the seed) but
    with the position in counter word `word` and the other three words 0.

    NumPy's Philox counter is four 64-bit words, word 0 the lowest: it goes up by one for
    every four 64-bit outputs. Word 2 is where course_lib puts the position, so
    `position_in_counter_word(2)(seed, p)` draws what `record_rng(seed, p)` draws; word 0
    is "the counter is the position", whose records run into each other's streams."""
    if word not in range(4):
        raise ValueError(f"word={word}: Philox's counter has the words 0, 1, 2 and 3.")

    def make_rng(seed: int, position: int) -> np.random.Generator:
        counter = np.zeros(4, dtype=np.uint64)
        counter[word] = position
        key = np.random.SeedSequence(seed).generate_state(2, np.uint64)
        return np.random.Generator(np.random.Philox(counter=counter, key=key))

    return make_rng


def neighbour_overlap(make_rng: Callable[[int, int], np.random.Generator], seed: int,
                      position: int, draws: int = 16) -> int | None:
    """How many 64-bit outputs record `position`'s generator gives before it gives record
    `position + 1`'s: the smallest `k` such that its outputs `k + 1` to `k + 4` are the
    neighbour's first four, or None when that does not happen within its first `draws`."""
    own = make_rng(seed, position).bit_generator.random_raw(draws)
    neighbour = make_rng(seed, position + 1).bit_generator.random_raw(4)
    for start in range(draws - 3):
        if np.array_equal(own[start:start + 4], neighbour):
            return start
    return None


def neighbour_overlap_sentence(layout: str, offset: int | None, position: int,
                               draws: int) -> str:
    """What `neighbour_overlap` found for record `position` under a counter `layout`."""
    mine, theirs = f"record {position}", f"record {position + 1}"
    if offset is None:
        return (f"{layout}: {theirs}'s first 4 outputs occur nowhere in {mine}'s first "
                f"{draws}: within those draws {mine} does not run into {theirs}'s stream.")
    if offset == 0:
        return (f"{layout}: {mine} and {theirs} start with the same 4 outputs: the two "
                "records share one stream.")
    return (f"{layout}: {mine}'s outputs {offset + 1} to {offset + 4} are {theirs}'s "
            f"outputs 1 to 4: after {offset} draws, {mine} draws its neighbour's numbers.")


def epoch_order(sampler: Any, size: int, epoch: int) -> list[int]:
    """The record keys of epoch `epoch` of a sampler over `size` records, in stream order
    (course_lib's or Grain's `IndexSampler`, unsharded)."""
    return [sampler[epoch * size + index].record_key for index in range(size)]


def epoch_seed_sentence(who: str, same: bool, size: int) -> str:
    """Whether seed 7's epoch 1 visited the `size` records in seed 8's epoch 0 order."""
    found = f"{who}: seed 7's epoch 1 visits the {size:,} records"
    if same:
        return (f"{found} in exactly seed 8's epoch 0 order: here, changing the seed from 7 "
                "to 8 gave no new order, only seed 7's epoch 1 order one epoch earlier.")
    return (f"{found} in another order than seed 8's epoch 0: the two seeds do not repeat "
            "each other's orders one epoch apart.")


def first_draw_grid(make_rng: Callable[[int, int], np.random.Generator],
                    seeds: Sequence[int], positions: int) -> np.ndarray:
    """A (seeds, positions) array: the first uniform draw of each record's generator.

    `make_rng(seed, position)` returns the generator of that record; equal values in the
    grid are streams that two (seed, position) pairs share.
    """
    return np.array([[make_rng(seed, position).random() for position in range(positions)]
                     for seed in seeds])


def plot_draw_grids(grids: Mapping[str, np.ndarray], seeds: Sequence[int], *, title: str):
    """Heat maps of `first_draw_grid` results side by side: seed down, position across."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(grids), figsize=(4.2 * len(grids) + 1.2, 4.2),
                                squeeze=False, layout="constrained")
    for ax, (name, grid) in zip(axes[0], grids.items(), strict=True):
        image = ax.imshow(grid, cmap="viridis", vmin=0, vmax=1, origin="upper",
                          extent=(-0.5, grid.shape[1] - 0.5, seeds[-1] + 0.5, seeds[0] - 0.5))
        ax.set_title(name, fontsize="medium")
        ax.set_xticks(range(0, grid.shape[1], max(1, grid.shape[1] // 8)))
        ax.set_xlabel("position in the stream (index)")
        ax.set_ylabel("seed")
    figure.colorbar(image, ax=axes[0].tolist(), label="first draw of the record's generator")
    figure.suptitle(title)
    return figure


def show_image_rows(rows: Mapping[str, Sequence[np.ndarray]], *, title: str,
                    size: float = 0.9):
    """One row of grey images per entry of `rows`, the entry's name written at the left.

    Each row is drawn as a single picture (the images side by side, one pixel apart), which
    is much faster than one matplotlib axis per image.
    """
    import matplotlib.pyplot as plt

    columns = max(len(images) for images in rows.values())
    figure, axes = plt.subplots(len(rows), 1, squeeze=False,
                                figsize=(size * columns + 2.4, size * len(rows) + 0.6))
    for ax, (name, images) in zip(axes[:, 0], rows.items(), strict=True):
        ax.imshow(_side_by_side(images), cmap="gray", vmin=0, vmax=255)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_frame_on(False)
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize="small")
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def _side_by_side(images: Sequence[np.ndarray], gap: int = 1) -> np.ndarray:
    """Equal-sized 2-D images in one array, `gap` white pixels apart."""
    height, width = np.asarray(images[0]).shape
    strip = np.full((height, len(images) * (width + gap) - gap), 255, dtype=np.float64)
    for column, image in enumerate(images):
        strip[:, column * (width + gap):column * (width + gap) + width] = image
    return strip


def cycle_walks(permutation: Any) -> dict[int, list[int]]:
    """For a `FeistelPermutation`, each index's path: the index, then every value the
    Feistel network visits until one falls inside `[0, num_records)`.

    The last value of each path is `permutation(index)`; the values between are the
    cycle-walk, all outside the data set.
    """
    size = permutation.num_records
    walks = {}
    for index in range(size):
        path = [index, permutation._network(index)]
        while path[-1] >= size:
            path.append(permutation._network(path[-1]))
        walks[index] = path
    return walks


def feistel_domain(permutation: Any) -> int:
    """The size of the power-of-four domain a `FeistelPermutation`'s network permutes."""
    return 4 ** permutation._bits


def domain_fill_sentence(sizes: Sequence[int]) -> str:
    """For each number of records, the share of the Feistel network's power-of-four domain
    that the records fill, computed from the permutation itself: the rest of the domain is
    where a pass lands outside the data and the key walks again."""
    from course_lib.permutation import FeistelPermutation

    parts = []
    for size in sizes:
        domain = feistel_domain(FeistelPermutation(size, seed=0))
        exponent = (domain.bit_length() - 1) // 2  # domain == 4**exponent
        parts.append(f"{size:,} records fill {size / domain:.0%} of the domain of "
                     f"4**{exponent} = {domain:,} values")
    return "; ".join(parts) + "."


def plot_cycle_walks(permutation: Any):
    """Two panels for a small `FeistelPermutation`: on the left every index's walk through
    the network (steps across, values up, the out-of-range band shaded); on the right the
    permutation that results, as arrows from position to record key."""
    import matplotlib.pyplot as plt

    size, domain = permutation.num_records, feistel_domain(permutation)
    walks = cycle_walks(permutation)
    longest = max(len(path) for path in walks.values()) - 1
    figure, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.4),
                                         gridspec_kw={"width_ratios": [1.6, 1]})
    left.axhspan(size - 0.5, domain - 0.5, color="tab:red", alpha=0.1,
                 label=f"values {size}..{domain - 1}: outside the data, walk again")
    colors = plt.get_cmap("tab10")
    for index, path in walks.items():
        left.plot(range(len(path)), path, marker="o", color=colors(index % 10),
                  linewidth=2.5 if len(path) > 2 else 1.2, alpha=0.9)
        left.annotate(str(path[-1]), (len(path) - 1, path[-1]), textcoords="offset points",
                      xytext=(6, -3), fontsize="small", color=colors(index % 10))
    left.set_xticks(range(longest + 1))
    left.set_xticklabels(["index"] + [f"after pass {step}" for step in range(1, longest + 1)])
    left.set_yticks(range(domain))
    left.set_ylabel("value")
    left.set_xlabel("passes through the Feistel network")
    left.set_title(f"Cycle-walking: domain of {domain}, data set of {size}", fontsize="medium")
    left.legend(loc="upper left", fontsize="small")
    for index, path in walks.items():
        right.annotate("", xy=(1, path[-1]), xytext=(0, index),
                       arrowprops={"arrowstyle": "->", "color": colors(index % 10)})
    right.set_xlim(-0.2, 1.2)
    right.set_ylim(-0.7, size - 0.3)
    right.set_xticks([0, 1])
    right.set_xticklabels(["position", "record key"])
    right.set_yticks(range(size))
    right.set_ylabel("position (left) / record key (right)")
    right.set_title(f"The permutation of [0, {size})", fontsize="medium")
    figure.tight_layout()
    return figure


def traced_peak_bytes(function: Callable[[], Any]) -> tuple[Any, int]:
    """Run `function()` and return its result with the peak memory it allocated, in bytes,
    as `tracemalloc` sees it (Python objects and NumPy arrays)."""
    import tracemalloc

    already_tracing = tracemalloc.is_tracing()
    if not already_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    baseline = tracemalloc.get_traced_memory()[0]
    try:
        result = function()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        if not already_tracing:
            tracemalloc.stop()
    return result, max(0, peak - baseline)


def format_bytes(count: float) -> str:
    """Bytes in the unit a person reads most easily (B, kB, MB or GB, powers of 1000)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count:.0f} B"


def plot_lines(curves: Mapping[str, Mapping[float, float]], *, xlabel: str, ylabel: str,
               title: str, dashed: Sequence[str] = (), log: bool = True, ax=None,
               runs: Mapping[str, Mapping[float, Sequence[float]]] | None = None):
    """One line per entry of `curves` ({x: y}); names in `dashed` are drawn dashed (for an
    extrapolation). Both axes are logarithmic unless `log=False`.

    `runs[name][x]`, where given, are the repetitions behind the point `curves[name][x]`:
    each is drawn as a small open circle of the curve's colour, and the point itself as a
    dash, so the spread shows around the line through the medians."""
    figure, ax = _axes(ax, (6.0, 3.8))
    for name, curve in curves.items():
        xs = sorted(curve)
        spread = (runs or {}).get(name, {})
        marker = "" if name in dashed else ("_" if spread else "o")
        dash = {"markersize": 14, "markeredgewidth": 2} if marker == "_" else {}
        line, = ax.plot(xs, [curve[x] for x in xs], marker=marker,
                        linestyle="--" if name in dashed else "-", label=name, **dash)
        for x, repeats in sorted(spread.items()):
            ax.plot([x] * len(repeats), repeats, "o", color=line.get_color(), markersize=3.5,
                    markerfacecolor="none")
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize="medium")
    ax.legend(fontsize="small")
    figure.tight_layout()
    return figure


def all_keys_in_chunks(permutation: Any, chunk_size: int | None = None) -> int:
    """Compute every key of a `FeistelPermutation`, `chunk_size` at a time (default: the
    sampler's block, as the loader does), and return their sum (`n * (n - 1) / 2` when it
    is a permutation), so the work cannot be skipped and the result can be checked."""
    from course_lib.sampler import KEY_BLOCK

    chunk_size = chunk_size or KEY_BLOCK
    total = 0
    for start in range(0, permutation.num_records, chunk_size):
        stop = min(start + chunk_size, permutation.num_records)
        total += int(permutation.permute_many(np.arange(start, stop, dtype=np.int64)).sum())
    return total




def seed_collision_sentence(who: str, shared: int, count: int,
                            offsets: Mapping[int, int] | None = None) -> str:
    """What `shared_stream_count` found for seeds 7 and 8, with what it means; `offsets`
    (from `shared_stream_offsets`), where given, says where the shared streams sit, so that
    a shift is stated only when it was measured."""
    found = f"{who}: {shared} of seed 8's first {count:,} record streams also occur in seed 7's"
    if shared == 0:
        return (f"{found}: no augmentation stream of one seed is one of the other's, at any "
                "position measured.")
    if offsets and len(offsets) == 1:
        (offset,) = offsets
        new = f"{count - shared:,} new stream{'s' * (count - shared != 1)} of {count:,}"
        if offset == 0:
            return (f"{found}, all at the same position: changing the seed from 7 to 8 "
                    f"gave {new}.")
        step = f"{abs(offset)} position{'s' * (abs(offset) != 1)}"
        return (f"{found}, all {step} {'later' if offset > 0 else 'earlier'} under seed 7: "
                f"the two seeds draw the same augmentation streams, shifted by {step}, so "
                f"changing the seed from 7 to 8 gave {new}.")
    if offsets:
        return (f"{found}, at {len(offsets)} different offsets: the seeds share part of their "
                "streams, with no single shift between them.")
    if shared > count // 2:
        return (f"{found}: the two seeds share most of their streams (where they sit was not "
                "measured).")
    return f"{found}: the seeds share part of their streams."


def per_record_cost(table_bytes: float, table_seconds: float, size: int,
                    runs: int | None = None) -> str:
    """The stored permutation's bytes and seconds per record at `size`, each printed with
    the precision its magnitude needs (8 bytes, 47.9 ns); `runs`, when given, names the
    statistic: the time is the median of that many runs."""
    sentence = (f"np.random.permutation: {table_bytes / size:.3g} bytes and "
                f"{format_duration(table_seconds / size)} per record at n = {size:,}")
    return sentence if runs is None else f"{sentence} (time: the median of {runs} runs)"


def physical_memory_bytes() -> int | None:
    """This machine's memory in bytes, where the operating system says (Linux, macOS)."""
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def stored_table_sentence(per_record_bytes: float, per_record_seconds: float,
                          records: int, measured_at: int,
                          memory_bytes: int | None = None) -> str:
    """What a stored permutation of `records` would cost at the rate measured at
    `measured_at`, and whether this machine's memory could hold it."""
    table = per_record_bytes * records
    sentence = (f"A stored permutation of {records:,} records would hold about "
                f"{format_bytes(table)} and take about "
                f"{format_duration(round_significant(per_record_seconds * records, 2))} to "
                f"build at the rate "
                f"measured at n = {measured_at:,}")
    if memory_bytes is None:
        return sentence + "."
    if table > memory_bytes:
        return (sentence + f": more than this machine's {format_bytes(memory_bytes)} of "
                "memory, so here it could not be built at all.")
    return (sentence + f", {table / memory_bytes:.0%} of this machine's "
            f"{format_bytes(memory_bytes)} of memory, in every process that shuffles.")


def growth_sentence(small_seconds: Sequence[float], smallest: int,
                    large_seconds: Sequence[float], largest: int) -> str:
    """How the stored permutation's cost per record changed from `smallest` to `largest`
    records (each timed several times), and what that means for the extrapolation to a
    billion: an underestimate if it grew, no evidence either way if it did not."""
    per_record = Comparison(tuple(t / largest for t in large_seconds),
                            tuple(t / smallest for t in small_seconds))
    small, large = (f"{format_duration(per_record.baseline_median)} at n = {smallest:,}",
                    f"{format_duration(per_record.median)} at n = {largest:,}")
    costs = f"{small} against {large}"
    moved = f"from {small} to {large}"
    noise = per_record.noise()
    if per_record.verdict == "worse":
        return (f"That is an underestimate if the trend goes on: the cost per record grew "
                f"{format_times(1 / per_record.ratio)}, {moved} ({noise}), and a "
                "billion-record table is a hundred times larger still. (What makes a larger "
                "table cost more per record is not measured here.)")
    if per_record.verdict == "better":
        return (f"The cost per record fell {format_times(per_record.ratio)}, {moved} "
                f"({noise}). The extrapolation uses the largest size's rate; with the rate "
                "changing across the sizes measured, read it as a rough estimate, not a "
                "bound.")
    if per_record.verdict == TOO_NOISY_TO_TELL:
        return (f"Whether the cost per record grew cannot be told from this run: {costs} "
                f"({noise}). {NOISY_EXPLANATION}")
    return (f"The cost per record stayed the same within the noise, {costs} ({noise}), so "
            "these sizes show no growth; a billion-record table, far larger than the CPU "
            "caches, may still cost more per record than any size measured here.")


def computed_epoch_sentence(computed_seconds: Sequence[float],
                            table_seconds: Sequence[float], records: int) -> str:
    """Computing every key of an epoch in the loader's blocks (`sampler.KEY_BLOCK` positions
    each, as `all_keys_in_chunks` does) against building the same epoch's table with
    `np.random.permutation`, with what the outcome means."""
    from course_lib.sampler import KEY_BLOCK

    return compare_runs(
        f"Computing all {records:,} keys of an epoch in the loader's blocks of {KEY_BLOCK:,} "
        "positions", computed_seconds,
        "building the same epoch's table with np.random.permutation", table_seconds,
        why={"worse": "So the computed shuffle buys memory and the wait before the first "
                       "record, not speed per key: a whole epoch of keys costs more than a "
                       "table built in C. The loader spreads that cost over the epoch, a "
                       "block at a time, so no batch waits for all of it.",
             "same": "So per key the two cost the same here; what the computed shuffle "
                     "buys is memory and the wait before the first record.",
             "better": "So here the computed shuffle was cheaper even per key, on top of "
                       "its memory and its wait before the first record."})


def first_key_sentence(computed_bytes: int, computed_seconds: Sequence[float], records: int,
                       table_seconds: Sequence[float], table_records: int) -> str:
    """The computed shuffle's memory and time to its first key at `records`, against the
    time a stored table of `table_records` takes before its first key can be read."""
    memory = (f"The computed shuffle of {records:,} records used "
              f"{format_bytes(computed_bytes)}. ")
    comparison = Comparison(tuple(computed_seconds), tuple(table_seconds))
    table = f"building the stored table of only {table_records:,} records"
    sentence = f"{memory}{comparison.how('Reaching its first key', table)} here " \
               f"{comparison.numbers()}."
    if comparison.verdict == TOO_NOISY_TO_TELL:
        return f"{sentence} {NOISY_EXPLANATION}"
    why = {"better": "An epoch starts at once, whatever its size.",
           "same": "At this size the two start an epoch equally soon; the table's wait "
                   "grows with n, the computed one's does not.",
           "worse": "Here the computed shuffle was slower to start than the table, which is "
                     "unexpected: rerun the cell, since a busy machine can delay one short "
                     "measurement."}
    return f"{sentence} {why[comparison.verdict]}"
