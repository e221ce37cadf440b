"""Lesson 9, data bigger than memory: the records, the formats' writers, memory growth, and a
storage that waits.

Linux counts a process's memory in two parts (`/proc/self/status`): `RssAnon`, its own
arrays and objects, and `RssFile`, pages of files it maps, which belong to the kernel's
page cache. Reading a data set whole grows `RssAnon` by its size; reading it one record at
a time keeps it flat. docs/inside/bigger_than_memory.md has the detail.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from course_lib.course.basics import DIGIT_SIDE, digits, upscale
from course_lib.transforms import MapTransform


class DigitRecords:
    """`count` records as bytes, made on demand from the upscaled scikit-learn digits.

    Record `k` is digit `k % 1797`: one byte of label, then `side * side` bytes of pixels.
    Only the 1,797 digits are held in memory, so a writer can stream a larger set to disk."""

    def __init__(self, count: int, side: int = DIGIT_SIDE):
        data = digits()
        self.count, self.side = int(count), int(side)
        self.images = upscale(data["image"], side)
        self.labels = data["label"].astype(np.uint8)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, record_key: int) -> bytes:
        if not 0 <= record_key < self.count:
            raise IndexError(f"record_key={record_key} is out of range for {self.count} records")
        digit = record_key % len(self.labels)
        return bytes([self.labels[digit]]) + self.images[digit].tobytes()

    @property
    def record_bytes(self) -> int:
        return 1 + self.side * self.side


class DecodeDigit(MapTransform):
    """Record bytes (label byte, then pixels) -> {"image": (side, side) uint8, "label": int}."""

    def __init__(self, side: int = DIGIT_SIDE):
        self.side = side

    def map(self, record: bytes) -> dict:
        pixels = np.frombuffer(record, np.uint8, offset=1).reshape(self.side, self.side)
        return {"image": pixels.copy(), "label": int(record[0])}


def write_digit_record_file(records: DigitRecords, path: str | Path, block: int = 4096) -> Path:
    """The records as a course_lib record file (what `write_record_file` writes), filled
    `block` records at a time through a map of the file, never whole in memory."""
    dtype = np.dtype([("label", np.uint8), ("image", np.uint8, (records.side, records.side))])
    mapped = np.lib.format.open_memmap(Path(path), mode="w+", dtype=dtype, shape=(len(records),))
    for start in range(0, len(records), block):
        which = np.arange(start, min(start + block, len(records))) % len(records.labels)
        mapped["label"][start:start + len(which)] = records.labels[which]
        mapped["image"][start:start + len(which)] = records.images[which]
    mapped.flush()
    del mapped
    return Path(path)


def bytes_on_disk(paths: Sequence[str | Path]) -> int:
    """Bytes the files take on disk (allocated blocks, so small files count what they use)."""
    return sum(getattr(os.stat(path), "st_blocks", 0) * 512 or os.stat(path).st_size
               for path in paths)


def drop_page_cache(paths: Sequence[str | Path]) -> bool:
    """Ask the kernel to drop these files' cached pages (no root needed), for a cold read.

    Pages not yet written to disk cannot be dropped: the call starts writing them, so call
    it once after writing and again before each cold read. False where the drop cannot
    work: no `posix_fadvise` (macOS), or a file on tmpfs or ramfs, which lives in memory."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for path in paths:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)
    folders = {os.path.dirname(os.path.realpath(path)) for path in paths}
    return not any(file_system_type(folder) in ("tmpfs", "ramfs") for folder in folders)


def file_system_type(path: str | Path) -> str:
    """The type of the file system holding `path` ("ext4", "tmpfs", ...), from /proc/mounts:
    the longest mount point above it. "" where /proc/mounts does not exist."""
    path, found, kind = os.path.realpath(path), -1, ""
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = fields[1].replace("\\040", " ")
        inside = path == mount or path.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) > found:
            found, kind = len(mount), fields[2]
    return kind


def plot_memory_growth(sizes_mb: Sequence[float], whole: Sequence[float],
                       lazily: Sequence[float]):
    """Growth of the process's own memory against the data set's size, whole and lazily."""
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(6.4, 3.8))
    # a wide pale band, so that it still shows where the "whole" line lies on top of it
    ax.plot(sizes_mb, sizes_mb, color="grey", linewidth=9, alpha=0.3, solid_capstyle="butt",
            label="growth = data set size")
    ax.plot(sizes_mb, whole, marker="o", label="read whole (np.load)")
    ax.plot(sizes_mb, lazily, marker="s", label="read one record at a time (memory map)")
    ax.set_xlabel("data set size (MB)")
    ax.set_ylabel("growth of RssAnon (MB)")
    ax.set_title("The process's own memory against the data set's size")
    ax.legend(fontsize="small")
    figure.tight_layout()
    return figure


class SlowStorage:
    """A source that waits `latency_s` before every read, as a network file system or an
    object store does. `time.sleep` gives the interpreter lock back, as a network read does,
    so other threads run meanwhile."""

    def __init__(self, source: Any, latency_s: float):
        if not 0 < latency_s <= 1:
            raise ValueError(f"latency_s={latency_s!r} must be in (0, 1] seconds, e.g. 0.005.")
        self.source, self.latency_s = source, float(latency_s)

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, record_key: int):
        time.sleep(self.latency_s)
        return self.source[record_key]

    def __repr__(self) -> str:
        return f"SlowStorage({self.source!r}, latency_s={self.latency_s})"

