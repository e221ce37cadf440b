"""Damaged files on disk are named, with what is wrong with them, and never loaded unsafely."""

from __future__ import annotations

import json

import numpy as np
import pytest

from course_lib.image_folder import MANIFEST, ImageFolderDataSource, write_image_folder
from course_lib.record_file import RecordFileDataSource, write_record_file


@pytest.fixture
def record_file(tmp_path):
    arrays = {"image": np.arange(20 * 12, dtype=np.uint8).reshape(20, 3, 4),
              "label": np.arange(20, dtype=np.int64)}
    return write_record_file(tmp_path / "train.npy", arrays)


def _refusal(path) -> str:
    with pytest.raises(ValueError) as caught:
        RecordFileDataSource(path)
    message = str(caught.value)
    assert str(path) in message
    assert "allow_pickle" not in message
    return message


def test_a_truncated_record_file_is_named_as_truncated(record_file):
    data = record_file.read_bytes()
    record_file.write_bytes(data[:-7])
    message = _refusal(record_file)
    assert "truncated" in message and "20 records" in message


def test_an_empty_record_file_is_not_a_record_file(record_file):
    record_file.write_bytes(b"")
    assert "not a record file" in _refusal(record_file)


def test_random_bytes_are_not_a_record_file(tmp_path):
    path = tmp_path / "noise.npy"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 3000, dtype=np.uint8).tobytes())
    assert "not a record file" in _refusal(path)


def test_a_pickled_npy_file_is_refused_without_suggesting_to_unpickle_it(tmp_path):
    path = tmp_path / "objects.npy"
    np.save(path, np.array([{"image": 1}, None], dtype=object), allow_pickle=True)
    assert "not a record file" in _refusal(path)


def test_a_header_cut_in_the_middle_is_not_a_record_file(record_file):
    record_file.write_bytes(record_file.read_bytes()[:30])
    assert "not a record file" in _refusal(record_file)


@pytest.fixture
def image_folder(tmp_path):
    images = np.random.default_rng(0).integers(0, 256, size=(4, 5, 6), dtype=np.uint8)
    return write_image_folder(images, np.arange(4), tmp_path / "digits")


def test_a_truncated_manifest_names_its_path(image_folder):
    manifest = image_folder / MANIFEST
    manifest.write_text(manifest.read_text()[:20])
    with pytest.raises(ValueError) as caught:
        ImageFolderDataSource(image_folder)
    message = str(caught.value)
    assert str(manifest) in message and "truncated" in message
    assert "write_image_folder" in message


@pytest.mark.parametrize("missing", ["extension", "count"])
def test_a_manifest_without_a_key_names_the_key(image_folder, missing):
    manifest = image_folder / MANIFEST
    content = json.loads(manifest.read_text())
    del content[missing]
    manifest.write_text(json.dumps(content))
    with pytest.raises(ValueError, match=f"'{missing}'") as caught:
        ImageFolderDataSource(image_folder)
    assert str(manifest) in str(caught.value)


def test_a_manifest_that_is_not_an_object_names_its_path(image_folder):
    manifest = image_folder / MANIFEST
    manifest.write_text("[1, 2]")
    with pytest.raises(ValueError, match="manifest") as caught:
        ImageFolderDataSource(image_folder)
    assert str(manifest) in str(caught.value)


def test_truncated_labels_name_their_path(image_folder):
    labels = image_folder / "labels.npy"
    labels.write_bytes(labels.read_bytes()[:-5])
    with pytest.raises(ValueError) as caught:
        ImageFolderDataSource(image_folder)
    assert str(labels) in str(caught.value) and "allow_pickle" not in str(caught.value)


def test_a_record_file_cut_short_after_opening_says_so_at_read_time(record_file):
    source = RecordFileDataSource(record_file)  # the header was whole when it was opened
    needed = record_file.stat().st_size
    record_file.write_bytes(record_file.read_bytes()[:-7])
    with pytest.raises(ValueError) as caught:
        source[0]
    message = str(caught.value)
    assert str(record_file) in message and "cut short after this source was opened" in message
    assert f"need {needed} bytes" in message and f"now holds {needed - 7} bytes" in message
    assert "write_record_file" in message
    assert "mmap length is greater than file size" in message  # NumPy's words are kept


def test_an_array_record_file_cut_short_is_named_with_its_size(tmp_path):
    pytest.importorskip("array_record")
    from course_lib.array_record import ArrayRecordDataSource, write_array_record_shards

    (path,) = write_array_record_shards([bytes([n]) * 3000 for n in range(40)], tmp_path, 1)
    path.write_bytes(path.read_bytes()[:70_000])
    with pytest.raises(ValueError) as caught:
        ArrayRecordDataSource(path)
    message = str(caught.value)
    assert str(path) in message and "70000 bytes" in message
    assert "not a readable ArrayRecord file" in message and "write_array_record_shards" in message
