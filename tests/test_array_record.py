"""ArrayRecordDataSource: records back as written, over shards, pickled as paths, and the
same batches and resume at any worker count."""

from __future__ import annotations

import builtins
import pickle
import sys

import numpy as np
import pytest

pytest.importorskip("array_record")

import course_lib as grain
from course_lib.array_record import (
    ArrayRecordDataSource,
    array_record_module,
    write_array_record_shards,
)


def _records(count: int) -> list[bytes]:
    """Records of different sizes, each one distinct."""
    return [bytes([key % 251]) * (1 + key % 17) + key.to_bytes(4, "little")
            for key in range(count)]


@pytest.fixture
def shards(tmp_path):
    return write_array_record_shards(_records(50), tmp_path, 4, prefix="train")


def test_shards_are_named_in_order_and_hold_contiguous_blocks(shards):
    assert [path.name for path in shards] == [f"train-0000{s}-of-00004.array_record"
                                             for s in range(4)]
    sizes = [len(ArrayRecordDataSource(path)) for path in shards]
    assert sizes == [12, 13, 12, 13]
    assert [p.name for p in shards[0].parent.iterdir() if p.name.endswith(".partial")] == []


def test_every_record_comes_back_as_written_across_shards(shards):
    source = ArrayRecordDataSource(shards)
    assert len(source) == 50
    assert [source[key] for key in range(50)] == _records(50)
    keys = [49, 0, 12, 13, 12, 37]
    assert source.__getitems__(keys) == [_records(50)[key] for key in keys]
    assert source.paths == [str(path) for path in shards]


def test_one_path_is_one_file(shards):
    source = ArrayRecordDataSource(str(shards[1]))
    assert len(source) == 13 and source[0] == _records(50)[12]


def test_agrees_with_grains_own_source(shards):
    grain_python = pytest.importorskip("grain.python")
    theirs = grain_python.ArrayRecordDataSource([str(path) for path in shards])
    ours = ArrayRecordDataSource(shards)
    assert len(ours) == len(theirs)
    assert [ours[key] for key in range(len(ours))] == [theirs[key] for key in range(len(ours))]


def test_keys_out_of_range_raise_index_error(shards):
    source = ArrayRecordDataSource(shards)
    for key in (50, -1):
        with pytest.raises(IndexError, match=rf"record_key={key} is out of range.*50 records"):
            source[key]


def test_pickles_as_its_paths_and_reopens_lazily(tmp_path):
    big = [bytes([n % 256]) * 4096 for n in range(256)]  # 1 MiB of records
    paths = write_array_record_shards(big, tmp_path, 2)
    source = ArrayRecordDataSource(paths)
    assert source[100] == big[100]  # a reader is open now
    payload = pickle.dumps(source)
    assert len(payload) < 1000
    copy = pickle.loads(payload)
    assert copy._readers == [None, None]
    assert copy[255] == big[255] and len(copy) == 256


def test_nothing_of_the_source_goes_to_shared_memory(tmp_path):
    from course_lib.shared_arrays import SharedArrays
    from course_lib.workers import _dumps

    big = [bytes([n % 256]) * 4096 for n in range(512)]  # 2 MiB of records
    source = ArrayRecordDataSource(write_array_record_shards(big, tmp_path, 4))
    source[300]
    shared = SharedArrays("lesson9_test")
    try:
        payload = _dumps(source, shared)  # how the loader pickles a source for its workers
        assert shared._segments == [] and shared.not_shared_bytes == 0
        assert len(payload) < 2000
    finally:
        shared.unlink()


class Decode(grain.MapTransform):
    def map(self, record):
        return np.frombuffer(record[-4:], dtype="<u4").astype(np.int64)[0]


def _loader(shards, worker_count):
    source = ArrayRecordDataSource(shards)
    sampler = grain.IndexSampler(num_records=len(source), shuffle=True, seed=3, num_epochs=1)
    return grain.DataLoader(data_source=source, sampler=sampler,
                            operations=[Decode(), grain.Batch(4)], worker_count=worker_count)


def test_same_batches_at_any_worker_count_and_exact_resume(shards):
    with iter(_loader(shards, 0)) as iterator:
        alone = [batch.tolist() for batch in iterator]
    assert sorted(key for batch in alone for key in batch) == list(range(50))
    with iter(_loader(shards, 2)) as iterator:
        assert [batch.tolist() for batch in iterator] == alone
        with iter(_loader(shards, 2)) as first:
            for _ in range(5):
                next(first)
            state = first.get_state()
    with iter(_loader(shards, 0)) as resumed:
        resumed.set_state(state)
        assert [batch.tolist() for batch in resumed] == alone[5:]


@pytest.mark.parametrize("paths, error, pattern", [
    ([], ValueError, r"non-empty sequence of paths"),
    ([3], TypeError, r"paths\[0\]=3 is a int"),
    (["absent.array_record"], FileNotFoundError, r"does not exist.*write_array_record_shards"),
])
def test_bad_paths_are_refused_with_the_fix(paths, error, pattern):
    with pytest.raises(error, match=pattern):
        ArrayRecordDataSource(paths)


def test_bad_reader_options_are_refused(shards):
    with pytest.raises(TypeError, match=r"keys and values must be str"):
        ArrayRecordDataSource(shards, reader_options={"index_storage_option": 1})
    with pytest.raises(ValueError, match=r"refused by array_record's reader.*footer_prefetch"):
        ArrayRecordDataSource(shards, reader_options={"index_storage_option": "offloaded"})
    offloaded = ArrayRecordDataSource(shards, {"index_storage_option": "offloaded",
                                               "footer_prefetch_bytes": "0"})
    assert offloaded[13] == _records(50)[13]


def test_a_file_that_is_not_array_record_is_named(tmp_path):
    path = tmp_path / "noise.array_record"
    path.write_bytes(b"not a record" * 100)
    with pytest.raises(ValueError, match=r"noise\.array_record.*not a readable ArrayRecord"):
        ArrayRecordDataSource(path)


@pytest.mark.parametrize("count, num_shards, error, pattern", [
    (3, 4, ValueError, r"num_shards=4 is more than the 3 records"),
    (3, 0, ValueError, r"num_shards=0 must be positive"),
])
def test_writer_refuses_bad_shard_counts(tmp_path, count, num_shards, error, pattern):
    with pytest.raises(error, match=pattern):
        write_array_record_shards(_records(count), tmp_path, num_shards)


def test_writer_refuses_records_that_are_not_bytes_and_leaves_no_file(tmp_path):
    with pytest.raises(TypeError, match=r"records\[1\] is a str"):
        write_array_record_shards([b"a", "b"], tmp_path, 1)
    assert list(tmp_path.iterdir()) == []


def test_without_the_package_the_error_names_it_and_the_platforms(monkeypatch, tmp_path):
    real_import = builtins.__import__

    def no_array_record(name, *args, **kwargs):
        if name == "array_record" or name.startswith("array_record."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    for name in [name for name in sys.modules if name.split(".")[0] == "array_record"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(builtins, "__import__", no_array_record)
    with pytest.raises(ImportError) as caught:
        array_record_module()
    message = str(caught.value)
    assert "array_record package" in message and "pip install array_record" in message
    assert "Linux on x86_64 or aarch64" in message and "macOS on Apple silicon" in message
    assert "RecordFileDataSource" in message
    (tmp_path / "x.array_record").write_bytes(b"")
    with pytest.raises(ImportError, match="array_record package"):
        ArrayRecordDataSource(tmp_path / "x.array_record")
