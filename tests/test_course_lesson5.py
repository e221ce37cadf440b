"""Lesson 5's pictures, and the loader behaviour its reference page states, on small data."""

from __future__ import annotations

import numpy as np
import pytest

import course_lib as grain
from course_lib import course
from course_lib.course import sharding_policies


def test_shard_pictures_share_one_colour_scale():
    import matplotlib

    matplotlib.use("Agg")
    labels = np.repeat(np.arange(4), 16)  # an ordered file: 16 records of each label
    policies = {"blocks": np.arange(32), "mixed": np.arange(64).reshape(4, 16).T.ravel()[:32]}
    counts = {name: course.sharding_policies.label_counts(keys, labels, batch_size=8,
                                                          num_steps=4)
              for name, keys in policies.items()}
    assert counts["blocks"].max() == 8 and counts["mixed"].max() == 2  # scales would differ
    figure = sharding_policies.plot_shard_policies(policies, labels, batch_size=8, num_steps=4)
    images = [ax.images[0] for ax in figure.axes if ax.images]
    assert len(images) == 2
    assert {image.get_clim() for image in images} == {(0, 8)}


def test_the_script_loader_on_each_library():
    # course_lib keeps shard 0's sixth record, so its shards run 3 and 2 steps; Grain 0.2.18's
    # DataLoader cuts both shards to 5 records, 2 steps each
    def steps(module):
        return [[batch.tolist() for batch in module.load(
            module.RangeDataSource(0, 11, 1), num_epochs=1,
            shard_options=module.ShardOptions(index, 2, drop_remainder=False), batch_size=2,
            drop_remainder=True)] for index in range(2)]

    assert steps(grain) == [[[0, 1], [2, 3], [4, 5]], [[6, 7], [8, 9]]]
    real_grain = pytest.importorskip("grain.python")
    assert steps(real_grain) == [[[0, 1], [2, 3]], [[6, 7], [8, 9]]]


def test_shard_policy_panels_label_their_axes():
    import matplotlib

    matplotlib.use("Agg")
    keys = np.arange(40)[::2]
    figure = sharding_policies.plot_shard_policies({"stride": keys}, np.sort(np.arange(40) % 4),
                                                   batch_size=4, num_steps=3)
    assert figure.axes[0].get_xlabel() == "label" and figure.axes[0].get_ylabel() == "step"


def test_plot_step_counts_marks_the_step_entered_alone_and_those_never_reached():
    import matplotlib

    matplotlib.use("Agg")
    figure = sharding_policies.plot_step_counts([19, 17])
    lines = {line.get_label(): line for line in figure.axes[0].lines
             if not line.get_label().startswith("_")}
    alone = lines["entered alone: its collective waits for ever"]
    assert alone.get_xdata().tolist() == [17] and alone.get_ydata().tolist() == [0]
    assert lines["never reached"].get_xdata().tolist() == [18]
    equal = sharding_policies.plot_step_counts([5, 5])
    assert [line.get_label() for line in equal.axes[0].lines
            if not line.get_label().startswith("_")] == ["every process runs it"]
    with pytest.raises(ValueError, match="counts is empty"):
        sharding_policies.plot_step_counts([])


def test_a_filter_gives_equal_shards_unequal_step_counts():
    # the lesson's opening count, on the digits: equal shards, a filter, whole batches
    images = course.digits()["image"]

    class KeepBoldDigits(grain.FilterTransform):
        def filter(self, image):
            return (image > 127).mean() > 0.3

    def steps(index):
        sampler = grain.IndexSampler(len(images), shuffle=True, seed=0, num_epochs=1,
                                     shard_options=grain.ShardOptions(index, 2,
                                                                      drop_remainder=True))
        loader = grain.DataLoader(data_source=images, sampler=sampler,
                                  operations=[KeepBoldDigits(),
                                              grain.Batch(32, drop_remainder=True)])
        return sum(1 for _ in loader)

    counts = [steps(index) for index in range(2)]
    assert counts[0] != counts[1]
