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


def batch_sizes_text(sizes: Sequence[int]) -> str:
    """The sizes of a run's batches, in order, as runs of equal sizes: "28 of 64, then 1 of
    5" (what the batches hold, not what `divmod` predicts)."""
    if not sizes:
        return "no batches"
    runs: list[list[int]] = []
    for size in sizes:
        if runs and runs[-1][1] == size:
            runs[-1][0] += 1
        else:
            runs.append([1, int(size)])
    return ", then ".join(f"{count:,} of {size:,}" for count, size in runs)


def grain_version() -> str:
    """The installed Grain's version ("0.2.18"), for sentences about measured Grain facts."""
    import importlib.metadata

    return importlib.metadata.version("grain")


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

    NumPy's Philox counter is four 64-bit words, word 0 the lowest. For each block of four
    64-bit outputs it first adds one to the counter, then encrypts the new value
    (`philox4x64`), so the starting counter itself is never encrypted. Word 2 is where
    course_lib puts the position, so
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
            f"outputs 1 to 4: after {offset} outputs, {mine} draws its neighbour's numbers.")


_MASK64 = 2**64 - 1
_PHILOX_M = (0xD2E7470EE14C6C93, 0xCA5A826395121157)  # Random123's Philox-4x64 multipliers
_PHILOX_W = (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B)  # and its key increments


def philox4x64(counter: Sequence[int], key: Sequence[int]) -> list[int]:
    """The four 64-bit outputs Philox-4x64 (10 rounds, as NumPy's `Philox`) encrypts from
    one counter value `(word 0, word 1, word 2, word 3)` under a 128-bit `key`, in plain
    Python: the arithmetic NumPy runs in C, written out so a notebook can check which
    counter value a generator's outputs come from."""
    c0, c1, c2, c3 = (int(word) for word in counter)
    k0, k1 = (int(word) for word in key)
    for round_ in range(10):
        if round_:
            k0, k1 = (k0 + _PHILOX_W[0]) & _MASK64, (k1 + _PHILOX_W[1]) & _MASK64
        p0, p1 = _PHILOX_M[0] * c0, _PHILOX_M[1] * c2
        c0, c1, c2, c3 = (p1 >> 64) ^ c1 ^ k0, p1 & _MASK64, (p0 >> 64) ^ c3 ^ k1, p0 & _MASK64
    return [c0, c1, c2, c3]


def _plus_one(counter: Sequence[int]) -> tuple[int, ...]:
    """A 256-bit counter of four 64-bit words (word 0 the lowest) plus one, with the carry."""
    value = sum(int(word) << (64 * index) for index, word in enumerate(counter)) + 1
    return tuple((value >> (64 * index)) & _MASK64 for index in range(4))


def encrypted_counter_sentence(who: str, rng: np.random.Generator) -> str:
    """Which counter value a fresh Philox generator's first four outputs encrypt: the one
    it starts at, or that value plus one. Measured by comparing `rng`'s first four 64-bit
    outputs with `philox4x64` of each; the check uses up those outputs of `rng`."""
    state = rng.bit_generator.state["state"]
    start = tuple(int(word) for word in state["counter"])
    plus_one = _plus_one(start)
    outputs = [int(value) for value in rng.bit_generator.random_raw(4)]
    from_start = philox4x64(start, state["key"]) == outputs
    from_plus_one = philox4x64(plus_one, state["key"]) == outputs
    checks = (f"{who}'s first 4 outputs are Philox's encryption of its starting counter "
              f"{start}: {from_start}; of that counter plus one, {plus_one}: {from_plus_one}")
    if from_plus_one and not from_start:
        return (f"{checks}. Philox adds one to the counter before it encrypts, so {start} "
                "itself is never encrypted.")
    if from_start and not from_plus_one:
        return (f"{checks}. This Philox encrypts the counter first and adds one after.")
    return (f"{checks}. Neither counter gives those outputs, so this generator is not "
            "the Philox-4x64 that `philox4x64` computes.")


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
    return (f"{found} in another order than seed 8's epoch 0: here seed 7's epoch 1 is not "
            "seed 8's epoch 0.")


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


def is_permutation(keys: Sequence[int], size: int) -> bool:
    """Whether `keys` holds every index of `[0, size)` exactly once."""
    return np.array_equal(np.sort(np.asarray(keys, dtype=np.int64)), np.arange(size))


def _listed(values: Sequence[int], most: int = 3) -> str:
    """Up to `most` integers, then how many more: "65,536" or "1, 2, 3 and 4 more"."""
    shown = ", ".join(f"{int(value):,}" for value in values[:most])
    more = len(values) - most
    return f"{shown} and {more:,} more" if more > 0 else shown


def permutation_check_sentence(who: str, keys_by_size: Mapping[int, Sequence[int]]) -> str:
    """What one epoch's keys at each size say: every index exactly once at every size, or,
    for each size where not, how many distinct keys came, which records never came and which
    came more than once."""
    failures = []
    for size, keys in keys_by_size.items():
        if is_permutation(keys, size):
            continue
        values, counts = np.unique(np.asarray(keys, dtype=np.int64), return_counts=True)
        missing = np.setdiff1d(np.arange(size), values)
        repeated = values[counts > 1]
        outside = values[(values < 0) | (values >= size)]
        parts = [f"{len(values):,} distinct keys for {size:,} records"]
        if len(missing):
            parts.append(f"record{'s' * (len(missing) != 1)} {_listed(missing)} never "
                         "came")
        if len(repeated):
            parts.append(f"record{'s' * (len(repeated) != 1)} {_listed(repeated)} came more "
                         "than once")
        if len(outside):
            parts.append(f"key{'s' * (len(outside) != 1)} {_listed(outside)} lie outside "
                         "the data")
        failures.append(", ".join(parts))
    if not failures:
        where = (f"all {len(keys_by_size)} sizes" if len(keys_by_size) > 1 else
                 f"n = {next(iter(keys_by_size)):,}")
        return f"{who}: every index exactly once at {where}: an epoch reads every record once."
    return (f"{who}: not a permutation at {len(failures)} of the {len(keys_by_size)} sizes: "
            + "; ".join(failures) + ". An epoch there reads some records twice and others "
            "never.")


GRAIN_MIN_BLOCK_BITS = 16  # kMinBlockSize in Grain's index_shuffle.cc


def grain_domain(num_records: int) -> int:
    """The number of values Grain's `index_shuffle` permutes for `num_records` records, as
    its source (index_shuffle.cc) sizes the cipher's block: `ceil(log2(max_index))` bits for
    `max_index = num_records - 1`, rounded up to even, at least 16. When `max_index` is a
    power of two this is one value short of the records (2**16 values for 2**16 + 1). (For
    one record, `max_index = 0`, Grain returns 0 without the cipher.)"""
    max_index = num_records - 1
    bits = (max_index - 1).bit_length() if max_index > 0 else 0  # ceil(log2(max_index))
    return 2 ** max(bits + bits % 2, GRAIN_MIN_BLOCK_BITS)


def expected_walk_passes(domain: int, num_records: int) -> float:
    """How many passes through a cipher over `domain` values an index of `[0, num_records)`
    takes on average before it lands back in range, if the cipher were a random permutation
    of the domain: `(domain + 1) / (num_records + 1)`."""
    return (domain + 1) / (num_records + 1)


def grain_small_shuffle_sentence(who: str, small_seconds: Sequence[float], small: int,
                                 big_seconds: Sequence[float], big: int) -> str:
    """Grain's `index_shuffle` per index at a large size against a small one (each a list
    of per-index times, the small size's the baseline), judged by the margin rule, with the
    passes its domain implies. Faster at the large size is what the domain predicts."""
    comparison = Comparison(tuple(big_seconds), tuple(small_seconds), per=" per index")
    sentence = (f"{comparison.how(f'{who} at n = {big:,}', f'at n = {small:,}')} here "
                f"{comparison.numbers()}.")
    if comparison.verdict == TOO_NOISY_TO_TELL:
        return f"{sentence} {NOISY_EXPLANATION}"
    small_domain, big_domain = grain_domain(small), grain_domain(big)
    passes = (f"its domain is never smaller than 2**{GRAIN_MIN_BLOCK_BITS} = "
              f"{2 ** GRAIN_MIN_BLOCK_BITS:,} values (Grain's index_shuffle.cc), so at "
              f"n = {small:,} an index walks about "
              f"{round_significant(expected_walk_passes(small_domain, small), 2):,.0f} passes "
              f"through the cipher on average, against about "
              f"{expected_walk_passes(big_domain, big):.2g} at n = {big:,} (computed from the "
              "domains as for a random permutation, not counted)")
    if comparison.verdict == "better":
        return (f"{sentence} A small data set pays for the size of the domain, not of the "
                f"data: {passes}.")
    if comparison.verdict == "same":
        return (f"{sentence} The long walk did not show in this run's times, although "
                f"{passes}.")
    return (f"{sentence} That is unexpected, since {passes}: rerun the cell, a busy machine "
            "can delay one measurement.")


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
                    large_seconds: Sequence[float], largest: int, records: int) -> str:
    """How the stored permutation's cost per record changed from `smallest` to `largest`
    records (each timed several times), and what that means for the extrapolation to
    `records`: an underestimate if it grew, no evidence either way if it did not."""
    per_record = Comparison(tuple(t / largest for t in large_seconds),
                            tuple(t / smallest for t in small_seconds))
    small, large = (f"{format_duration(per_record.baseline_median)} at n = {smallest:,}",
                    f"{format_duration(per_record.median)} at n = {largest:,}")
    costs = f"{small} against {large}"
    moved = f"from {small} to {large}"
    noise = per_record.noise()
    target = f"a table of {records:,} records"
    times = (f"{records // largest:,}" if records % largest == 0 else
             f"{round_significant(records / largest, 2):,g}")
    if per_record.verdict == "worse":
        return (f"That is an underestimate if the trend goes on: the cost per record grew "
                f"{format_times(1 / per_record.ratio)}, {moved} ({noise}), and {target} is "
                f"{times} times larger still. (What makes a larger table "
                "cost more per record is not measured here.)")
    if per_record.verdict == "better":
        return (f"The cost per record fell {format_times(per_record.ratio)}, {moved} "
                f"({noise}). The extrapolation uses the largest size's rate; with the rate "
                "changing across the sizes measured, read it as a rough estimate, not a "
                "bound.")
    if per_record.verdict == TOO_NOISY_TO_TELL:
        return (f"Whether the cost per record grew cannot be told from this run: {costs} "
                f"({noise}). {NOISY_EXPLANATION}")
    return (f"The cost per record stayed the same within the noise, {costs} ({noise}), so "
            f"these sizes show no growth; {target}, {times} times the "
            "largest measured, may still cost more per record than any size measured here.")


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


def first_block_sentence(computed_runs: Mapping[int, Sequence[float]],
                         table_seconds: Sequence[float], table_records: int, records: int,
                         computed_bytes: int) -> str:
    """The wait before an epoch's first record, like with like: at `table_records`, the
    computed shuffle's construction and first block of keys (timed in
    `computed_runs[size]`) against
    building the stored table; then the same block at `records` against at
    `table_records`, and its memory at `records`."""
    from course_lib.sampler import KEY_BLOCK

    block = f"the loader's first block of {KEY_BLOCK:,} keys"
    against_table = Comparison(tuple(computed_runs[table_records]), tuple(table_seconds))
    first = (f"At n = {table_records:,}, "
             f"{against_table.how(f'computing {block}', 'building the stored table')} "
             f"here {against_table.numbers()}.")
    first += " " + {
        "better": "The computed shuffle starts an epoch sooner.",
        "same": "At this size the two start an epoch equally soon.",
        "worse": "Here the computed block was slower to start than the table, which is "
                 "unexpected: rerun the cell, since a busy machine can delay one short "
                 "measurement.",
        TOO_NOISY_TO_TELL: NOISY_EXPLANATION}[against_table.verdict]
    by_size = Comparison(tuple(computed_runs[records]), tuple(computed_runs[table_records]))
    second = (f"{by_size.how(f'At n = {records:,} the same block', f'at n = {table_records:,}')}"
              f" {by_size.numbers()}")
    second += {
        "better": ": its wait did not grow with the number of records.",
        "same": ": its wait does not grow with the number of records, while the table's "
                "grows with n.",
        "worse": ": here its wait grew with the number of records (what made it grow is "
                 "not measured).",
        TOO_NOISY_TO_TELL: f". {NOISY_EXPLANATION}"}[by_size.verdict]
    memory = (f"The shuffle of {records:,} records and its first block used "
              f"{format_bytes(computed_bytes)} of memory.")
    return f"{first} {second} {memory}"


def small_table_sentence(computed_seconds: Sequence[float], table_seconds: Sequence[float],
                         size: int) -> str:
    """At the smallest size measured, the computed shuffle's first block against building
    the whole table: where a table is cheap, it can be the quicker start."""
    comparison = Comparison(tuple(computed_seconds), tuple(table_seconds))
    sentence = (f"At n = {size:,}, the smallest size measured, "
                f"{comparison.how('computing the first block', 'building the stored table')} "
                f"{comparison.numbers()}")
    return sentence + {
        "worse": ": a table that small is quicker to build than one block of keys, so there "
                 "the stored order starts an epoch sooner.",
        "same": ": at that size neither starts an epoch sooner.",
        "better": ": even there the computed shuffle starts an epoch sooner.",
        TOO_NOISY_TO_TELL: f". {NOISY_EXPLANATION}"}[comparison.verdict]


def epoch_summary(computed_seconds: Sequence[float], table_seconds: Sequence[float],
                  records: int) -> str:
    """One line for "What to remember": a whole epoch's keys, computed in the loader's
    blocks, against the stored table at the same size, with what the verdict means."""
    comparison = Comparison(tuple(computed_seconds), tuple(table_seconds))
    name = f"a whole epoch of {records:,} keys computed in the loader's blocks"
    head = (f"{comparison.how(name, 'the table')} "
            f"{comparison.numbers()}")
    return head + {
        "worse": ": it buys memory and the first record's wait, not speed per key.",
        "same": ": the same per key; it buys memory and the first record's wait.",
        "better": ": cheaper even per key here, on top of memory and the first record's wait.",
        TOO_NOISY_TO_TELL: ": too noisy to tell per key; it buys memory and the first "
                           "record's wait."}[comparison.verdict]
