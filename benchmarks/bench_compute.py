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


# -- the machine's own limit: the function alone, no loader ------------------------------------
# What one core and two cores of this machine do with `compute_record` when nothing but the
# function runs: the yardstick for "two cores' worth". The records go in a shuffled order and
# are stacked per batch, as a loader would; the processes get glibc's thresholds from the
# configuration's environment, the values course_lib's workers run with.
def _batch_starts(num_records: int, first: int = 0, step: int = 1) -> range:
    return range(first * BATCH_SIZE, num_records - BATCH_SIZE + 1, step * BATCH_SIZE)


def _compute_batch(images: np.ndarray, start: int) -> np.ndarray:
    return np.stack([compute_record(image) for image in images[start:start + BATCH_SIZE]])


def _bare_process(images: np.ndarray, first: int, step: int, connection) -> None:
    """Compute every `step`-th batch from batch `first` on and send each one back."""
    for start in _batch_starts(len(images), first, step):
        connection.send_bytes(_compute_batch(images, start))
    connection.close()


def bare_epoch(images: np.ndarray, processes: int):
    """One shuffled epoch of `compute_record`: in this process (`processes=0`), or in that
    many fresh processes, batch `b` computed by process `b % processes` and sent back
    through a pipe of its own, then yielded in order."""
    shuffled = images[np.random.default_rng(SEED).permutation(len(images))]
    if processes == 0:
        for start in _batch_starts(len(shuffled)):
            yield _compute_batch(shuffled, start)
        return
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    pipes = [context.Pipe(duplex=False) for _ in range(processes)]
    children = [context.Process(target=_bare_process, args=(shuffled, index, processes, send))
                for index, (_, send) in enumerate(pipes)]
    try:
        for child in children:
            child.start()
        for _, send in pipes:
            send.close()
        for batch_index, _ in enumerate(_batch_starts(len(shuffled))):
            received = pipes[batch_index % processes][0].recv_bytes()
            yield np.frombuffer(received, np.float32).reshape(BATCH_SIZE, IMAGE_SIDE,
                                                              IMAGE_SIDE)
    finally:
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
                child.join()


def build_bare(options: dict, data: dict):
    """`(make_iterator, info)`; see bench_configs.py for the builder protocol."""
    processes = options.get("processes", 0)
    where = f"{processes} spawned processes" if processes else "this process"
    return (lambda: bare_epoch(data["image"], processes)), {
        "implementation": f"compute_record alone in {where}, no loader"}
