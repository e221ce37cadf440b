"""Lesson 3, determinism: the pictures of augmented digits and of each record's first
draw, and the memory a shuffle allocates."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np


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
