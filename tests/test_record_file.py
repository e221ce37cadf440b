"""Record file: fixed-size records on disk, mapped lazily, pickled as a path."""

import pickle

import numpy as np
import pytest

from course_lib.record_file import RecordFileDataSource, write_record_file


@pytest.fixture
def arrays() -> dict[str, np.ndarray]:
    generator = np.random.default_rng(0)
    return {"image": generator.integers(0, 256, size=(40, 28, 28), dtype=np.uint8),
            "label": generator.integers(0, 10, size=40).astype(np.int64)}


def test_round_trip_returns_every_record(tmp_path, arrays):
    source = RecordFileDataSource(write_record_file(tmp_path / "train.npy", arrays))
    assert len(source) == 40
    assert source.dtype == np.dtype([("image", np.uint8, (28, 28)), ("label", np.int64)])
    for record_key in range(40):
        record = source[record_key]
        np.testing.assert_array_equal(record["image"], arrays["image"][record_key])
        assert record["label"] == arrays["label"][record_key]
    np.testing.assert_array_equal(source[-1]["image"], arrays["image"][-1])


def test_records_are_writable_copies_not_views_of_the_map(tmp_path, arrays):
    source = RecordFileDataSource(write_record_file(tmp_path / "train.npy", arrays))
    image = source[0]["image"]
    image[0, 0] += 1  # would fail on a read-only view of the map
    assert source[0]["image"][0, 0] == arrays["image"][0, 0, 0]


def test_getitems_equals_one_read_per_key(tmp_path, arrays):
    source = RecordFileDataSource(write_record_file(tmp_path / "train.npy", arrays))
    keys = [7, 0, 39, 7, 12]
    batch = source.__getitems__(keys)
    assert len(batch) == len(keys)
    for key, record in zip(keys, batch, strict=True):
        np.testing.assert_array_equal(record["image"], source[key]["image"])
        assert record["label"] == source[key]["label"]


def test_map_is_opened_lazily_and_pickling_sends_only_the_path(tmp_path):
    big = {"image": np.ones((4096, 32, 32), np.uint8), "label": np.arange(4096)}  # 4 MiB
    path = write_record_file(tmp_path / "big.npy", big)
    assert path.stat().st_size > 4 * 2**20
    source = RecordFileDataSource(path)
    assert source._records is None  # nothing mapped until the first read
    assert source[3]["label"] == 3
    assert source._records is not None
    payload = pickle.dumps(source)
    assert len(payload) < 2000
    worker_copy = pickle.loads(payload)
    assert worker_copy._records is None
    assert worker_copy[4095]["label"] == 4095


def test_writing_leaves_no_partial_file(tmp_path, arrays):
    write_record_file(tmp_path / "train.npy", arrays)
    assert [p.name for p in tmp_path.iterdir()] == ["train.npy"]


def test_missing_file_says_to_write_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"absent\.npy'? does not exist.*write_record_file"):
        RecordFileDataSource(tmp_path / "absent.npy")


def test_plain_npy_file_is_refused(tmp_path):
    np.save(tmp_path / "plain.npy", np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"not a 1-D array of records.*write_record_file"):
        RecordFileDataSource(tmp_path / "plain.npy")


@pytest.mark.parametrize("bad, error, pattern", [
    ({"image": np.zeros((3, 2)), "label": np.zeros(4)}, ValueError,
     r"different lengths \{'image': 3, 'label': 4\}"),
    ({}, ValueError, r"must be a non-empty dict"),
    ({"label": np.array(3)}, ValueError, r"arrays\['label'\] is a scalar"),
    ({"name": np.array(["a", None])}, TypeError, r"dtype object"),
])
def test_write_rejects_bad_arrays(tmp_path, bad, error, pattern):
    with pytest.raises(error, match=pattern):
        write_record_file(tmp_path / "bad.npy", bad)
    assert not list(tmp_path.iterdir())
