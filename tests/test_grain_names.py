"""Grain's current namespace (`import grain`): the names a Grain user reaches for.

Grain 0.2.18's docs write `grain.MapDataset`, `grain.transforms.Map`, `grain.sources...`,
`grain.checkpoint.CheckpointSave`; a chain written that way runs on course_lib with the
import changed, and the `grain.python` names course_lib does not carry refuse with the fix.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import course_lib

grain = pytest.importorskip("grain")

NAMESPACES = ["transforms", "sources", "checkpoint", "samplers", "sharding"]
# Names of Grain's namespaces course_lib leaves out, and why (README, "Names only Grain has").
LEFT_OUT = {"DatasetSelectionMap", "TfRandomMap"}


def _public(module) -> set[str]:
    return {name for name in dir(module) if not name.startswith("_")
            and not isinstance(getattr(module, name), type(importlib))}


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_each_namespace_holds_grains_names(namespace):
    ours = getattr(course_lib, namespace)
    missing = sorted(_public(getattr(grain, namespace)) - LEFT_OUT
                     - {name for name in _public(getattr(grain, namespace))
                        if hasattr(ours, name)})
    assert not missing, f"course_lib.{namespace} lacks Grain's {missing}"


def test_the_grain_python_names_exist_or_refuse_with_the_fix():
    import grain.python as grain_python

    wanted = ["InMemoryDataSource", "PyGrainCheckpointSave", "PyGrainCheckpointRestore",
              "PyGrainCheckpointHandler", "MapWithIndexTransform", "Sampler"]
    for name in wanted:
        assert hasattr(course_lib, name) and hasattr(grain_python, name), name
    for name in ["Record", "SharedMemoryArray", "Operation", "MapOperation",
                 "RandomMapOperation", "FilterOperation", "BatchOperation"]:
        assert hasattr(grain_python, name)
        refused = getattr(course_lib, name)
        with pytest.raises(NotImplementedError, match=f"grain.{name} is outside course_lib's "
                                                      "scope: .*(Transform|Batch|ndarray)"):
            refused(None)
        assert name not in course_lib.__all__
    with pytest.raises(NotImplementedError, match="MapTransform subclass"):
        class Legacy(course_lib.MapOperation):  # a Grain user's legacy operation
            pass


def test_the_aliases_are_course_libs_own_classes():
    assert course_lib.transforms.Map is course_lib.MapTransform
    assert course_lib.transforms.RandomMap is course_lib.RandomMapTransform
    assert course_lib.transforms.Filter is course_lib.FilterTransform
    assert course_lib.transforms.MapWithIndex is course_lib.MapWithIndexTransform
    assert course_lib.checkpoint.CheckpointHandler is course_lib.PyGrainCheckpointHandler
    assert course_lib.sources.ArrayRecordDataSource is course_lib.ArrayRecordDataSource
    assert isinstance(course_lib.IndexSampler(10, num_epochs=1), course_lib.samplers.Sampler)


def test_in_memory_data_source_takes_grains_arguments():
    source = course_lib.InMemoryDataSource(elements=["a", "b", "c"])
    assert len(source) == 3 and source[2] == "c"
    assert list(course_lib.MapDataset.source(source)) == ["a", "b", "c"]
    with pytest.raises(ValueError, match=r"cannot attach .* by name"):
        course_lib.InMemoryDataSource(name="shared")
    with pytest.raises(TypeError, match="ArrayDataSource"):
        course_lib.InMemoryDataSource(elements=5)


def _lesson_chain(g, directory):
    """A lesson's chain in Grain's current names; `g` is `grain` or `course_lib`."""
    import orbax.checkpoint as ocp

    class Scale(g.transforms.Map):
        def map(self, element):
            return {"x": np.float32(element) * 2, "y": element % 3}

    class KeepEven(g.transforms.Filter):
        def filter(self, element):
            return element["y"] != 1

    source = g.sources.RangeDataSource(0, 40, 1)
    ds = (g.MapDataset.source(source).map(Scale()).filter(KeepEven())
          .to_iter_dataset(g.ReadOptions(num_threads=2, prefetch_buffer_size=4)).batch(4))
    iterator = iter(ds)
    seen = [next(iterator) for _ in range(2)]
    with ocp.CheckpointManager(directory / type(iterator).__module__.split(".")[0]) as manager:
        manager.save(2, args=ocp.args.Composite(ds=g.checkpoint.CheckpointSave(iterator)))
        manager.wait_until_finished()
        expected = [next(iterator) for _ in range(3)]
        fresh = iter(ds)
        manager.restore(2, args=ocp.args.Composite(ds=g.checkpoint.CheckpointRestore(fresh)))
    resumed = [next(fresh) for _ in range(3)]
    return [{key: value.tolist() for key, value in batch.items()}
            for batch in seen + expected + resumed]


@pytest.mark.timeout(120)
def test_a_chain_in_grains_current_names_runs_with_the_import_changed(tmp_path):
    on_grain = _lesson_chain(grain, tmp_path)
    on_course_lib = _lesson_chain(course_lib, tmp_path)
    assert on_course_lib == on_grain
    assert on_course_lib[2:5] == on_course_lib[5:8]  # the restored iterator continues


def test_map_takes_a_class_as_its_function_but_not_a_transform_class():
    """Grain's tests build a data set per element with `ds.map(ParquetIterDataset)`."""
    assert list(course_lib.MapDataset.range(3).map(str)) == ["0", "1", "2"]
    with pytest.raises(TypeError, match="transform instance"):
        course_lib.MapDataset.range(3).map(course_lib.transforms.Map)


def test_iter_dataset_prefetch_is_mp_prefetch_with_a_deprecation_warning():
    chain = course_lib.MapDataset.range(12).to_iter_dataset().batch(3)
    options = course_lib.MultiprocessingOptions(num_workers=2)
    with pytest.warns(DeprecationWarning, match="use mp_prefetch"):
        prefetched = chain.prefetch(options)
    assert [b.tolist() for b in prefetched] == [b.tolist() for b in chain.mp_prefetch(options)]
    with pytest.raises(TypeError, match="MultiprocessingOptions"):
        chain.prefetch(2)
