"""The decode-bound pipeline: PNG files on disk, decoded with Pillow, plus augmentation.

What every loader shares here: the images (written once to a cache folder with course_lib's
`write_image_folder` and reused), the constants, and the plain Pillow/NumPy per-record ops
the Grain and torch configurations use. They do exactly what `course_lib.augment`'s
DecodeImage, RandomCrop, RandomHorizontalFlip and Normalize do, with the same calls.

Per record: read the file's bytes, decode the PNG (RGB, IMAGE_SIDE x IMAGE_SIDE), pad by
PADDING pixels on each side and cut a random IMAGE_SIDE x IMAGE_SIDE window, flip left-right
with p=0.5, normalise per channel to float32; batches of 32 with the remainder dropped; one
shuffled epoch. IMAGE_SIDE is chosen so that one record costs 0.5-1 ms on one core of the
benchmark machine (the harness prints the measured cost).

The images are smooth random colour waves plus a little Gaussian noise, so they compress
like photographs do (about 70% of their raw size as PNG), not like pure noise (which does
not compress and decodes unrealistically fast) or flat colour (which decodes too fast).
The files are read from the page cache (the folder was just written or read by an earlier
repetition): this measures decoding and augmentation, not the disk.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

NUM_RECORDS = 6_000
QUICK_RECORDS = 960
IMAGE_SIDE = 128  # tuned so that one record costs 0.5-1 ms at worker_count=0 (see README)
CHANNELS = 3
PADDING = 8
BATCH_SIZE = 32
SEED = 0
FLIP_P = 0.5
NOISE_STD = 8.0  # pixel levels
MEAN = (0.485, 0.456, 0.406)  # the usual ImageNet constants, per channel
STD = (0.229, 0.224, 0.225)
PER_RECORD_TARGET_S = (0.5e-3, 1e-3)  # what the pipeline should cost per record, one core
CACHE_VERSION = 1  # bump when the image generator changes, so stale caches are not reused

# (x / 255 - mean) / std  ==  x * MULTIPLIER + OFFSET, per channel (as course_lib.Normalize).
MULTIPLIER = (1 / 255 / np.asarray(STD)).astype(np.float32)
OFFSET = (-np.asarray(MEAN) / np.asarray(STD)).astype(np.float32)
IMAGE_SHAPE = (IMAGE_SIDE, IMAGE_SIDE, CHANNELS)


# -- the images on disk ---------------------------------------------------------------------
def make_images(num_records: int, side: int = IMAGE_SIDE, seed: int = SEED):
    """`(images uint8[N, side, side, 3], labels int64[N])`: waves plus noise, reproducible."""
    rng = np.random.default_rng([seed, side])
    grid = np.linspace(0.0, 1.0, side, dtype=np.float32)
    y, x = grid[:, None], grid[None, :]
    images = np.empty((num_records, side, side, CHANNELS), np.uint8)
    for index in range(num_records):
        angle = rng.uniform(0, 2 * np.pi, CHANNELS)
        frequency = rng.uniform(0.5, 3.0, CHANNELS)
        level = rng.uniform(40, 215, CHANNELS)
        for channel in range(CHANNELS):
            phase = x * np.cos(angle[channel]) + y * np.sin(angle[channel])
            wave = level[channel] + 40 * np.sin(2 * np.pi * frequency[channel] * phase)
            noisy = wave + rng.normal(0.0, NOISE_STD, (side, side)).astype(np.float32)
            images[index, :, :, channel] = np.clip(noisy, 0, 255)
    labels = rng.integers(0, 10, size=num_records, dtype=np.int64)
    return images, labels


def cache_dir(work: Path, num_records: int, side: int = IMAGE_SIDE) -> Path:
    return work / f"decode_png_{num_records}x{side}_v{CACHE_VERSION}"


def ensure_image_folder(work: Path, num_records: int, side: int = IMAGE_SIDE) -> Path:
    """The cached PNG folder for `num_records` images, written once and reused afterwards.

    `write_image_folder` writes its manifest last, so a folder whose writing was interrupted
    has none and is written again.
    """
    from course_lib import write_image_folder

    directory = cache_dir(work, num_records, side)
    manifest = directory / "manifest.json"
    if manifest.is_file() and json.loads(manifest.read_text()).get("count") == num_records:
        return directory
    images, labels = make_images(num_records, side)
    return write_image_folder(images, labels, directory, image_format="png")


def folder_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in Path(directory).glob("*.png"))


class PngFolderSource:
    """A plain random-access source (`__len__`, `__getitem__`) over the cached folder.

    Reads the layout `write_image_folder` writes; records are `{"image": <PNG bytes>,
    "label": int}`, as course_lib's `ImageFolderDataSource` gives. Holds only the path and
    the labels, so it pickles small for worker processes.
    """

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        manifest = json.loads((self.directory / "manifest.json").read_text())
        self._count = manifest["count"]
        self._extension = manifest["extension"]
        self._digits = manifest["digits"]
        self.labels = np.load(self.directory / manifest["labels"])

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, record_key: int) -> dict:
        record_key = int(record_key)
        path = self.directory / f"{record_key:0{self._digits}d}{self._extension}"
        return {"image": path.read_bytes(), "label": int(self.labels[record_key])}

    def __repr__(self) -> str:
        return f"PngFolderSource({str(self.directory)!r}, {self._count} records)"


# -- the per-record ops, as course_lib.augment does them --------------------------------------
def decode_png(encoded: bytes) -> np.ndarray:
    """DecodeImage: Pillow decode into a uint8 (H, W, 3) array."""
    from PIL import Image  # here, so that importing this module does not import Pillow

    with Image.open(io.BytesIO(encoded)) as picture:
        return np.array(picture)


def random_crop(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """RandomCrop(IMAGE_SIDE, padding=PADDING): zero-pad, then a random window (a view)."""
    padded = np.pad(image, [(PADDING, PADDING), (PADDING, PADDING), (0, 0)])
    height = width = IMAGE_SIDE
    top, left = rng.integers(0, [padded.shape[0] - height + 1, padded.shape[1] - width + 1])
    return padded[top:top + height, left:left + width]


def flip(image: np.ndarray, draw: float) -> np.ndarray:
    """RandomHorizontalFlip: mirror left-right when `draw < FLIP_P` (a view)."""
    return image[:, ::-1] if draw < FLIP_P else image


def normalize(image: np.ndarray) -> np.ndarray:
    """Normalize: per-channel `(x / 255 - mean) / std` as float32, in one new array."""
    out = np.multiply(image, MULTIPLIER, dtype=np.float32)
    out += OFFSET
    return out


def process_record(record: dict, rng: np.random.Generator) -> dict:
    """The whole per-record pipeline in one call (torch's Dataset uses it)."""
    image = decode_png(record["image"])
    image = flip(random_crop(image, rng), rng.random())
    return {"image": normalize(image), "label": record["label"]}


def check_batch(batch) -> None:
    """Raise AssertionError unless `batch` is a normalised batch of the decode pipeline."""
    images, labels = (np.asarray(batch[key]) for key in ("image", "label"))
    assert images.shape == (BATCH_SIZE, *IMAGE_SHAPE), f"image batch shape {images.shape}"
    assert images.dtype == np.float32, f"image dtype {images.dtype}"
    assert labels.shape == (BATCH_SIZE,), f"label batch shape {labels.shape}"
    low = OFFSET - 1e-4  # pixel 0 (also the zero padding)
    high = 255 * MULTIPLIER + OFFSET + 1e-4
    per_channel = images.reshape(-1, CHANNELS)
    assert np.all(per_channel.min(axis=0) >= low), "values not normalised (below range)"
    assert np.all(per_channel.max(axis=0) <= high), "values not normalised (above range)"
