"""The compute-bound pipeline: about 1 ms of NumPy work per record, in the loader's process.

Per record: the 28x28 uint8 image is upsampled to 224x224 float32 with `np.kron`, blurred
four times with a 3x3 box filter written as sums of shifted slices, and downsampled back to
28x28 by averaging 8x8 blocks; `Batch(64, drop_remainder=True)`; 6400 records, one shuffled
epoch. Every array it makes is 196 KiB, above glibc's initial mmap threshold (128 KiB), so
this is the transform whose speed depends on the allocator settings of the process (see
course_lib/allocator.py): the benchmark runs it with and without `import jax` first.

Every loader runs this same `compute_record` function, so the loaders differ only in what
they add around it.
"""

from __future__ import annotations

import numpy as np

NUM_RECORDS = 6_400
QUICK_RECORDS = 1_280
IMAGE_SIDE = 28
UPSAMPLE = 8  # 28 -> 224
BLUR_PASSES = 4
BATCH_SIZE = 64
SEED = 0
_BLOCK = np.ones((UPSAMPLE, UPSAMPLE), np.float32)


def make_images(num_records: int) -> np.ndarray:
    """uint8[N, 28, 28] random images, the same in every process.

    Drawn record by record, so that making them frees no block large enough to raise
    glibc's own thresholds before the measurement (which would hide the allocator effect).
    """
    rng = np.random.default_rng(SEED)
    images = np.empty((num_records, IMAGE_SIDE, IMAGE_SIDE), np.uint8)
    for index in range(num_records):
        images[index] = rng.integers(0, 256, (IMAGE_SIDE, IMAGE_SIDE), dtype=np.uint8)
    return images


def box_blur(image: np.ndarray) -> np.ndarray:
    """3x3 mean of each inner pixel (the border is kept), from shifted slices."""
    rows = image[:, :-2] + image[:, 1:-1] + image[:, 2:]
    out = image.copy()
    out[1:-1, 1:-1] = (rows[:-2] + rows[1:-1] + rows[2:]) / 9
    return out


def compute_record(image: np.ndarray) -> np.ndarray:
    """Upsample to 224x224, blur four times, average back to 28x28 (float32)."""
    large = np.kron(image.astype(np.float32), _BLOCK)
    for _ in range(BLUR_PASSES):
        large = box_blur(large)
    side = IMAGE_SIDE
    return large.reshape(side, UPSAMPLE, side, UPSAMPLE).mean(axis=(1, 3))


class ImageSource:
    """A plain random-access source over the images, for Grain and torch."""

    def __init__(self, images: np.ndarray):
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, record_key: int) -> np.ndarray:
        return self.images[record_key]


def check_batch(batch) -> None:
    """Raise AssertionError unless `batch` is a batch of computed images."""
    images = np.asarray(batch)
    assert images.shape == (BATCH_SIZE, IMAGE_SIDE, IMAGE_SIDE), f"batch shape {images.shape}"
    assert images.dtype == np.float32, f"dtype {images.dtype}"
    assert images.min() >= 0 and images.max() <= 255, "values outside the pixel range"
