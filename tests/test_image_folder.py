"""Image folder: write real files, read bytes back, decode to the original pixels."""

import json
import pickle

import numpy as np
import pytest

from course_lib.augment import DecodeImage
from course_lib.image_folder import ImageFolderDataSource, write_image_folder


@pytest.fixture
def digits() -> tuple[np.ndarray, np.ndarray]:
    generator = np.random.default_rng(0)
    images = generator.integers(0, 256, size=(12, 8, 7), dtype=np.uint8)
    labels = generator.integers(0, 10, size=12)
    return images, labels


def test_png_round_trip_gives_back_every_pixel_and_label(tmp_path, digits):
    images, labels = digits
    source = ImageFolderDataSource(write_image_folder(images, labels, tmp_path / "digits"))
    decode = DecodeImage()
    assert len(source) == 12
    for record_key in range(len(source)):
        record = source[record_key]
        assert isinstance(record["image"], bytes) and record["image"][:4] == b"\x89PNG"
        assert record["label"] == labels[record_key] and isinstance(record["label"], int)
        np.testing.assert_array_equal(decode.map(record)["image"], images[record_key])


def test_rgb_round_trip_and_negative_keys(tmp_path):
    images = np.random.default_rng(1).integers(0, 256, size=(3, 4, 5, 3), dtype=np.uint8)
    source = ImageFolderDataSource(write_image_folder(images, [0, 1, 2], tmp_path))
    np.testing.assert_array_equal(DecodeImage().map(source[-1])["image"], images[2])


def test_folder_layout_is_one_zero_padded_file_per_record(tmp_path, digits):
    images, labels = digits
    write_image_folder(images, labels, tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.png"))[:2] == ["000000.png", "000001.png"]
    assert len(list(tmp_path.glob("*.png"))) == 12
    assert json.loads((tmp_path / "manifest.json").read_text())["count"] == 12
    np.testing.assert_array_equal(np.load(tmp_path / "labels.npy"), labels)


def test_jpeg_is_lossy_but_close(tmp_path):
    images = np.full((2, 16, 16, 3), 120, dtype=np.uint8)
    write_image_folder(images, [0, 1], tmp_path, image_format="jpeg")
    source = ImageFolderDataSource(tmp_path)
    assert source[0]["image"][:2] == b"\xff\xd8"
    decoded = DecodeImage().map(source[0])["image"].astype(int)
    assert np.abs(decoded - 120).max() <= 3


def test_source_pickles_without_image_bytes(tmp_path, digits):
    images, labels = digits
    source = ImageFolderDataSource(write_image_folder(images, labels, tmp_path))
    copy = pickle.loads(pickle.dumps(source))
    assert copy[5] == source[5]
    assert len(pickle.dumps(source)) < 1000


def test_missing_directory_says_to_write_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nowhere'? does not exist.*write_image_folder"):
        ImageFolderDataSource(tmp_path / "nowhere")


def test_missing_manifest_names_the_path(tmp_path, digits):
    write_image_folder(*digits, tmp_path)
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"manifest\.json'? is missing.*write_image_folder"):
        ImageFolderDataSource(tmp_path)


def test_out_of_range_key_raises_index_error(tmp_path, digits):
    source = ImageFolderDataSource(write_image_folder(*digits, tmp_path))
    with pytest.raises(IndexError, match=r"record_key=12 is out of range for 12 records"):
        source[12]


@pytest.mark.parametrize("images, labels, kwargs, error, pattern", [
    (np.zeros((2, 4, 4), np.float32), [0, 1], {}, TypeError, r"dtype float32.*uint8"),
    (np.zeros((2, 4, 4, 1), np.uint8), [0, 1], {}, ValueError, r"images\[\.\.\., 0\]"),
    (np.zeros((2, 4, 4), np.uint8), [0], {}, ValueError, r"labels has shape \(1,\)"),
    (np.zeros((2, 4, 4), np.uint8), [0, 1], {"image_format": "gif"}, ValueError,
     r"image_format='gif' is not one of"),
    (np.zeros((2, 4, 4, 4), np.uint8), [0, 1], {"image_format": "jpeg"}, ValueError,
     r"alpha channel"),
])
def test_write_rejects_bad_input_with_the_fix(tmp_path, images, labels, kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        write_image_folder(images, labels, tmp_path, **kwargs)
