"""Flat map, zip, repeat, limit and rebatch (Grain's experimental steps): elements, states."""

from __future__ import annotations

import numpy as np
import pytest

import course_lib as grain
from course_lib import experimental as ex


class Split(grain.experimental.FlatMapTransform):
    max_fan_out = 3

    def flat_map(self, element):
        return [element] * (element % 3)


def test_flat_map_on_both_faces():
    ds = grain.MapDataset.range(6)
    assert list(ex.FlatMapMapDataset(ds, Split())) == [1, 2, 2, 4, 5, 5]
    assert len(ex.FlatMapMapDataset(ds, Split())) == 18
    assert list(ex.FlatMapIterDataset(ds.to_iter_dataset(), Split())) == [1, 2, 2, 4, 5, 5]
    ex.assert_equal_output_after_checkpoint(ex.FlatMapIterDataset(ds.to_iter_dataset(), Split()))


def test_flat_map_past_its_fan_out_says_what_to_raise():
    class TooMany(Split):
        max_fan_out = 1

    with pytest.raises(ValueError, match="Raise max_fan_out"):
        list(ex.FlatMapMapDataset(grain.MapDataset.range(6), TooMany()))
    with pytest.raises(TypeError, match="max_fan_out"):
        ex.FlatMapMapDataset(grain.MapDataset.range(6), grain.experimental.FlatMapTransform())


def test_zip_pairs_positions_and_a_strict_zip_names_the_shorter():
    a, b = grain.MapDataset.range(4), grain.MapDataset.range(10, 14)
    assert list(ex.ZipMapDataset([a, b])) == [(0, 10), (1, 11), (2, 12), (3, 13)]
    with pytest.raises(ValueError, match=r"lengths \[4, 3\] differ"):
        ex.ZipMapDataset([a, b[:3]])
    zipped = ex.ZipIterDataset([a.to_iter_dataset(), b.to_iter_dataset()])
    ex.assert_equal_output_after_checkpoint(zipped)
    short = ex.ZipIterDataset([a.to_iter_dataset(), b[:2].to_iter_dataset()])
    with pytest.raises(ValueError, match=r"argument 2 is shorter than argument 1.*strict=False"):
        list(short)
    loose = ex.ZipIterDataset([a.to_iter_dataset(), b[:2].to_iter_dataset()], strict=False)
    assert list(loose) == [(0, 10), (1, 11)]


def test_repeat_and_limit_resume_exactly():
    ds = grain.MapDataset.range(5).shuffle(seed=2).to_iter_dataset().filter(lambda x: x != 3)
    repeated = ex.RepeatIterDataset(ds, num_epochs=3)
    elements = list(repeated)
    assert len(elements) == 12 and elements[:4] == elements[4:8]
    ex.assert_equal_output_after_checkpoint(repeated)
    limited = ex.LimitIterDataset(ex.RepeatIterDataset(ds), count=10)
    assert list(limited) == elements[:10]
    ex.assert_equal_output_after_checkpoint(limited)


def test_workers_below_a_repeat_change_nothing():
    ds = grain.MapDataset.range(20).shuffle(seed=4).to_iter_dataset().map(lambda x: x * 3)
    plain = list(ex.LimitIterDataset(ex.RepeatIterDataset(ds), 50))
    options = grain.MultiprocessingOptions(num_workers=2)
    with iter(ex.LimitIterDataset(ex.RepeatIterDataset(ds), 50).mp_prefetch(options)) as it:
        assert list(it) == plain


def test_rebatch_cuts_and_joins_batches():
    ds = grain.MapDataset.range(10).map(lambda x: {"x": x, "y": (x, -x)}).batch(3)
    rebatched = list(ex.RebatchIterDataset(ds.to_iter_dataset(), 4))
    assert [batch["x"].tolist() for batch in rebatched] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert rebatched[1]["y"][1].tolist() == [-4, -5, -6, -7]
    dropped = ex.RebatchIterDataset(ds.to_iter_dataset(), 4, drop_remainder=True)
    assert len(list(dropped)) == 2
    ex.assert_equal_output_after_checkpoint(ex.RebatchIterDataset(ds.to_iter_dataset(), 2))
    assert np.array_equal(next(iter(ex.RebatchIterDataset(ds.to_iter_dataset(), 5)))["x"],
                          np.arange(5))


@pytest.mark.parametrize(("make", "error", "words"), [
    (lambda ds: ex.RepeatIterDataset(ds, 0), ValueError, "num_epochs=0 must be positive"),
    (lambda ds: ex.LimitIterDataset(ds, 0), ValueError, "count=0 must be positive"),
    (lambda ds: ex.RebatchIterDataset(ds, 0), ValueError, "batch_size=0 must be positive"),
    (lambda ds: ex.ZipIterDataset([]), ValueError, "at least one parent"),
    (lambda ds: ex.FlatMapIterDataset(ds, lambda x: [x]), TypeError, "no flat_map method"),
])
def test_wrong_arguments_are_refused_when_built(make, error, words):
    with pytest.raises(error, match=words):
        make(grain.MapDataset.range(3).to_iter_dataset())
