"""Data sets for the lessons: 8x8 digits shipped offline, and MNIST downloaded on demand.

`load_digits()` needs no network (scikit-learn ships the data), so it is the default for
lessons and tests. `load_mnist()` downloads the four classic MNIST files once, checks each
against its published SHA-256, and caches them. The files use the IDX format, which is
simple enough to parse by hand; `parse_idx` does so and `encode_idx` writes it.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import shutil
import struct
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

MNIST_BASE_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"

# Published SHA-256 of the gzipped files (the same values are pinned by torchvision's
# MNIST loader and many other projects).
MNIST_SHA256 = {
    "train-images-idx3-ubyte.gz":
        "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "train-labels-idx1-ubyte.gz":
        "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "t10k-images-idx3-ubyte.gz":
        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "t10k-labels-idx1-ubyte.gz":
        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
}

_SPLITS = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}

# IDX type codes (third byte of the magic number); all values are stored big-endian.
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_IDX_CODES = {np.dtype(dtype).newbyteorder("="): code for code, dtype in _IDX_DTYPES.items()}


class DownloadError(ConnectionError):
    """A data set file could not be fetched (offline, blocked, or the mirror is down)."""


def load_digits() -> dict[str, np.ndarray]:
    """The 1,797 8x8 handwritten digits shipped with scikit-learn, as uint8 0..255 images.

    They need no download, so every lesson and test can run offline; the pixel range is
    stretched from 0..16 to 0..255 so that the same transforms work on digits and MNIST.
    """
    from sklearn.datasets import load_digits as sklearn_load_digits  # slow import, load lazily

    digits = sklearn_load_digits()
    images = np.rint(digits.images * (255 / 16)).astype(np.uint8)
    return {"image": images, "label": digits.target.astype(np.int32)}


def parse_idx(data: bytes) -> np.ndarray:
    """Parse the bytes of an (uncompressed) IDX file into a native-endian array.

    Layout: two zero bytes, a type code byte, a byte with the number of dimensions, one
    big-endian uint32 per dimension, then the values, big-endian, in C order.
    """
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"data starts with {bytes(data[:4])!r}, not an IDX magic number "
                         "(0x00 0x00 <type> <ndim>). Is it still gzipped? gzip.decompress it.")
    code, ndim = data[2], data[3]
    if code not in _IDX_DTYPES:
        raise ValueError(f"IDX type code {code:#04x} is unknown; expected one of "
                         f"{[f'{c:#04x}' for c in _IDX_DTYPES]}. The file may be corrupt.")
    header_size = 4 + 4 * ndim
    if len(data) < header_size:
        raise ValueError(f"data has {len(data)} bytes, too few for the {ndim} dimension sizes "
                         "its header announces. The file is truncated: download it again.")
    shape = struct.unpack(f">{ndim}I", data[4:header_size])
    dtype = np.dtype(_IDX_DTYPES[code])
    expected = header_size + int(np.prod(shape)) * dtype.itemsize
    if len(data) != expected:
        raise ValueError(f"data has {len(data)} bytes but its header announces shape {shape} "
                         f"of {dtype.newbyteorder('=')}, {expected} bytes in all. The file is "
                         "truncated or corrupt: download it again.")
    values = np.frombuffer(data, dtype=dtype, offset=header_size).reshape(shape)
    return values.astype(dtype.newbyteorder("="))  # a writable, native-endian copy


def encode_idx(array: np.ndarray) -> bytes:
    """Encode `array` in the IDX format; the inverse of `parse_idx`."""
    array = np.asarray(array)
    native = array.dtype.newbyteorder("=")
    if native not in _IDX_CODES:
        raise TypeError(f"array has dtype {array.dtype}, which IDX cannot store. Convert to "
                        "uint8, int8, int16, int32, float32 or float64.")
    if not 1 <= array.ndim <= 255:
        raise ValueError(f"array has {array.ndim} dimensions; IDX stores 1 to 255.")
    header = struct.pack(f">BBBB{array.ndim}I", 0, 0, _IDX_CODES[native], array.ndim,
                         *array.shape)
    return header + array.astype(native.newbyteorder(">")).tobytes()


def default_cache_dir() -> Path:
    """`$FEED_THE_BEAST_DATA/mnist` if that variable is set, else ~/.cache/feed_the_beast/mnist.

    One environment variable moves every course download, e.g. to a shared or larger disk.
    """
    root = os.environ.get("FEED_THE_BEAST_DATA")
    base = Path(root) if root else Path.home() / ".cache" / "feed_the_beast"
    return base / "mnist"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download(url: str, target: Path, sha256: str, timeout: float) -> None:
    """Fetch `url` into a temporary file next to `target`, check it, then rename it.

    The rename is atomic, so `target` is either absent or complete and verified.
    """
    handle, name = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".part")
    partial = Path(name)
    try:
        try:
            with os.fdopen(handle, "wb") as file, \
                    urllib.request.urlopen(url, timeout=timeout) as response:
                shutil.copyfileobj(response, file)
        except (urllib.error.URLError, http.client.HTTPException, TimeoutError,
                ConnectionError) as error:
            reason = (f"HTTP {error.code} {error.reason}"
                      if isinstance(error, urllib.error.HTTPError)
                      else getattr(error, "reason", error))
            raise DownloadError(
                f"MNIST could not be downloaded from {url} ({reason}). Check the network, or "
                "pass another base_url=. Offline, use course_lib.load_digits(): embedded 8x8 "
                "digits that need no download.") from error
        actual = _sha256(partial)
        if actual != sha256:
            raise ValueError(
                f"{url} gave a file with SHA-256 {actual}, expected {sha256}; it was deleted. "
                "The mirror may serve a different or damaged file: try again or pass another "
                "base_url=.")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _check_hashes(hashes: dict[str, str]) -> None:
    missing = [name for name in MNIST_SHA256 if name not in hashes]
    if missing:
        raise ValueError(f"hashes has no SHA-256 for {missing}. Pass a dict with an entry for "
                         f"each of {list(MNIST_SHA256)}.")


def load_mnist(cache_dir: str | Path | None = None, *, base_url: str = MNIST_BASE_URL,
               hashes: dict[str, str] | None = None,
               timeout: float = 30.0) -> dict[str, dict[str, np.ndarray]]:
    """MNIST as `{"train": {"image", "label"}, "test": {...}}`: uint8 images, int32 labels.

    The four gzipped IDX files are downloaded once into `cache_dir` (see
    `default_cache_dir`) and checked against `hashes` (filename -> SHA-256, the published
    values by default), so a damaged or substituted file is never used. Offline it raises
    `DownloadError`; `load_digits()` is the offline fallback.
    """
    hashes = MNIST_SHA256 if hashes is None else hashes
    _check_hashes(hashes)
    if not isinstance(base_url, str) or not base_url:
        raise TypeError(f"base_url={base_url!r} must be a URL string, e.g. {MNIST_BASE_URL!r}.")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ValueError(f"timeout={timeout!r} must be a positive number of seconds, e.g. 30.")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    result = {}
    for split, (images_name, labels_name) in _SPLITS.items():
        arrays = []
        for name in (images_name, labels_name):
            path = cache / name
            if not path.is_file() or _sha256(path) != hashes[name]:
                _download(base_url.rstrip("/") + "/" + name, path, hashes[name], timeout)
            arrays.append(parse_idx(gzip.decompress(path.read_bytes())))
        images, labels = arrays
        if images.ndim != 3 or labels.shape != images.shape[:1]:
            raise ValueError(f"{split} images have shape {images.shape} and labels "
                             f"{labels.shape}; expected (N, H, W) and (N,).")
        result[split] = {"image": images, "label": labels.astype(np.int32)}
    return result
