"""Images as files on disk: the slow, realistic path.

Most real data sets are a folder of encoded images plus a list of labels. Reading one means
opening a file and decoding it, and the decoding is the expensive part, so the source below
only reads bytes and leaves decoding to `DecodeImage`, which the loader can run in parallel
workers.

Layout written by `write_image_folder`:

    directory/
      000000.png, 000001.png, ...   one file per record
      labels.npy                    one integer label per record
      manifest.json                 {"count": ..., "format": ..., ...}, written last
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from PIL import Image

from course_lib._checks import check_int

MANIFEST = "manifest.json"
LABELS = "labels.npy"
_EXTENSIONS = {"png": ".png", "jpeg": ".jpg"}


def _file_name(record_key: int, digits: int, extension: str) -> str:
    return f"{record_key:0{digits}d}{extension}"


def _check_images(images: np.ndarray) -> np.ndarray:
    images = np.asarray(images)
    if images.dtype != np.uint8:
        raise TypeError(
            f"images has dtype {images.dtype}; image files store uint8 pixels. Convert first, "
            "e.g. np.clip(images * 255, 0, 255).astype(np.uint8).")
    if images.ndim == 3 or (images.ndim == 4 and images.shape[-1] in (3, 4)):
        return images
    raise ValueError(
        f"images has shape {images.shape}; expected (N, H, W) for grey images or "
        "(N, H, W, 3 or 4) for RGB(A). For a single channel pass images[..., 0].")


def write_image_folder(images: np.ndarray, labels: np.ndarray, directory: str | Path, *,
                       image_format: str = "png") -> Path:
    """Write one encoded image file per record, the labels and a manifest; return the folder.

    The manifest is written last, so a folder left half-written by a crash has none and
    `ImageFolderDataSource` refuses it instead of serving missing records.
    """
    images = _check_images(images)
    labels = np.asarray(labels)
    if labels.shape != (len(images),) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"labels has shape {labels.shape} and dtype {labels.dtype}; expected one integer "
            f"per image, shape ({len(images)},). Pass labels of the same length as images.")
    if image_format not in _EXTENSIONS:
        raise ValueError(f"image_format={image_format!r} is not one of {list(_EXTENSIONS)}. "
                         "Pass 'png' (lossless) or 'jpeg' (smaller, lossy).")
    if image_format == "jpeg" and images.ndim == 4 and images.shape[-1] == 4:
        raise ValueError("image_format='jpeg' cannot store an alpha channel. Pass "
                         "image_format='png', or drop the alpha with images[..., :3].")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MANIFEST).unlink(missing_ok=True)  # the folder is incomplete until the end
    extension = _EXTENSIONS[image_format]
    digits = max(6, len(str(len(images) - 1)))
    for record_key, image in enumerate(images):
        encoded = io.BytesIO()
        Image.fromarray(image).save(encoded, format=image_format.upper())
        (directory / _file_name(record_key, digits, extension)).write_bytes(encoded.getvalue())
    np.save(directory / LABELS, labels)
    manifest = {"count": len(images), "format": image_format, "extension": extension,
                "digits": digits, "labels": LABELS}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return directory


# What each manifest entry must be; `write_image_folder` writes all of them.
_MANIFEST_TYPES = {"count": int, "format": str, "extension": str, "digits": int, "labels": str}


def _read_manifest(path: Path, how: str) -> dict:
    """The manifest's entries, or an error naming the file and what is wrong with it."""
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{str(path)!r} is truncated or damaged: it is not valid JSON "
                         f"({error}). {how}") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{str(path)!r} holds a JSON {type(manifest).__name__}, not the "
                         f"manifest object of an image folder. {how}")
    for key, kind in _MANIFEST_TYPES.items():
        if key not in manifest:
            raise ValueError(f"{str(path)!r} has no {key!r} entry (it has {sorted(manifest)}), "
                             f"so it is not the manifest of a complete image folder. {how}")
        if not isinstance(manifest[key], kind) or isinstance(manifest[key], bool):
            raise ValueError(f"{str(path)!r} has {key}={manifest[key]!r}, which should be a "
                             f"{kind.__name__}. {how}")
    return manifest


def _read_labels(path: Path, count: int, how: str) -> np.ndarray:
    try:
        labels = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as error:
        raise ValueError(f"{str(path)!r} is missing, truncated or not a NumPy file of labels "
                         f"({type(error).__name__}). {how}") from None
    if labels.shape != (count,):
        raise ValueError(f"{str(path)!r} holds labels of shape {labels.shape}, but the "
                         f"manifest counts {count} records. {how}")
    return labels


class ImageFolderDataSource:
    """Records `{"image": <encoded bytes>, "label": int}` from a folder on disk.

    `__getitem__` only reads the file's bytes: decoding belongs to `DecodeImage`, so that it
    runs in workers. The source holds just the folder path and the labels, so it pickles
    small and cheaply when sent to worker processes.
    """

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        how = "Call write_image_folder(images, labels, directory) to create it."
        if not self.directory.is_dir():
            raise FileNotFoundError(f"directory={str(self.directory)!r} does not exist. {how}")
        manifest_path = self.directory / MANIFEST
        if not manifest_path.is_file():
            raise FileNotFoundError(
                f"{str(manifest_path)!r} is missing, so directory={str(self.directory)!r} is "
                f"not a complete image folder (or its writing was interrupted). {how}")
        manifest = _read_manifest(manifest_path, how)
        self._count = manifest["count"]
        self._extension = manifest["extension"]
        self._digits = manifest["digits"]
        self.labels = _read_labels(self.directory / manifest["labels"], self._count, how)

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, record_key: int) -> dict:
        record_key = check_int("record_key", record_key)
        if not -self._count <= record_key < self._count:
            raise IndexError(f"record_key={record_key} is out of range for {self._count} "
                             f"records. Pass 0 <= record_key < {self._count}.")
        record_key %= self._count
        path = self.directory / _file_name(record_key, self._digits, self._extension)
        return {"image": path.read_bytes(), "label": int(self.labels[record_key])}

    def __repr__(self) -> str:
        return f"ImageFolderDataSource({str(self.directory)!r}, {self._count} records)"
