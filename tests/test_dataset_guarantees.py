"""The DataLoader's guarantees, kept on the Dataset face: no hang on a filter that keeps
nothing, a state checked as strictly, one rule for random numbers whatever the planner
does, Ctrl-C at once with workers, and indexing and argument errors that name the value
and the rule."""

import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import numpy as np
import pytest

import course_lib as grain
from course_lib.dataset_engine import EngineIterator


def run_script(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter, so that a chain that hangs fails the test instead of
    hanging the suite."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {timeout} s:\n{code}")


# -- (1) a filter that keeps nothing, on an endless chain --------------------------------------
@pytest.mark.parametrize("chain", [
    "grain.MapDataset.range(10).repeat().filter(lambda x: False).to_iter_dataset()",
    "grain.MapDataset.range(10).repeat().to_iter_dataset().filter(lambda x: False).batch(2)",
    "grain.MapDataset.range(10).repeat().to_iter_dataset().filter(lambda x: False)"
    ".mp_prefetch(grain.MultiprocessingOptions(num_workers=2))",
])
def test_an_endless_chain_whose_filter_keeps_nothing_raises_after_one_pass(chain):
    result = run_script(f"""
        import course_lib as grain
        if __name__ == "__main__":
            try:
                next(iter({chain}))
            except ValueError as error:
                print("raised:", error)
        """, timeout=30)
    assert result.stdout.startswith("raised:"), result.stderr[-2000:]
    assert "whole pass" in result.stdout and "10 elements" in result.stdout


def test_an_endless_chain_with_a_rare_survivor_still_finds_it():
    ds = grain.MapDataset.range(10).repeat().to_iter_dataset().filter(lambda x: x == 9)
    iterator = iter(ds)
    assert [next(iterator) for _ in range(3)] == [9, 9, 9]


# -- (2) set_state as strict as the DataLoader's -----------------------------------------------
@pytest.mark.parametrize("next_index, rule", [
    ("x", "integer"), (1.5, "integer"), (True, "integer"), (-5, "[0, 4]"), (5, "[0, 4]"),
    (1000, "[0, 4]"),
])
def test_set_state_refuses_what_is_not_a_position_of_the_chain(next_index, rule):
    iterator = iter(grain.MapDataset.range(10).batch(3).to_iter_dataset())
    with pytest.raises(ValueError, match="next_index") as caught:
        iterator.set_state({"next_index": next_index})
    assert rule in str(caught.value) and "get_state()" in str(caught.value)
    assert "loader" not in str(caught.value)


def test_set_state_accepts_every_position_and_the_end():
    iterator = iter(grain.MapDataset.range(10).batch(3).to_iter_dataset())
    iterator.set_state({"next_index": 4})
    assert list(iterator) == []
    iterator.set_state({"next_index": 3})
    assert [batch.tolist() for batch in iterator] == [[9]]


@pytest.mark.parametrize("make, broken", [
    (lambda: grain.MapDataset.range(10).to_iter_dataset(allow_nones=True),
     {"next_index": -3}),
    (lambda: grain.MapDataset.range(10).to_iter_dataset(allow_nones=True),
     {"next_index": 2.0}),
    (lambda: grain.MapDataset.range(10).to_iter_dataset().map_with_index(lambda i, x: x),
     {"parent": {"next_index": 0}, "count": -3}),
    (lambda: grain.MapDataset.range(10).to_iter_dataset().map_with_index(lambda i, x: x),
     {"parent": {"next_index": 0}, "count": "3"}),
])
def test_set_state_off_the_engine_is_as_strict(make, broken):
    iterator = iter(make())
    with pytest.raises(ValueError, match="must be an integer"):
        iterator.set_state(broken)


def failing_at_3(x):
    if x == 3:
        raise KeyError("three")
    return x


def test_after_a_failing_transform_the_dataset_iterator_speaks_of_its_own_state():
    iterator = iter(grain.MapDataset.range(12).map(failing_at_3).batch(2).to_iter_dataset())
    assert next(iterator).tolist() == [0, 1]
    with pytest.raises(KeyError):
        next(iterator)
    with pytest.raises(RuntimeError) as caught:
        next(iterator)
    message = str(caught.value)
    assert "iter(loader)" not in message and "index 3" not in message
    assert "{'next_index': 1}" in message and "iter(ds)" in message
    iterator.set_state({"next_index": 2})
    assert next(iterator).tolist() == [4, 5]


# -- (3) one rule for random numbers, whatever the planner does --------------------------------
def draw(x, rng):
    return (x, int(rng.integers(1_000_000)))


def even(x):
    return x % 2 == 0


def test_random_map_gives_the_same_numbers_on_and_off_the_engine():
    base = grain.MapDataset.range(20).to_iter_dataset().filter(even)
    on_engine = iter(base.random_map(draw, seed=1))
    assert isinstance(on_engine, EngineIterator)
    off_engine = base.map_with_index(lambda i, x: x).random_map(draw, seed=1)
    assert list(off_engine) == list(on_engine)


def test_random_map_off_the_engine_keeps_its_numbers_after_a_resume():
    chain = (grain.MapDataset.range(20).to_iter_dataset().filter(even)
             .map_with_index(lambda i, x: x).random_map(draw, seed=1))
    whole = list(chain)
    iterator = iter(chain)
    [next(iterator) for _ in range(4)]
    state = iterator.get_state()
    resumed = iter(chain)
    resumed.set_state(state)
    assert list(resumed) == whole[4:]


# -- (4) Ctrl-C with mp_prefetch workers ---------------------------------------------------------
@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs /dev/shm")
def test_ctrl_c_with_workers_reaches_the_loop_within_a_quarter_second():
    script = Path(__file__).parent / "worker_scripts" / "dataset_interrupt.py"
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    elapsed = float(result.stdout.split()[3])
    assert elapsed < 0.25, f"the KeyboardInterrupt reached the loop after {elapsed:.2f} s"


# -- (5) errors that name the value and the rule -----------------------------------------------
@pytest.mark.parametrize("index, error, words", [
    ("a", TypeError, "'a'"), (1.5, TypeError, "1.5"), (None, TypeError, "None"),
    (-11, IndexError, "-11"),
])
def test_indexing_errors_name_the_value_and_the_rule(index, error, words):
    ds = grain.MapDataset.range(10)
    with pytest.raises(error, match="integer") as caught:
        ds[index]
    assert words in str(caught.value)


def test_negative_indices_count_from_the_end_of_the_first_epoch():
    ds = grain.MapDataset.range(10).map(lambda x: x * 2)
    assert ds[-1] == 18 and ds[-10] == 0 and ds[np.int64(3)] == 6


def test_an_empty_slice_says_it_is_empty_instead_of_dividing_by_zero():
    ds = grain.MapDataset.range(10)[12:20]
    assert len(ds) == 0
    with pytest.raises(IndexError, match="empty"):
        ds[0]


def test_negative_mix_weights_are_explained_as_negative():
    ds = grain.MapDataset.range(10)
    with pytest.raises(ValueError, match="negative") as caught:
        grain.MapDataset.mix([ds, ds], [-1, 2])
    assert "weight 0" not in str(caught.value)
    with pytest.raises(ValueError, match="weight 0"):
        grain.MapDataset.mix([ds, ds], [0, 2])


@pytest.mark.parametrize("make", [
    lambda options: grain.MapDataset.range(10).to_iter_dataset(read_options=options),
    lambda options: grain.MapDataset.source([1, 2]).to_iter_dataset(read_options=options),
    lambda options: grain.MapDataset.range(10).map(abs).to_iter_dataset(read_options=options),
])
def test_read_options_of_the_wrong_type_are_refused_on_every_source(make):
    with pytest.raises(TypeError, match="ReadOptions"):
        make({})


def test_a_ragged_batch_off_the_engine_names_the_batch_as_on_the_engine():
    ragged = grain.MapDataset.source([np.zeros(2), np.zeros(3)] * 4).to_iter_dataset()
    mixed = grain.IterDataset.mix([ragged, ragged]).batch(4)
    with pytest.raises(ValueError) as caught:
        next(iter(mixed))
    assert any("batch that starts at index 0" in note
               for note in getattr(caught.value, "__notes__", []))


# -- the plan, printed ----------------------------------------------------------------------------
def test_execution_says_which_steps_run_on_the_engine_and_which_here():
    chain = (grain.MapDataset.range(20).map(abs).to_iter_dataset().filter(even)
             .map_with_index(lambda i, x: x).random_map(draw, seed=1))
    with iter(chain) as iterator:
        next(iterator)
        lines = iterator.execution.splitlines()
    assert lines[1] == ("on the engine: RangeMapDataset(start=0, stop=20, step=1) read in "
                        "order; per element: map, filter")
    assert lines[2:] == ["in the main process: map_with_index",
                         "in the main process: random_map"]


# -- the engine, read top-down ----------------------------------------------------------------
class FilesOnTheStack(grain.MapTransform):
    """Each record becomes the course_lib files on the stack where its map runs."""

    def map(self, element):
        files = []
        for frame in traceback.extract_stack()[:-1]:
            name = Path(frame.filename)
            if name.parent.name == "course_lib" and name.name not in files:
                files.append(name.name)
        return " > ".join(files)


def test_a_record_goes_loader_record_stage_pipeline_at_0_workers():
    loader = grain.DataLoader(data_source=grain.RangeDataSource(0, 8, 1),
                              sampler=grain.IndexSampler(8, num_epochs=1),
                              operations=[FilesOnTheStack()],
                              read_options=grain.ReadOptions(num_threads=0))
    with iter(loader) as iterator:
        assert next(iterator) == "loader.py > record_stage.py > pipeline.py"


def frames_below_the_loader(element):
    """The frames from the `DataLoaderIterator`'s `__next__` (or, in a worker or on the batch
    thread, the outermost course_lib frame) down to this map, and their course_lib files."""
    stack = traceback.extract_stack()[:-1]
    in_course_lib = [Path(frame.filename).parent.name == "course_lib" for frame in stack]
    first = in_course_lib.index(True)
    for place, frame in enumerate(stack):
        if Path(frame.filename).name == "loader.py" and frame.name == "__next__":
            first = place
            break
    files: list[str] = []
    for frame in stack[first:]:
        name = Path(frame.filename)
        if name.parent.name == "course_lib" and name.name not in files:
            files.append(name.name)
    return len(stack) - first, " > ".join(files)


class FramesBelowTheLoader(grain.MapTransform):
    map = staticmethod(frames_below_the_loader)  # the map is the function, as on the chain


SHAPES = {"0 workers, threads off": (0, grain.ReadOptions(num_threads=0)),
          "0 workers, batch thread": (0, grain.ReadOptions()),
          "2 workers": (2, grain.ReadOptions())}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_map_on_the_dataset_face_runs_as_deep_as_on_the_dataloader(shape):
    """One record type: the engine reads the chain's elements themselves, and a chain's map
    is the engine's own operation, with nothing between the engine and the function (before:
    two frames more, `ElementSteps.map` and the step's `_apply`, on an `(index, value)`
    record)."""
    workers, read_options = SHAPES[shape]
    loader = grain.DataLoader(data_source=grain.RangeDataSource(0, 8, 1),
                              sampler=grain.IndexSampler(8, num_epochs=1),
                              operations=[FramesBelowTheLoader()], worker_count=workers,
                              read_options=read_options)
    chain = grain.MapDataset.range(8).map(frames_below_the_loader).to_iter_dataset(read_options)
    if workers:
        chain = chain.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    with iter(loader) as on_the_loader, iter(chain) as on_the_chain:
        assert next(on_the_chain) == next(on_the_loader)
        if not workers:
            assert on_the_chain._loader.data_source is chain._parent._parent  # the range itself


def test_every_step_of_a_chain_runs_as_the_engine_operation_of_its_kind():
    chain = (grain.MapDataset.range(8).map(abs).filter(even).map_with_index(lambda i, x: x)
             .random_map(draw, seed=1).to_iter_dataset().map(list).filter(all))
    with iter(chain) as iterator:
        kinds = [type(op).__name__ for op in iterator._loader.operations]
        assert kinds == ["ChainMap", "ChainFilter", "ChainMapWithIndex", "ChainRandomMap",
                         "ChainMap", "ChainFilter"]
        by_index = (grain.MapDataset.range(8).map(abs).filter(even)
                    .map_with_index(lambda i, x: x).random_map(draw, seed=1))
        assert list(iterator) == [list(by_index[i]) for i in (2, 4, 6)]  # 0 fails all()


class GlobalIndex(grain.MapWithIndexTransform):
    def map_with_index(self, index, element):
        return index, element


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataloader_hands_a_map_with_index_the_record_index_in_the_whole_stream(workers):
    """What Grain's `Record.metadata.index` holds: `shard_index + position * shard_count`."""
    shard = grain.ShardOptions(shard_index=1, shard_count=2)
    loader = grain.DataLoader(data_source=grain.RangeDataSource(0, 10, 1),
                              sampler=grain.IndexSampler(10, shard_options=shard, num_epochs=1),
                              operations=[GlobalIndex()], worker_count=workers)
    assert [index for index, _ in loader] == [1, 3, 5, 7, 9]


def test_a_map_with_index_after_batch_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"MapWithIndexTransform after Batch.*Move it before"):
        grain.DataLoader(data_source=grain.RangeDataSource(0, 10, 1),
                         sampler=grain.IndexSampler(10, num_epochs=1),
                         operations=[grain.Batch(2), GlobalIndex()])


class BrokenAt:
    def __init__(self, bad: int):
        self.bad = bad

    def __len__(self):
        return 10

    def __getitem__(self, index):
        if index == self.bad:
            raise OSError("unreadable")
        return index


@pytest.mark.parametrize("face", ["DataLoader", "Dataset"])
def test_a_read_that_fails_names_the_record_it_was_reading(face):
    if face == "DataLoader":
        elements = grain.DataLoader(data_source=BrokenAt(6),
                                    sampler=grain.IndexSampler(10, num_epochs=1),
                                    read_options=grain.ReadOptions(num_threads=0))
    else:
        elements = grain.MapDataset.source(BrokenAt(6)).map(abs).to_iter_dataset(
            grain.ReadOptions(num_threads=0))
    with pytest.raises(OSError) as caught:
        list(elements)
    assert any("record_key 6" in note for note in getattr(caught.value, "__notes__", []))
