"""The last of Grain's names a Grain user reaches for: `WindowShuffleMapDataset`,
`batch_and_pad`, `index_shuffle`, a `FlatMapTransform` in `apply_transformations`,
`BatchIterDataset`, `ShapeDtypeStruct`, and the namespaces `grain.multiprocessing` and
`grain.constants`. Each is checked against Grain 0.2.18 where the two are meant to agree,
and for course_lib's promises where they are not (another permutation, every epoch whole).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect

import grain as real_grain
import numpy as np
import pytest
from resuming import resumes_at_every_position

import course_lib as grain


def _parameters(function) -> list[tuple[str, object, object]]:
    """Each parameter's name, kind and default, `self` left out."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()
            if p.name != "self"]


# -- WindowShuffleMapDataset ------------------------------------------------------------------
def _window_shuffled(library, length: int = 25, window_size: int = 10, seed: int = 3):
    return library.experimental.WindowShuffleMapDataset(
        library.MapDataset.range(length), window_size=window_size, seed=seed)


def test_window_shuffle_map_dataset_has_grains_signature():
    assert (_parameters(grain.experimental.WindowShuffleMapDataset.__init__)
            == _parameters(real_grain.experimental.WindowShuffleMapDataset.__init__))


def test_window_shuffle_map_dataset_permutes_each_window_of_every_epoch():
    ds = _window_shuffled(grain)
    assert len(ds) == 25
    epochs = [[ds[epoch * 25 + i] for i in range(25)] for epoch in range(3)]
    for order in epochs:
        windows = [sorted(order[start:start + 10]) for start in (0, 10, 20)]
        assert windows == [list(range(0, 10)), list(range(10, 20)), list(range(20, 25))]
    assert epochs[0] != list(range(25))
    assert epochs[0] != epochs[1] != epochs[2]  # a new order every epoch
    assert epochs[0] == list(_window_shuffled(grain))  # the same seed, the same order
    assert epochs[0] != list(_window_shuffled(grain, seed=4))


def test_grains_last_window_reaches_past_the_epoch_where_course_libs_stays_in_it():
    theirs = list(_window_shuffled(real_grain))
    assert sorted(theirs) != list(range(25))  # measured: [... 24, 20, 0, 23, 2]
    assert sorted(list(_window_shuffled(grain))) == list(range(25))


def test_window_shuffle_map_dataset_orders_windows_as_the_stream_window_shuffle():
    stream = grain.experimental.WindowShuffleIterDataset(
        grain.MapDataset.range(25).to_iter_dataset(), window_size=10, seed=3)
    assert list(_window_shuffled(grain)) == list(stream)


def test_window_shuffle_map_dataset_is_the_same_at_every_worker_count_and_resumes():
    ds = _window_shuffled(grain, length=40, window_size=7).map(lambda x: x * 2)
    at_zero = list(ds.to_iter_dataset())
    options = grain.MultiprocessingOptions(num_workers=2)
    with iter(ds.to_iter_dataset().mp_prefetch(options)) as in_workers:
        assert list(in_workers) == at_zero
    assert resumes_at_every_position(ds.to_iter_dataset()) == [repr(x) for x in at_zero]


def test_window_shuffle_map_dataset_checks_its_arguments():
    parent = grain.MapDataset.range(10)
    shuffle = grain.experimental.WindowShuffleMapDataset
    with pytest.raises(ValueError, match="window_size=0 must be positive"):
        shuffle(parent, window_size=0, seed=1)
    with pytest.raises(ValueError, match=r"seed=-1 must be in \[0, 2\*\*32\)"):
        shuffle(parent, window_size=4, seed=-1)
    with pytest.raises(TypeError, match="WindowShuffleIterDataset"):
        shuffle(parent.to_iter_dataset(), window_size=4, seed=1)


# -- index_shuffle --------------------------------------------------------------------------
@pytest.mark.parametrize("max_index", [0, 1, 9, 64, 1000, 2**10 + 1])
def test_index_shuffle_is_a_bijection_of_zero_to_max_index(max_index):
    images = [grain.experimental.index_shuffle(i, max_index, 52, 4)
              for i in range(max_index + 1)]
    assert sorted(images) == list(range(max_index + 1))
    again = [grain.experimental.index_shuffle(index=i, max_index=max_index, seed=52, rounds=4)
             for i in range(max_index + 1)]
    assert again == images


def test_index_shuffle_depends_on_the_seed_and_rounds_and_is_the_first_epochs_shuffle():
    def order(seed, rounds):
        return [grain.experimental.index_shuffle(i, 99, seed, rounds) for i in range(100)]

    assert order(1, 4) != order(2, 4)
    assert order(1, 4) != order(1, 6)
    assert sorted(order(1, 1024)) == list(range(100))
    assert order(1, 4) == list(grain.MapDataset.range(100).shuffle(seed=1))
    huge = 1_234_567_891
    assert len({grain.experimental.index_shuffle(i, huge, 27, 4) for i in range(2000)}) == 2000


def test_index_shuffle_refuses_what_grains_refuses_in_its_words():
    index_shuffle = grain.experimental.index_shuffle
    for rounds in (2, 5, 1025, 4294967294):
        with pytest.raises(ValueError, match="rounds must be an even integer between 4 and "
                                             "1024"):
            index_shuffle(0, 8, 33, rounds)
    for index in (-1, 9):
        with pytest.raises(ValueError, match=r"index must be in \[0, max_index\]"):
            index_shuffle(index, 8, 33, 4)
    with pytest.raises(ValueError, match=r"seed=4294967296 must be in \[0, 2\*\*32\)"):
        index_shuffle(0, 8, 2**32, 4)
    with pytest.raises(TypeError, match=r"index=1\.5 must be an integer"):
        index_shuffle(1.5, 8, 33, 4)
    with pytest.raises(TypeError):
        index_shuffle(0, 8, 33)  # every argument is needed, as in Grain


# -- batch_and_pad ---------------------------------------------------------------------------
def test_batch_and_pad_has_grains_signature():
    assert (_parameters(grain.experimental.batch_and_pad)
            == _parameters(real_grain.experimental.batch_and_pad))


PAD_CASES = {
    "scalars": ([1, 2, 3], 5, 1),
    "full batch": ([1, 2, 3], 3, 7),
    "dicts": ([{"a": np.array([1, 2, 3]), "b": np.array([[1.2], [0.2]], np.float32)},
               {"a": np.array([4, 5, 6]), "b": np.array([[3.1], [2.3]], np.float32)}], 4, 0),
    "nested dicts": ([{"aa": {"a": np.array([1, 2])}, "b": np.float32(0.5)}], 3, -1),
    "tuples": ([(np.int8(1), np.array([1.0, 2.0]))], 2, 9),
}


@pytest.mark.parametrize("name", PAD_CASES)
def test_batch_and_pad_gives_grains_batches(name, assert_same):
    values, batch_size, pad_value = PAD_CASES[name]
    ours = grain.experimental.batch_and_pad(values, batch_size=batch_size, pad_value=pad_value)
    theirs = real_grain.experimental.batch_and_pad(values, batch_size=batch_size,
                                                   pad_value=pad_value)
    assert_same(ours, theirs)


def test_batch_and_pad_refuses_no_values_and_too_many():
    with pytest.raises(ValueError, match="Cannot batch 0 values"):
        grain.experimental.batch_and_pad([], batch_size=1)
    with pytest.raises(ValueError, match=r"Cannot batch 3 values to 2: .*same batch_size"):
        grain.experimental.batch_and_pad([1, 2, 3], batch_size=2)
    with pytest.raises(ValueError, match=r"pad_value=-1 does not fit .* uint8"):
        grain.experimental.batch_and_pad([np.uint8(1)], batch_size=2, pad_value=-1)


@pytest.mark.parametrize("workers", [0, 2])
def test_batch_and_pad_pads_the_last_batch_of_a_chain_at_any_worker_count(workers):
    batch_fn = functools.partial(grain.experimental.batch_and_pad, batch_size=4)
    ds = (grain.MapDataset.range(1, 10).map(lambda x: {"x": x})
          .batch(4, batch_fn=batch_fn).to_iter_dataset())
    if workers:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    with iter(ds) as batches:
        got = [batch["x"].tolist() for batch in batches]
    assert got == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 0, 0, 0]]  # Grain's test's batches


# -- apply_transformations with a FlatMapTransform -----------------------------------------------
class _AddingOne(grain.experimental.FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element):
        return [element, element + 1]


class _Times10(grain.MapTransform):
    def map(self, element):
        return element * 10


@pytest.mark.parametrize("face", ["MapDataset", "IterDataset"])
def test_apply_transformations_runs_a_flat_map_on_either_face(face):
    ds = grain.MapDataset.range(3)
    ds = ds if face == "MapDataset" else ds.to_iter_dataset()
    flat = grain.experimental.apply_transformations(ds, _AddingOne())
    expected = {"MapDataset": grain.experimental.FlatMapMapDataset,
                "IterDataset": grain.experimental.FlatMapIterDataset}[face]
    assert isinstance(flat, expected)
    assert list(flat) == [0, 1, 1, 2, 2, 3]  # Grain's test_flat_map
    assert list(ds.apply([_AddingOne(), _Times10()])) == [0, 10, 10, 20, 20, 30]


def test_apply_transformations_names_the_flat_map_among_what_it_takes():
    with pytest.raises(TypeError, match="FlatMapTransform"):
        grain.experimental.apply_transformations(grain.MapDataset.range(3), "not a transform")


# -- BatchIterDataset and ShapeDtypeStruct ---------------------------------------------------
def test_batch_iter_dataset_is_the_batch_method_under_grains_class_name():
    from grain._src.python.dataset.transformations.batch import BatchIterDataset as Theirs

    ours = grain.iter_shapes.BatchIterDataset
    assert _parameters(ours.__init__) == _parameters(Theirs.__init__)
    parent = grain.MapDataset.range(10).to_iter_dataset()
    built = ours(parent, 4, drop_remainder=True)
    assert [b.tolist() for b in built] == [b.tolist() for b in parent.batch(4,
                                                                         drop_remainder=True)]
    assert "EngineIterator" in type(iter(built)).__name__  # planned as the method's step
    with pytest.raises(TypeError, match="to_iter_dataset"):
        ours(grain.MapDataset.range(10), 4)


def test_shape_dtype_struct_is_grains_small_record():
    ours = grain.experimental.ShapeDtypeStruct(shape=(4, 2), dtype=np.int64)
    theirs = real_grain.experimental.ShapeDtypeStruct(shape=(4, 2), dtype=np.int64)
    assert (ours.shape, ours.dtype) == (theirs.shape, theirs.dtype)
    assert ours == grain.experimental.ShapeDtypeStruct((4, 2), np.int64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ours.shape = (1,)


# -- the namespaces grain.multiprocessing and grain.constants ---------------------------------
def _public(module) -> set[str]:
    return {name for name in dir(module) if not name.startswith("_")
            and not inspect.ismodule(getattr(module, name))}


def test_grain_multiprocessing_holds_grains_names():
    import grain.multiprocessing as theirs

    assert _public(grain.multiprocessing) == _public(theirs)
    assert grain.multiprocessing.MultiprocessingOptions is grain.MultiprocessingOptions
    options = grain.multiprocessing.MultiprocessingOptions(num_workers=2)
    assert list(grain.MapDataset.range(4).to_iter_dataset().mp_prefetch(options)) == [0, 1, 2, 3]
    for name in ("SharedMemoryArray", "SharedMemoryArrayMetadata"):
        with pytest.raises(NotImplementedError, match=f"grain.{name} is outside course_lib's "
                                                      "scope: .*np.ndarray"):
            getattr(grain.multiprocessing, name)((2,), np.float32)


def test_grain_constants_hold_grains_values_in_both_places():
    import grain.constants as theirs
    import grain.python as grain_python

    assert _public(grain.constants) == _public(theirs)
    for name in _public(theirs):
        assert getattr(grain.constants, name) == getattr(theirs, name), name
        assert getattr(grain, name) == getattr(grain_python, name), name


def test_apply_transformations_takes_grain_keyword_names():
    """Grain's signature is apply_transformations(ds, transformations)."""
    ours = _parameters(grain.experimental.apply_transformations)
    theirs = _parameters(real_grain.experimental.apply_transformations)
    assert [name for name, _, _ in ours] == [name for name, _, _ in theirs]
    out = grain.experimental.apply_transformations(ds=grain.MapDataset.range(4),
                                                   transformations=[grain.Batch(2)])
    assert [b.tolist() for b in out] == [[0, 1], [2, 3]]
