"""What every benchmarked loader shares: the data, the constants and the plain NumPy ops.

The reference pipeline of the lessons: 60000 28x28 uint8 images (random, fixed seed) with
integer labels, held in memory; per record `x.astype(float32) / 255`, then `(x - mean) / std`,
and a random horizontal flip with p=0.5; batches of 64 with the remainder dropped; one
shuffled epoch.
"""

from __future__ import annotations

import numpy as np

NUM_RECORDS = 60_000
IMAGE_SHAPE = (28, 28)
BATCH_SIZE = 64
SEED = 0
FLIP_P = 0.5
MEAN, STD = 0.1307, 0.3081  # the usual MNIST constants

# (x / 255 - mean) / std  ==  x * MULTIPLIER + OFFSET: one multiply and one add, in float32.
MULTIPLIER = np.float32(1 / 255 / STD)
OFFSET = np.float32(-MEAN / STD)


def make_data(num_records: int = NUM_RECORDS) -> dict[str, np.ndarray]:
    """Random images and labels, the same for a given `num_records` in every process."""
    rng = np.random.default_rng(SEED)
    images = rng.integers(0, 256, size=(num_records, *IMAGE_SHAPE), dtype=np.uint8)
    labels = rng.integers(0, 10, size=num_records, dtype=np.int64)
    return {"image": images, "label": labels}


def normalize_image(image: np.ndarray) -> np.ndarray:
    """`(image / 255 - MEAN) / STD` as float32, in one new array; works on one or many images."""
    out = image.astype(np.float32)
    out *= MULTIPLIER
    out += OFFSET
    return out


def normalize_record(record: dict) -> dict:
    return {"image": normalize_image(record["image"]), "label": record["label"]}


def flip_record(record: dict, draw: float) -> dict:
    """Mirror the image left-right when `draw < FLIP_P` (a view, no copy)."""
    if draw < FLIP_P:
        return {"image": record["image"][:, ::-1], "label": record["label"]}
    return record


def flip_batch(batch: dict, draws: np.ndarray) -> dict:
    """Mirror each image of a batch whose draw is below `FLIP_P`."""
    images = batch["image"]
    mask = (draws < FLIP_P)[:, None, None]
    return {"image": np.where(mask, images[:, :, ::-1], images), "label": batch["label"]}


class InMemorySource:
    """A plain random-access source (`__len__`, `__getitem__`) over the arrays, for Grain.

    Records are `{"image": uint8[28, 28], "label": int64}`, like course_lib's
    `ArrayDataSource` gives for a dict of arrays.
    """

    def __init__(self, data: dict[str, np.ndarray]):
        self._images = data["image"]
        self._labels = data["label"]

    def __len__(self) -> int:
        return len(self._images)

    def __getitem__(self, record_key: int) -> dict:
        return {"image": self._images[record_key], "label": self._labels[record_key]}

    def __repr__(self) -> str:
        return f"InMemorySource({len(self)} records)"


def check_batch(batch) -> None:
    """Raise AssertionError unless `batch` is a normalised batch of the reference pipeline."""
    images, labels = (np.asarray(batch[key]) for key in ("image", "label"))
    assert images.shape == (BATCH_SIZE, *IMAGE_SHAPE), f"image batch shape {images.shape}"
    assert images.dtype == np.float32, f"image dtype {images.dtype}"
    assert labels.shape == (BATCH_SIZE,), f"label batch shape {labels.shape}"
    low, high = float(OFFSET), float(255 * MULTIPLIER + OFFSET)
    assert low - 1e-4 <= images.min() and images.max() <= high + 1e-4, "values not normalised"


def check_raw_batch(batch) -> None:
    """Raise AssertionError unless `batch` is a batch of the raw uint8 images and labels."""
    images, labels = (np.asarray(batch[key]) for key in ("image", "label"))
    assert images.shape == (BATCH_SIZE, *IMAGE_SHAPE), f"image batch shape {images.shape}"
    assert images.dtype == np.uint8, f"image dtype {images.dtype}"
    assert labels.shape == (BATCH_SIZE,), f"label batch shape {labels.shape}"


# -- the speed limit: vectorised NumPy, no loader at all -----------------------------------
def numpy_epoch(data: dict, seed: int = SEED):
    """One shuffled epoch: a permutation, then per batch a fancy index, scale and flip."""
    images, labels = data["image"], data["label"]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(images))
    for start in range(0, len(order) - BATCH_SIZE + 1, BATCH_SIZE):
        keys = order[start:start + BATCH_SIZE]
        batch = {"image": normalize_image(images[keys]), "label": labels[keys]}
        yield flip_batch(batch, rng.random(BATCH_SIZE))


def build_numpy(options: dict, data: dict):
    """`(make_iterator, info)`; see bench_configs.py for the builder protocol."""
    return (lambda: numpy_epoch(data)), {"implementation": "NumPy, vectorised per batch"}


def replace_section(text: str, path, heading: str) -> None:
    """Replace the section of a results file that starts with `heading` (up to the next
    `## ` heading) by `text`, or add `text` at the end when there is no such section."""
    content = path.read_text() if path.exists() else ""
    if heading in content:
        before, _, after = content.partition(heading)
        following = after.find("\n## ")
        content = before + text + (after[following + 1:] if following >= 0 else "")
    else:
        content = content.rstrip("\n") + "\n\n" + text
    path.write_text(content)


def run_in_fresh_process(script: str, arguments: list[str], name: str, timeout: float,
                         cwd) -> dict:
    """Run `script` with `arguments` in a new interpreter (benchmarks/ and the checkout on
    its path) and return the last JSON line it prints, or `{"name", "error"}` saying why
    there is none (a timeout, a crash's last line of stderr)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(script).resolve().parent
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(here), str(here.parent), os.environ.get("PYTHONPATH", "")])}
    try:
        result = subprocess.run([sys.executable, script, *arguments], env=environment,
                                capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        return {"name": name, "error": f"no result within {timeout:.0f} s"}
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        last = (result.stderr.strip().splitlines() or ["no error output"])[-1]
        return {"name": name, "error": last}
    return json.loads(lines[-1])
