"""Lesson 9, sequential formats: what a file without an index forces on a loader.

A TFRecord file, a tar shard (WebDataset) or an object streamed from a store is read from
its start forward: nothing says where record `k` begins, so no record can be asked for by
its key. Two things follow, and this module measures both.

- **Reads are cheap.** One request brings many records (here a megabyte at a time), so the
  wait of slow storage is paid once per request, not once per record.
- **The shuffle is local.** A loader can only mix the records it holds. A *shuffle buffer*
  (tf.data's `shuffle(buffer_size)`) keeps `buffer_size` records, hands out a random one and
  puts the stream's next record in its place; a *window shuffle* (Grain's
  `WindowShuffleIterDataset`) reads `window_size` records, shuffles them and hands them all
  out. Either way no record leaves more than `buffer_size - 1` places earlier than the file
  has it, so a file written class by class gives batches of few classes unless the buffer
  spans several classes. (A record can leave a buffer late, though: at every step it stays
  with chance `1 - 1/buffer_size`, so old classes trickle out long after the stream left
  them. A window holds nothing back.)

The stream written here is the simplest such format: every record is a 4-byte length, then
its bytes. (TFRecord puts four fields around each record: its length in 8 bytes, a 4-byte
checksum of those 8 bytes (a CRC32C, masked), the record's bytes, and a 4-byte masked CRC32C
of the record's bytes. A tar member has a 512-byte header before its bytes.)
"""

from __future__ import annotations

import gc
import os
import struct
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from course_lib.course.basics import (
    BETTER,
    TOO_NOISY_TO_TELL,
    WORSE,
    Estimate,
    format_duration,
    format_times,
    judge,
    relative_margin,
)
from course_lib.course.bigger_than_memory import (
    FASTER,
    SLOWER,
    DigitRecords,
    Rates,
    drop_page_cache,
    margin_phrase,
    median_rate,
    micros,
    rate_comparison,
    runs_of,
    runs_phrase,
    verdict,
)

LENGTH = struct.Struct("<I")  # the 4-byte little-endian length before every record
REQUEST_BYTES = 1 << 20  # what one read request asks the storage for: 1 MiB


def _check_latency(latency_s: float) -> None:
    if not 0 <= latency_s <= 1:
        raise ValueError(f"latency_s={latency_s!r} must be in [0, 1] seconds; pass 0 for "
                         "local disk or e.g. 0.005 for slow storage.")


# -- writing and reading a stream ------------------------------------------------------------


def labels_of(records: DigitRecords) -> np.ndarray:
    """The label of every record, by record key (record `k` is digit `k % 1797`)."""
    return records.labels[np.arange(len(records)) % len(records.labels)]


def write_record_stream(records: Sequence[bytes], path: str | Path,
                        order: Iterable[int] | None = None) -> Path:
    """Write `records` one after another (a length, then the bytes), in `order` (record
    keys; default: key order). Nothing but one record is held in memory at a time.

    The file is flushed to disk (`fsync`) before it is closed: the kernel cannot drop pages
    that are not written yet, so without it a "cold" read just after writing would find
    the whole file still cached."""
    path = Path(path)
    keys = range(len(records)) if order is None else order
    with open(path, "wb", buffering=REQUEST_BYTES) as file:
        for key in keys:
            record = records[int(key)]
            file.write(LENGTH.pack(len(record)))
            file.write(record)
        file.flush()
        os.fsync(file.fileno())
    return path


def read_record_stream(path: str | Path, *, request_bytes: int = REQUEST_BYTES,
                       latency_s: float = 0.0) -> Iterator[bytes]:
    """Yield the records of a stream in file order, reading `request_bytes` per request and
    waiting `latency_s` before each request, as slow storage does (`SlowStorage` waits the
    same before every single record)."""
    if request_bytes < LENGTH.size:
        raise ValueError(f"request_bytes={request_bytes!r} must be at least {LENGTH.size}; "
                         "reads of a megabyte (1 << 20) are what streaming readers use.")
    _check_latency(latency_s)
    pending = b""
    with open(path, "rb", buffering=0) as file:
        while True:
            if latency_s:
                time.sleep(latency_s)
            block = file.read(request_bytes)
            if not block:
                break
            pending += block
            offset = 0
            while len(pending) - offset >= LENGTH.size:
                (size,) = LENGTH.unpack_from(pending, offset)
                end = offset + LENGTH.size + size
                if end > len(pending):
                    break
                yield pending[offset + LENGTH.size:end]
                offset = end
            pending = pending[offset:]
    if pending:
        raise ValueError(f"{path} ends inside a record ({len(pending)} bytes left over): the "
                         "file was cut short; write it again.")


def stream_rate(path: str | Path, *, latency_s: float = 0.0,
                request_bytes: int = REQUEST_BYTES) -> float:
    """Records/s of one reader going through the whole stream with a cold page cache."""
    gc.collect()
    drop_page_cache([path])
    start = time.perf_counter()
    count = sum(1 for _ in read_record_stream(path, request_bytes=request_bytes,
                                              latency_s=latency_s))
    return count / (time.perf_counter() - start)


# -- shuffling what a stream gives ---------------------------------------------------------


def _check_size(name: str, size: int) -> None:
    if int(size) != size or size < 1:
        raise ValueError(f"{name}={size!r} must be a whole number of records, at least 1; "
                         "1 keeps the file's order, the data set's size shuffles it all.")


def shuffle_buffer(stream: Iterable, buffer_size: int, seed: int) -> Iterator:
    """tf.data's shuffle: fill a buffer of `buffer_size` elements, then for every new element
    hand out a random one of the buffer and put the new one in its place; at the end, hand
    out what is left in random order."""
    _check_size("buffer_size", buffer_size)
    generator = np.random.default_rng(seed)
    buffer: list = []
    for element in stream:
        if len(buffer) < buffer_size:
            buffer.append(element)
            continue
        slot = int(generator.integers(buffer_size))
        yield buffer[slot]
        buffer[slot] = element
    for slot in generator.permutation(len(buffer)):
        yield buffer[slot]


def window_shuffle(stream: Iterable, window_size: int, seed: int) -> Iterator:
    """Grain's `WindowShuffleIterDataset`, in spirit: read `window_size` elements, hand them
    out in a random order, read the next window (each with its own permutation)."""
    _check_size("window_size", window_size)
    generator = np.random.default_rng(seed)
    window: list = []
    for element in stream:
        window.append(element)
        if len(window) == window_size:
            yield from (window[slot] for slot in generator.permutation(window_size))
            window = []
    yield from (window[slot] for slot in generator.permutation(len(window)))


def labels_per_batch(labels: Sequence[int], batch_size: int) -> np.ndarray:
    """How many different labels each full batch of `batch_size` consecutive records holds."""
    labels = np.asarray(labels)
    full = len(labels) // batch_size * batch_size
    batches = labels[:full].reshape(-1, batch_size)
    return np.array([len(np.unique(batch)) for batch in batches])


def expected_labels_per_batch(num_labels: int, batch_size: int) -> float:
    """What a perfect shuffle gives on average: labels drawn at random, equally often."""
    return num_labels * (1 - (1 - 1 / num_labels) ** batch_size)


# -- the pictures and sentences ---------------------------------------------------------------


def plot_label_orders(orders: Mapping[str, Sequence[int]], batch_size: int):
    """One strip per order: the label of every record along the epoch, coloured by label,
    with the mean number of labels per batch beside the order's name."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import BoundaryNorm, ListedColormap

    names = list(orders)
    strips = np.stack([np.asarray(orders[name]) for name in names])
    figure, ax = plt.subplots(figsize=(9, 0.6 * len(names) + 1.6))
    colours = ListedColormap(plt.get_cmap("tab10").colors)
    image = ax.imshow(strips, aspect="auto", interpolation="nearest", cmap=colours,
                      norm=BoundaryNorm(np.arange(-0.5, 10.5), 10))
    ax.set_yticks(range(len(names)), [
        f"{name}\n{labels_per_batch(orders[name], batch_size).mean():.1f} labels per batch"
        for name in names], fontsize="small")
    ax.set_xlabel("position in the epoch (records, in the order the loader hands them out)")
    ax.set_title(f"The label of every record, in the order each shuffle hands it out "
                 f"(batches of {batch_size})")
    bar = figure.colorbar(image, ax=ax, ticks=range(10), pad=0.01)
    bar.set_label("label")
    figure.tight_layout()
    return figure


def stream_speed_sentence(*, stream_slow: Rates, random_slow: Rates, threaded_slow: Rates,
                          threads: int, latency_s: float, records_per_request: float,
                          stream_cold: Rates, in_order_cold: Rates, random_cold: Rates,
                          in_order_warm: Rates, random_warm: Rates,
                          format_name: str = "ArrayRecord") -> str:
    """Streaming against random access on slow storage, then what the order alone does on
    a cold local disk. Every rate is records/s, one run or every run of a timing; each pair is
    judged by the course's one margin rule (`bigger_than_memory.verdict`).

    The disk part compares like with like: one format (`format_name`, the same files, the
    same codec), read in file order and in random order, cold and warm. Warm, no read waits
    for the disk, so a gap between the orders there is the format's and the cache's, not the
    disk's; cold minus warm (µs per read) is what the disk added, and only that part is
    credited, as probable, to the kernel's read-ahead (inferred, not measured). The stream's
    own cold rate is printed beside it, not divided by another format's: its records are
    uncompressed and parsed in Python."""
    wait = f"{latency_s * 1e3:.0f} ms"
    stream_rate, random_rate = median_rate(stream_slow), median_rate(random_slow)
    outcome = verdict(stream_slow, random_slow)
    margin = margin_phrase(rate_comparison(stream_slow, random_slow))
    head = (f"With {wait} per request, one reader streaming read {stream_rate:,.0f} "
            f"records/s against {random_rate:,.0f}/s for random reads one at a time")
    if outcome == FASTER:
        head += (f": {format_times(stream_rate / random_rate)} more, since each request of a "
                 f"megabyte brought about {records_per_request:.0f} records for one wait")
        # the random reads went through a loader that also decoded and batched
        share = random_rate * latency_s  # of the 1 / latency the waits allow
        if share >= 0.5:
            head += (f" (the random reads also decoded and batched, where the stream only "
                     f"read, but they reached {share:.0%} of the {1 / latency_s:,.0f}/s that "
                     "the waits allow: the waits were most of their time)")
        else:
            head += (f" (the random reads also decoded and batched, where the stream only "
                     f"read, and reached only {share:.0%} of the {1 / latency_s:,.0f}/s that "
                     "the waits allow: part of this gap is that work, not the waits)")
    elif outcome == SLOWER:
        head += (f": {format_times(random_rate / stream_rate)} less ({margin}), which the one "
                 "wait per request cannot explain; the machine was busy during the stream, "
                 "run it again")
    elif outcome == TOO_NOISY_TO_TELL:
        head += f": too noisy to tell apart ({margin}), so this run names no cause"
    else:
        head += (f": the same within the noise ({margin}), so here the waits were not what "
                 "limited it")
    threaded_rate = median_rate(threaded_slow)
    catching_up = verdict(threaded_slow, stream_slow)
    if catching_up == SLOWER:
        threads_part = (f"Even {threads} threads of random access ({threaded_rate:,.0f}/s "
                        "above) stayed below the single stream.")
    elif catching_up == TOO_NOISY_TO_TELL:
        threads_part = (f"{threads} threads of random access ({threaded_rate:,.0f}/s above) "
                        "and the single stream are too noisy to tell apart.")
    else:
        threads_part = (f"Random access catches up only with many threads ({threads} read "
                        f"{threaded_rate:,.0f}/s above), each waiting for its own record.")
    runs = {"in order, cold": in_order_cold, "random, cold": random_cold,
            "in order, warm": in_order_warm, "random, warm": random_warm}
    listed = ", ".join(f"{key} {micros(median_rate(value))}" for key, value in runs.items())
    disk = (f"On this machine's disk, {format_name}, same files, same codec, time per read "
            f"({runs_phrase(*runs.values())}): {listed}.")
    warm_order = verdict(in_order_warm, random_warm)
    warm_margin = margin_phrase(rate_comparison(in_order_warm, random_warm))
    warm_gap = median_rate(in_order_warm) / median_rate(random_warm)
    if warm_order == FASTER:
        disk += (f" Warm, with no disk to wait for, file order was already "
                 f"{format_times(warm_gap)} faster ({warm_margin}): that part of the cold gap "
                 "is not the disk.")
    elif warm_order == SLOWER:
        disk += (f" Warm, file order was {format_times(1 / warm_gap)} slower than random "
                 f"order ({warm_margin}).")
    elif warm_order == TOO_NOISY_TO_TELL:
        disk += f" Warm, the two orders were too noisy to tell apart ({warm_margin})."
    else:
        disk += f" Warm, the two orders were the same within the noise ({warm_margin})."
    return (f"{head}. {threads_part} {disk} {disk_added_sentence(runs)} (The stream itself, "
            f"uncompressed and parsed in Python, read {median_rate(stream_cold):,.0f} "
            f"records/s cold: another format, so not set against {format_name}'s.)")


def _seconds_per_read(rates: Rates) -> Estimate:
    """The median time per read of a rate's runs, with its standard error."""
    return Estimate.median_of([1 / rate for rate in runs_of(rates)])


def _difference(larger: Estimate, smaller: Estimate) -> Estimate:
    """`larger - smaller`, with the two standard errors combined (a side timed once has
    none)."""
    errors = [0.0 if np.isnan(side.stderr) else side.stderr for side in (larger, smaller)]
    stderr = float(np.hypot(*errors)) if any(errors) else np.nan
    return Estimate(larger.value - smaller.value, stderr, min(larger.count, smaller.count))


def disk_added_sentence(runs: Mapping[str, Rates]) -> str:
    """What the disk added to a read, in file order and at random: cold minus warm (µs per
    read; `runs`: records/s of each run under the keys "in order, cold", "random, cold",
    "in order, warm", "random, warm"). A difference counts only when the cold reads are
    slower than the warm ones by the course's one margin rule; the two differences are then
    compared by the same rule, with their standard errors combined."""
    orders = ("in order", "random")
    seen = {order: verdict(runs[f"{order}, warm"], runs[f"{order}, cold"]) == FASTER
            for order in orders}
    added = {order: _difference(_seconds_per_read(runs[f"{order}, cold"]),
                                _seconds_per_read(runs[f"{order}, warm"])) for order in orders}

    def part(order: str, where: str) -> str:
        if seen[order]:
            return f"{format_duration(added[order].value)} per read {where}"
        cold, warm = (micros(median_rate(runs[f"{order}, {state}"])) for state in ("cold", "warm"))
        judged = verdict(runs[f"{order}, warm"], runs[f"{order}, cold"])
        margin = margin_phrase(rate_comparison(runs[f"{order}, warm"], runs[f"{order}, cold"]))
        how = {TOO_NOISY_TO_TELL: "too noisy to tell",
               SLOWER: "cold faster, which a cache cannot cause: something this run does "
                       "not measure slowed the warm run"}.get(judged, "the same within the noise")
        return f"nothing measurable {where} (cold {cold} against {warm} warm, {how}, {margin})"

    head = ("Cold minus warm, what the disk added: "
            f"{part('in order', 'in file order')}, {part('random', 'at random')}")
    read_ahead = (" Probably the kernel's read-ahead: it reads ahead of a file read in order, "
                  "so the next records are in memory before they are asked for (ArrayRecord's "
                  "own read-ahead is off here, readahead_buffer_size:0); this lesson infers "
                  "that from the times and does not measure the read-ahead itself.")
    busier = (", which the kernel's read-ahead cannot explain; something this run does not "
              "measure slowed the in-order reads, so run it again.")
    if not seen["random"] and not seen["in order"]:
        return (f"{head}: random reads were no slower cold, so this run does not show the "
                "disk (the pages were not really dropped, or the disk answers from a cache "
                "of its own).")
    if not seen["random"]:
        return f"{head}: the disk cost more in file order than at random{busier}"
    if not seen["in order"]:
        if verdict(runs["in order, warm"], runs["in order, cold"]) == TOO_NOISY_TO_TELL:
            return (f"{head}: in file order too noisy to tell whether the disk added anything, "
                    "so this run does not say what the order saved; it names no cause.")
        return f"{head}: only random reads waited for it.{read_ahead}"
    judged = judge(added["in order"], added["random"])
    margin = f"margin {relative_margin(added['in order'], added['random']):.0%}"
    ratio = added["random"].value / added["in order"].value
    if judged == BETTER:
        return f"{head}: {format_times(ratio)} less in file order ({margin}).{read_ahead}"
    if judged == WORSE:
        return f"{head}: {format_times(1 / ratio)} more in file order ({margin}){busier}"
    if judged == TOO_NOISY_TO_TELL:
        return f"{head}: too noisy to tell the two apart ({margin}); this run names no cause."
    return (f"{head}: the same within the noise ({margin}), so at the disk the order saved "
            "nothing here.")


def shuffle_mix_sentence(mix: Mapping[str, float], *, best_buffer: str, global_name: str,
                         expected: float, batch_size: int, buffer_share: float) -> str:
    """The labels per batch of each order, and whether the buffer mixed like the global
    shuffle (within 10%) or not."""
    listed = "; ".join(f"{name}: {value:.1f}" for name, value in mix.items())
    head = (f"Labels per batch of {batch_size}, on average: {listed} (a perfect shuffle "
            f"gives {expected:.1f}).")
    buffer, whole = mix[best_buffer], mix[global_name]
    if buffer >= 0.9 * whole:
        return (f"{head} The {best_buffer} mixed about as well as the {global_name}: at "
                f"{buffer_share:.0%} of the data set it held records of every label most of "
                "the time.")
    return (f"{head} Even the {best_buffer} gave {format_times(whole / buffer)} fewer labels per "
            f"batch than the {global_name}: a batch "
            "can only hold what lay near it in the file, and this file lies class by class.")


def buffer_memory_sentence(buffer_size: int, record_bytes: int, data_mb: float) -> str:
    """What a shuffle buffer holds in memory, in records and MB."""
    held_mb = buffer_size * record_bytes / 1e6
    return (f"A buffer of {buffer_size:,} records holds {held_mb:,.0f} MB of this lesson's "
            f"{data_mb:,.0f} MB in memory, in every process that shuffles; the global shuffle "
            "holds none, only the sampler's position.")


def stream_remember_lines(*, stream_slow: Rates, random_slow: Rates, buffer_name: str,
                          buffer_mix: float, global_mix: float) -> list[str]:
    """The section's closing points, one idea each, with this run's numbers (rates: the
    medians of their runs), turning with them."""
    stream_rate, random_rate = median_rate(stream_slow), median_rate(random_slow)
    outcome = verdict(stream_slow, random_slow)
    margin = margin_phrase(rate_comparison(stream_slow, random_slow))
    numbers = f"{stream_rate:,.0f} records/s against {random_rate:,.0f}/s for one random reader"
    if outcome == FASTER:
        speed = (f"On slow storage a stream pays one wait per request, not per record "
                 f"({numbers}).")
    elif outcome == TOO_NOISY_TO_TELL:
        speed = (f"On slow storage, stream and random reads were too noisy to tell apart "
                 f"({numbers}; {margin}).")
    else:
        speed = (f"On slow storage the stream was not faster here ({numbers}; {margin}): "
                 "its requests did not save the waits this run.")
    if buffer_mix >= 0.9 * global_mix:
        mixing = (f"The {buffer_name} mixed about as well as the global shuffle "
                  f"({buffer_mix:.1f} labels per batch against {global_mix:.1f}).")
    else:
        mixing = (f"A stream shuffles only what it holds: the {buffer_name} gave "
                  f"{buffer_mix:.1f} labels per batch, the global shuffle {global_mix:.1f}.")
    return [speed, mixing, "A stream is best shuffled when it is written, and read from "
            "several shards at once."]
