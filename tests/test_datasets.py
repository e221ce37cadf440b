"""Data sets: embedded digits, the IDX format, and the MNIST download, fully offline.

The download tests serve small generated IDX files from a local HTTP server bound to
127.0.0.1, so they never touch the network.
"""

import functools
import gzip
import hashlib
import http.server
import socket
import threading

import numpy as np
import pytest

from course_lib.datasets import (
    MNIST_SHA256,
    DownloadError,
    encode_idx,
    load_digits,
    load_mnist,
    parse_idx,
)

# --- load_digits -------------------------------------------------------------------------


def test_load_digits_is_uint8_images_and_int32_labels():
    digits = load_digits()
    assert digits["image"].shape == (1797, 8, 8) and digits["image"].dtype == np.uint8
    assert digits["label"].shape == (1797,) and digits["label"].dtype == np.int32
    assert digits["image"].min() == 0 and digits["image"].max() == 255
    assert set(np.unique(digits["label"])) == set(range(10))


# --- IDX ---------------------------------------------------------------------------------


@pytest.mark.parametrize("array", [
    np.arange(10, dtype=np.uint8),
    np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4),
    np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
    np.array([-70000, 5, 70000], dtype=np.int32),
])
def test_idx_round_trip(array):
    parsed = parse_idx(encode_idx(array))
    assert parsed.dtype == array.dtype and parsed.dtype.isnative
    np.testing.assert_array_equal(parsed, array)


def test_idx_header_is_the_published_layout():
    encoded = encode_idx(np.zeros((2, 28, 28), np.uint8))
    assert encoded[:16] == bytes([0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 28, 0, 0, 0, 28])
    assert len(encoded) == 16 + 2 * 28 * 28


def test_idx_values_are_big_endian():
    assert encode_idx(np.array([1], dtype=np.int32))[-4:] == b"\x00\x00\x00\x01"


@pytest.mark.parametrize("data, pattern", [
    (b"\x1f\x8b\x08\x00", r"not an IDX magic number.*gzip"),
    (b"\x00\x00\x07\x01" + b"\x00" * 8, r"type code 0x07 is unknown"),
    (b"\x00\x00\x08\x03\x00\x00", r"too few for the 3 dimension sizes"),
    (encode_idx(np.zeros((4, 5), np.uint8))[:-1], r"announces shape \(4, 5\).*truncated"),
])
def test_parse_idx_rejects_bad_data(data, pattern):
    with pytest.raises(ValueError, match=pattern):
        parse_idx(data)


def test_encode_idx_rejects_unsupported_dtype():
    with pytest.raises(TypeError, match=r"dtype int64, which IDX cannot store"):
        encode_idx(np.zeros(3, np.int64))


# --- load_mnist, served from 127.0.0.1 ---------------------------------------------------


def fake_mnist_files() -> tuple[dict[str, bytes], dict[str, np.ndarray]]:
    generator = np.random.default_rng(0)
    arrays = {
        "train-images-idx3-ubyte.gz": generator.integers(0, 256, (50, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte.gz": generator.integers(0, 10, 50, dtype=np.uint8),
        "t10k-images-idx3-ubyte.gz": generator.integers(0, 256, (20, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte.gz": generator.integers(0, 10, 20, dtype=np.uint8),
    }
    files = {name: gzip.compress(encode_idx(array), mtime=0) for name, array in arrays.items()}
    return files, arrays


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # keep test output clean
        pass


class LocalMirror:
    """A throwaway HTTP mirror of fake MNIST files on 127.0.0.1."""

    def __init__(self, directory):
        self.files, self.arrays = fake_mnist_files()
        for name, data in self.files.items():
            (directory / name).write_bytes(data)
        self.hashes = {name: hashlib.sha256(data).hexdigest() for name, data in self.files.items()}
        handler = functools.partial(QuietHandler, directory=str(directory))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()
        self.running = True

    def stop(self):
        if self.running:
            self.server.shutdown()
            self.server.server_close()
            self.thread.join()
            self.running = False


@pytest.fixture
def mirror(tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    local_mirror = LocalMirror(served)
    yield local_mirror
    local_mirror.stop()


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/"  # nothing listens there now: connection refused


def test_download_parses_checks_and_caches(tmp_path, mirror):
    cache = tmp_path / "cache"
    mnist = load_mnist(cache_dir=cache, base_url=mirror.url, hashes=mirror.hashes, timeout=5)
    np.testing.assert_array_equal(mnist["train"]["image"],
                                  mirror.arrays["train-images-idx3-ubyte.gz"])
    np.testing.assert_array_equal(mnist["test"]["label"],
                                  mirror.arrays["t10k-labels-idx1-ubyte.gz"])
    assert mnist["train"]["image"].dtype == np.uint8
    assert mnist["train"]["label"].dtype == np.int32
    assert mnist["test"]["image"].shape == (20, 28, 28)
    assert sorted(p.name for p in cache.iterdir()) == sorted(MNIST_SHA256)

    mirror.stop()
    again = load_mnist(cache_dir=cache, base_url=mirror.url, hashes=mirror.hashes, timeout=5)
    np.testing.assert_array_equal(again["train"]["image"], mnist["train"]["image"])


def test_damaged_cached_file_is_downloaded_again(tmp_path, mirror):
    cache = tmp_path / "cache"
    load_mnist(cache_dir=cache, base_url=mirror.url, hashes=mirror.hashes, timeout=5)
    (cache / "t10k-labels-idx1-ubyte.gz").write_bytes(b"damaged")
    mnist = load_mnist(cache_dir=cache, base_url=mirror.url, hashes=mirror.hashes, timeout=5)
    np.testing.assert_array_equal(mnist["test"]["label"],
                                  mirror.arrays["t10k-labels-idx1-ubyte.gz"])


def test_wrong_hash_raises_and_leaves_no_file(tmp_path, mirror):
    cache = tmp_path / "cache"
    wrong = {**mirror.hashes, "train-images-idx3-ubyte.gz": "0" * 64}
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte\.gz gave a file with "
                                         r"SHA-256 [0-9a-f]{64}, expected 0{64}; it was deleted"):
        load_mnist(cache_dir=cache, base_url=mirror.url, hashes=wrong, timeout=5)
    assert list(cache.iterdir()) == []


def test_offline_error_names_the_url_and_load_digits(tmp_path):
    url = closed_port_url()
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError, match=r"MNIST could not be downloaded from "
                                            rf"{url}train-images.*course_lib\.load_digits\(\)"):
        load_mnist(cache_dir=cache, base_url=url, timeout=2)
    assert list(cache.iterdir()) == []


def test_missing_file_on_the_mirror_is_a_download_error(tmp_path, mirror):
    (tmp_path / "served" / "t10k-images-idx3-ubyte.gz").unlink()
    with pytest.raises(DownloadError, match=r"t10k-images-idx3-ubyte\.gz \(HTTP 404 "):
        load_mnist(cache_dir=tmp_path / "cache", base_url=mirror.url, hashes=mirror.hashes,
                   timeout=5)


def test_download_error_is_a_connection_error():
    assert issubclass(DownloadError, ConnectionError)


def test_hashes_must_cover_every_file(tmp_path):
    with pytest.raises(ValueError, match=r"hashes has no SHA-256 for \['t10k-labels"):
        load_mnist(cache_dir=tmp_path, hashes={k: v for k, v in MNIST_SHA256.items()
                                               if not k.startswith("t10k-labels")})


def test_published_hashes_are_pinned():
    assert MNIST_SHA256["train-images-idx3-ubyte.gz"].startswith("440fcabf73cc546f")
    assert all(len(value) == 64 for value in MNIST_SHA256.values())
