"""PadAndMask: every batch has the same shape, and the mask counts each record once."""

from __future__ import annotations

import numpy as np
import pytest

import course_lib as grain


def _loader(num_records: int, batch_size: int, worker_count: int = 0):
    source = grain.ArrayDataSource({"x": np.arange(num_records, dtype=np.float32) + 1,
                                    "label": np.arange(num_records, dtype=np.int32) % 3})
    sampler = grain.IndexSampler(num_records, shuffle=True, seed=0, num_epochs=1)
    return grain.DataLoader(data_source=source, sampler=sampler,
                            operations=[grain.PadAndMask(batch_size)],
                            worker_count=worker_count)


@pytest.mark.parametrize("worker_count", [0, 2])
def test_every_batch_is_full_and_the_mask_keeps_each_record_once(worker_count):
    batches = list(_loader(10, 4, worker_count))
    assert [batch["x"].shape for batch in batches] == [(4,)] * 3
    assert [batch["mask"].tolist() for batch in batches][-1] == [True, True, False, False]
    real = np.concatenate([batch["x"][batch["mask"]] for batch in batches])
    assert sorted(real.tolist()) == list(range(1, 11))
    assert batches[-1]["x"][~batches[-1]["mask"]].tolist() == [0.0, 0.0]


def test_masked_mean_equals_the_mean_of_the_unpadded_data():
    batches = list(_loader(23, 5))
    total = sum(float((batch["x"] * batch["mask"]).sum()) for batch in batches)
    count = sum(int(batch["mask"].sum()) for batch in batches)
    assert count == 23 and total / count == pytest.approx(np.mean(np.arange(23) + 1))


def test_a_whole_number_of_batches_needs_no_padding():
    batches = list(_loader(8, 4))
    assert all(batch["mask"].all() for batch in batches) and len(batches) == 2


def test_records_that_are_not_dicts_are_refused_with_the_fix():
    loader = grain.DataLoader(data_source=grain.RangeDataSource(0, 5, 1),
                              sampler=grain.IndexSampler(5, num_epochs=1),
                              operations=[grain.PadAndMask(2)])
    with pytest.raises(TypeError, match="records that are dicts"):
        list(loader)


@pytest.mark.parametrize(("arguments", "error"), [
    ({"batch_size": 0}, ValueError), ({"batch_size": 2, "mask_key": ""}, TypeError)])
def test_bad_arguments_are_refused_at_construction(arguments, error):
    with pytest.raises(error):
        grain.PadAndMask(**arguments)
