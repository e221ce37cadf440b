"""Large arrays reach the workers as shared memory (or their file), whatever object holds them.

The course's own pattern is a custom source holding NumPy arrays in attributes. Its arrays,
like an `ArrayDataSource`'s, must be copied once and mapped by every worker, not pickled to
each of them; and the batches must stay identical to `worker_count=0`.
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
from segments import existing_segments, record_created_segments, record_payload_sizes

import course_lib
from course_lib import Batch, DataLoader, IndexSampler, MapTransform
from course_lib.shared_arrays import MIN_SHARED_BYTES, SharedArrays, _map_file, _place_in_file

NUM_RECORDS = 4096


class MNISTSource:
    """The course's custom source: arrays in attributes, a dict record per key."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, record_key: int) -> dict:
        return {"image": self.images[record_key], "label": self.labels[record_key]}


class NestedSource:
    """Arrays inside a dict, a list and a tuple."""

    def __init__(self, images: np.ndarray, features: np.ndarray, labels: np.ndarray):
        self.fields = {"image": images}
        self.columns = [features]
        self.pair = (images, labels)  # the same images again: shared once

    def __len__(self) -> int:
        return len(self.pair[1])

    def __getitem__(self, record_key: int) -> tuple:
        return (self.fields["image"][record_key], self.columns[0][record_key],
                self.pair[1][record_key])


class AddTable(MapTransform):
    """A transform holding a large array of its own (a lookup table)."""

    def __init__(self, table: np.ndarray):
        self.table = table

    def map(self, element):
        image, features, label = element
        return image.astype(np.int32) + self.table[label], features, label


def _arrays() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (NUM_RECORDS, 32, 32), dtype=np.uint8)  # 4 MiB
    return images, np.arange(NUM_RECORDS, dtype=np.int64) % 10


def _loader(source, operations=(), worker_count: int = 2) -> DataLoader:
    sampler = IndexSampler(len(source), shuffle=True, seed=5, num_epochs=1)
    return DataLoader(data_source=source, sampler=sampler,
                      operations=[*operations, Batch(64)], worker_count=worker_count)


def _data_segments(names) -> list[str]:
    return [name for name in names if "_data" in name]



def _first_batches(loader: DataLoader, count: int = 8) -> list:
    with iter(loader) as iterator:
        return [next(iterator) for _ in range(count)]


@pytest.mark.timeout(60)
def test_a_custom_source_sends_its_arrays_as_shared_memory_not_pickled(monkeypatch,
                                                                      assert_same):
    sizes, created = record_payload_sizes(monkeypatch), record_created_segments(monkeypatch)
    source = MNISTSource(*_arrays())
    got = _first_batches(_loader(source))
    assert sizes and max(sizes) < 64 * 1024, f"payload of {sizes} bytes: the images went too"
    assert len(_data_segments(created)) == 1, "the images were not copied into one segment"
    assert_same(got, _first_batches(_loader(source, worker_count=0)))
    assert existing_segments(created) == []


@pytest.mark.timeout(60)
def test_arrays_in_dicts_lists_tuples_and_transforms_are_shared_each_once(monkeypatch,
                                                                         assert_same):
    sizes, created = record_payload_sizes(monkeypatch), record_created_segments(monkeypatch)
    images, labels = _arrays()
    features = np.random.default_rng(1).random((NUM_RECORDS, 128), np.float32)  # 2 MiB
    source = NestedSource(images, features, labels)  # labels: 32 KiB, pickled
    table = np.arange(320 * 32 * 32, dtype=np.int32).reshape(320, 32, 32)  # 1.25 MiB
    operations = [AddTable(table)]
    got = _first_batches(_loader(source, operations))
    assert sizes and max(sizes) < 64 * 1024, f"payload of {sizes} bytes"
    assert len(_data_segments(created)) == 3, (
        f"expected images, labels and table in one segment each: {created}")
    assert_same(got, _first_batches(_loader(source, operations, worker_count=0)))
    assert existing_segments(created) == []


@pytest.mark.timeout(60)
def test_small_arrays_stay_pickled(monkeypatch, assert_same):
    created = record_created_segments(monkeypatch)
    images, labels = _arrays()
    source = MNISTSource(images[:256, :8, :8], labels[:256])  # 16 KiB
    assert source.images.nbytes < MIN_SHARED_BYTES
    got = _first_batches(_loader(source), count=4)
    assert _data_segments(created) == []
    assert_same(got, _first_batches(_loader(source, worker_count=0), count=4))


@pytest.mark.timeout(60)
def test_writing_into_a_shared_array_in_a_worker_is_a_clear_error():
    class CountingSource(MNISTSource):
        def __getitem__(self, record_key):
            self.labels[record_key] += 1  # diverges silently when each worker has a copy
            return super().__getitem__(record_key)

    images, labels = _arrays()
    source = CountingSource(images, np.repeat(labels, 64))  # 2 MiB labels: shared
    with pytest.raises(ValueError, match="read-only") as caught:
        _first_batches(_loader(source), count=1)
    notes = "\n".join(getattr(caught.value, "__notes__", ()))
    assert "shared by every worker" in notes and ".copy()" in notes, notes


@pytest.mark.timeout(60)
def test_a_memory_mapped_array_of_a_custom_source_travels_as_its_file(tmp_path, monkeypatch,
                                                                     assert_same):
    sizes, created = record_payload_sizes(monkeypatch), record_created_segments(monkeypatch)
    images, labels = _arrays()
    np.save(tmp_path / "images.npy", images)
    source = MNISTSource(np.load(tmp_path / "images.npy", mmap_mode="r"), labels)
    got = _first_batches(_loader(source))
    assert sizes and max(sizes) < 64 * 1024
    assert _data_segments(created) == [], "the mapped file was copied into shared memory"
    assert_same(got, _first_batches(_loader(MNISTSource(images, labels), worker_count=0)))


@pytest.mark.parametrize("view", [
    pytest.param(lambda records: records, id="records"),
    pytest.param(lambda records: records["image"], id="field"),
    pytest.param(lambda records: records["image"][1000:3000], id="rows"),
    pytest.param(lambda records: records["image"][::-3, 5:, ::2], id="strided-backwards"),
    pytest.param(lambda records: np.asarray(records)["label"], id="plain-array-over-a-map"),
])
def test_a_view_of_a_mapped_file_is_rebuilt_from_its_place_in_the_file(tmp_path, view):
    records = np.zeros(4096, [("label", "<i8"), ("image", "u1", (16, 20))])
    records["image"] = np.arange(4096 * 320).reshape(4096, 16, 20) % 253
    records["label"] = np.arange(4096)
    np.save(tmp_path / "records.npy", records)
    array = view(np.load(tmp_path / "records.npy", mmap_mode="r"))
    place = _place_in_file(array)
    assert place is not None and place[0] == str(tmp_path / "records.npy")
    rebuilt = _map_file(*place)
    assert rebuilt.dtype == array.dtype and not rebuilt.flags.writeable
    np.testing.assert_array_equal(rebuilt, array, strict=True)


def test_what_cannot_be_shared_safely_is_left_to_pickle(tmp_path):
    shared = SharedArrays("ftbtest" + os.urandom(4).hex())
    try:
        size = MIN_SHARED_BYTES
        assert shared.reduce(np.array([str(i) for i in range(size // 8)], dtype=object)) is None
        assert shared.reduce(np.ma.masked_array(np.zeros(size, np.uint8))) is None
        assert shared.reduce(np.zeros(size - 1, np.uint8)) is None
        np.save(tmp_path / "a.npy", np.arange(size, dtype=np.uint8))
        private = np.load(tmp_path / "a.npy", mmap_mode="c")  # copy-on-write: not the file
        function, args = shared.reduce(private)
        assert function.__name__ == "_map_segment"
        np.testing.assert_array_equal(function(*args), private)
    finally:
        shared.unlink()
    if os.path.isdir("/dev/shm"):  # Linux names its segments there
        assert not [name for name in os.listdir("/dev/shm") if name.startswith(shared.prefix)]


def test_a_shared_array_pickles_as_a_reference_and_maps_read_only():
    shared = SharedArrays("ftbtest" + os.urandom(4).hex())
    try:
        array = np.arange(MIN_SHARED_BYTES // 4, dtype=np.float32).reshape(-1, 256)
        function, args = shared.reduce(array)
        assert len(pickle.dumps(args)) < 1024
        view = function(*args)
        np.testing.assert_array_equal(view, array)
        with pytest.raises(ValueError, match="read-only"):
            view[0, 0] = 1
    finally:
        shared.unlink()


class ManyLabelsSource:
    """A source whose pickled form is large: a Python list, which no segment can hold."""

    def __init__(self, count: int):
        self.names = [f"record-{index:07d}" for index in range(count)]  # about 1 MB pickled

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, record_key: int) -> dict:
        return {"id": np.int64(record_key), "length": np.int64(len(self.names[record_key]))}


@pytest.mark.timeout(60)
def test_the_payload_travels_through_the_task_pipe_not_as_a_process_argument(monkeypatch,
                                                                             assert_same):
    """Spawn and the fork server write a child's arguments into a pipe that the child reads
    only once it is up: an argument larger than the pipe's 64 KiB buffer would hold the main
    process until each worker in turn had started. The payload goes after every start."""
    argument_sizes: list[int] = []
    start_method = course_lib.workers.START_METHOD
    process_class = course_lib.workers.multiprocessing.get_context(start_method).Process
    real_init = process_class.__init__

    def watched_init(self, *args, **kwargs):
        argument_sizes.append(len(pickle.dumps(
            [a for a in kwargs.get("args", ()) if isinstance(a, bytes | str | int)])))
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(process_class, "__init__", watched_init)
    sizes = record_payload_sizes(monkeypatch)
    source = ManyLabelsSource(60_000)
    got = _first_batches(_loader(source), count=4)
    assert sizes and max(sizes) > 256 * 1024, f"the payload was only {sizes} bytes"
    assert len(argument_sizes) == 2 and max(argument_sizes) < 1024, (
        f"{start_method} arguments of {argument_sizes} bytes: the payload went with them")
    assert_same(got, _first_batches(_loader(source, worker_count=0), count=4))


@pytest.mark.timeout(60)
def test_a_data_source_s_labels_travel_as_shared_memory(monkeypatch):
    """60,000 int64 labels (469 KiB) are shared, so the payload stays far below the 64 KiB
    a pipe holds without waiting for the worker to read."""
    sizes = record_payload_sizes(monkeypatch)
    images, _ = _arrays()
    labels = np.arange(60_000, dtype=np.int64) % 10
    source = MNISTSource(np.resize(images, (60_000, 8, 8)), labels)
    _first_batches(_loader(source), count=2)
    assert labels.nbytes > MIN_SHARED_BYTES
    assert sizes and max(sizes) < 16 * 1024, f"payload of {sizes} bytes"
