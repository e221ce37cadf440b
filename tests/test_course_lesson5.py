"""Lesson 5's measurements and the sentences printed from them, with made-up numbers."""

from __future__ import annotations

import numpy as np
import pytest

import course_lib as grain
from course_lib import course
from course_lib.course import sharding_policies
from course_lib.course.sharding_policies import PairRepeats


def test_one_shared_shuffle_pairs_records_a_and_a_plus_size_in_every_epoch():
    shared = sharding_policies.shard_step_keys(40, shard_count=2, num_epochs=3, seed=0,
                                               own_shuffles=False)
    assert shared.shape == (2, 3, 20)
    assert (shared[1] - shared[0] == 20).all()
    counts = sharding_policies.pair_repeats(shared)
    assert (counts.pairs_per_epoch, counts.repeated, counts.every_epoch) == (20, 20, 20)


def test_own_shuffles_are_the_samplers_and_pair_records_anew():
    own = sharding_policies.shard_step_keys(40, shard_count=2, num_epochs=3, seed=0)
    sampler = grain.IndexSampler(40, grain.ShardOptions(1, 2, drop_remainder=True),
                                 shuffle=True, num_epochs=3, seed=0)
    assert own[1].ravel().tolist() == sampler.record_keys(0, 60).tolist()
    counts = sharding_policies.pair_repeats(own)
    assert counts.every_epoch < 20 and counts.by_chance == pytest.approx(3.0)


def test_pair_repeats_counts_a_pair_seen_twice():
    keys = np.array([[[0, 1], [0, 1]], [[2, 3], [3, 2]]])  # epoch 1 swaps shard 1's order
    counts = sharding_policies.pair_repeats(keys)
    assert (counts.pairs_per_epoch, counts.repeated, counts.every_epoch) == (2, 0, 0)
    same = np.array([[[0, 1], [0, 1]], [[2, 3], [2, 3]]])
    assert sharding_policies.pair_repeats(same).every_epoch == 2


SHARED = PairRepeats(num_epochs=3, pairs_per_epoch=100, repeated=100, every_epoch=100,
                     by_chance=3.0)


@pytest.mark.parametrize(("own", "expected"), [
    (PairRepeats(3, 100, 2, 0, 3.0), "pairs meet again only about as often as chance"),
    (PairRepeats(3, 100, 40, 5, 3.0), "they stay above chance"),
    (PairRepeats(3, 100, 100, 100, 3.0), "did not reduce the repeats"),
])
def test_describe_pair_repeats_covers_each_outcome(own, expected):
    sentence = sharding_policies.describe_pair_repeats(SHARED, own)
    assert expected in sentence
    assert f"{own.repeated} pair" in sentence and "100 of the 100 pairs" in sentence


def test_describe_pair_repeats_says_partners_change_when_the_shared_shuffle_is_not_total():
    partial = PairRepeats(3, 100, 60, 50, 3.0)
    sentence = sharding_policies.describe_pair_repeats(partial, PairRepeats(3, 100, 2, 0, 3.0))
    assert "often stays the same" in sentence and "never changes" not in sentence


@pytest.mark.parametrize(("counts", "expected"), [
    ([19, 17], "19 steps against 17. The job would hang at the 18th step (step 17, counting "
               "from 0 as the scripts of this lesson do): process 0 enters its collective, "
               "which process 1, done after 17 steps, never joins."),
    ([19, 18, 17], "The job would hang at the 18th step (step 17, counting from 0 as the "
                   "scripts of this lesson do): processes 0 and 1 enter its collective, "
                   "which process 2, done after 17 steps, never joins."),
    ([16, 17, 16, 17], "17 steps against 16. The job would hang at the 17th step (step 16, "
                       "counting from 0 as the scripts of this lesson do): processes 1 and 3 "
                       "enter its collective, which processes 0 and 2, done after 16 steps, "
                       "never join."),
    ([2, 1], "at the 2nd step (step 1,"),
    ([22, 21], "at the 22nd step (step 21,"),
    ([12, 11], "at the 12th step (step 11,"),
    ([12, 12], "Equal here, but only because"),
])
def test_describe_step_counts_covers_each_outcome(counts, expected):
    assert expected in sharding_policies.describe_step_counts(counts)


def test_grain_shard_step_keys_reads_grains_sampler_which_pairs_a_and_a_plus_size():
    pytest.importorskip("grain.python")
    keys = sharding_policies.grain_shard_step_keys(40, shard_count=2, num_epochs=3, seed=0)
    assert keys.shape == (2, 3, 20)
    assert sorted(keys[0, 0].tolist()) == list(range(20))  # shard 0's block, one epoch
    assert (keys[1] - keys[0] == 20).all()  # Grain's shards share one shuffle
    assert sharding_policies.pair_repeats(keys).every_epoch == 20


def test_plot_step_partners_labels_the_shared_panel_as_told():
    import matplotlib.pyplot as plt

    shared = sharding_policies.shard_step_keys(40, shard_count=2, num_epochs=2, seed=0,
                                               own_shuffles=False)
    own = sharding_policies.shard_step_keys(40, shard_count=2, num_epochs=2, seed=0)
    figure = sharding_policies.plot_step_partners(shared, own)
    titles = [ax.get_title() for ax in figure.axes]
    assert titles[0] == "one shuffle for every shard, simulated" and "Grain" not in titles[0]
    plt.close(figure)
    figure = sharding_policies.plot_step_partners(shared, own, shared_title="read from Grain")
    assert figure.axes[0].get_title() == "read from Grain"
    plt.close(figure)


def test_unread_keys_sentence_names_the_keys_no_shard_read():
    # Grain 0.2.18's DataLoader on 11 records in 2 shards, drop_remainder=False (measured)
    sentence = sharding_policies.unread_keys_sentence("Grain",
                                                      [[0, 1, 2, 3, 4], [6, 7, 8, 9, 10]], 11)
    assert sentence == ("Grain: shard 0 read [0, 1, 2, 3, 4]; shard 1 read [6, 7, 8, 9, 10]. "
                        "Of the 11 records, key 5 was read by no shard.")
    every = sharding_policies.unread_keys_sentence("course_lib", [[0, 1, 2], [3, 4]], 5)
    assert every.endswith("Every one of the 5 records was read, by exactly one shard.")
    both = sharding_policies.unread_keys_sentence("x", [[0, 1, 2], [2, 3]], 6)
    assert "keys 4, 5 were read by no shard and key 2 was read by more than one shard" in both
    with pytest.raises(ValueError, match="read is empty"):
        sharding_policies.unread_keys_sentence("x", [], 3)


def test_stride_shards_sentence_for_equal_and_unequal_shards():
    assert sharding_policies.stride_shards_sentence([6, 5]) == (
        "Shards of 6, 5 records: unequal, process 0 holds 1 more, so the step counts can "
        "differ, as in the first section.")
    assert "processes 0, 1 hold 1 more" in sharding_policies.stride_shards_sentence([4, 4, 3])
    assert sharding_policies.stride_shards_sentence([5, 5]).startswith(
        "Shards of 5, 5 records: equal")
    with pytest.raises(ValueError, match="sizes is empty"):
        sharding_policies.stride_shards_sentence([])


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


# -- JAX's timeouts, read from the installed JAX ---------------------------------------------

DOCSTRING = """Initializes.

  Args:
    initialization_timeout: Time period (in seconds) for which connection will
      be retried.
    heartbeat_timeout_seconds (int): The time after which a process is
      considered dead.
    shutdown_timeout_seconds: The time a terminating process will
      wait for all other processes.

  Raises:
    RuntimeError: twice.
"""
SOURCE = """
    self.service = _jax.get_distributed_runtime_service(
        address, num_processes,
        heartbeat_timeout=heartbeat_timeout_seconds,
        shutdown_timeout=shutdown_timeout_seconds)
    self.client = _jax.get_distributed_runtime_client(
        address, process_id, init_timeout=initialization_timeout,
        use_compression=True, heartbeat_timeout=heartbeat_timeout_seconds)
"""
OLD_SOURCE = SOURCE.replace("\n        shutdown_timeout=shutdown_timeout_seconds", "")
ALL = {"initialization_timeout": 300, "heartbeat_timeout_seconds": 100,
       "shutdown_timeout_seconds": 300}
NO_SHUTDOWN = {**ALL, "shutdown_timeout_seconds": None}


def test_jax_parameter_docs_joins_each_arguments_lines_and_stops_at_the_section_end():
    docs = sharding_policies.jax_parameter_docs(DOCSTRING)
    assert docs == {
        "initialization_timeout": "Time period (in seconds) for which connection will be "
                                  "retried.",
        "heartbeat_timeout_seconds": "The time after which a process is considered dead.",
        "shutdown_timeout_seconds": "The time a terminating process will wait for all other "
                                    "processes."}
    assert sharding_policies.jax_parameter_docs("no sections") == {}


def test_jax_timeout_routes_reads_the_keywords_of_both_calls():
    routes = sharding_policies.jax_timeout_routes(SOURCE)
    assert routes == {"service": {"heartbeat_timeout": "heartbeat_timeout_seconds",
                                  "shutdown_timeout": "shutdown_timeout_seconds"},
                      "client": {"init_timeout": "initialization_timeout",
                                 "use_compression": "True",
                                 "heartbeat_timeout": "heartbeat_timeout_seconds"}}
    assert sharding_policies.jax_timeout_routes("no calls here") is None


def test_timeout_lines_say_where_each_timeout_goes_and_quote_the_docstring():
    docs = sharding_policies.jax_parameter_docs(DOCSTRING)
    routes = sharding_policies.jax_timeout_routes(SOURCE)
    lines = sharding_policies.timeout_lines("9.9", ALL, docs=docs, routes=routes)
    assert lines[0].startswith("initialization_timeout=300 (5.0 minutes), passed to each "
                               "process's client only; its docstring: \"Time period")
    assert lines[1].startswith("heartbeat_timeout_seconds=100 (1.7 minutes), passed to the "
                               "coordination service (which process 0 starts) and each "
                               "process's client;")
    assert lines[2] == ("shutdown_timeout_seconds=300 (5.0 minutes), passed to the coordination "
                        "service (which process 0 starts) only; its docstring: \"The time a "
                        "terminating process will wait for all other processes.\"")


def test_timeout_lines_for_a_jax_without_a_shutdown_timeout():
    routes = sharding_policies.jax_timeout_routes(OLD_SOURCE)
    lines = sharding_policies.timeout_lines("0.7.2", NO_SHUTDOWN, docs={}, routes=routes)
    assert lines[2] == ("shutdown_timeout_seconds: not a parameter of jax.distributed.initialize "
                        "in JAX 0.7.2; initialize() passes no shutdown_timeout to the service or "
                        "the clients, so jaxlib's own default applies.")
    # absent as a parameter, but set by initialize() all the same: no claim about jaxlib
    set_anyway = sharding_policies.timeout_lines("1.0", NO_SHUTDOWN, docs={}, routes=routes
                                                 | {"service": {"shutdown_timeout": "600"}})
    assert set_anyway[2] == ("shutdown_timeout_seconds: not a parameter of "
                             "jax.distributed.initialize in JAX 1.0.")
    assert lines[1].endswith("and each process's client.")  # no docstring: nothing quoted


def test_timeout_lines_when_the_source_cannot_be_read_or_passes_a_timeout_nowhere():
    unreadable = sharding_policies.timeout_lines("1.0", ALL, docs={}, routes=None)
    assert all("could not be read from its source" in line for line in unreadable)
    nowhere = sharding_policies.timeout_lines(
        "1.0", ALL, docs={}, routes={"service": {}, "client": {}})
    assert all("passed to neither the service nor the clients" in line for line in nowhere)
    missing = sharding_policies.timeout_lines("1.0", NO_SHUTDOWN, docs={}, routes=None)
    assert missing[2] == ("shutdown_timeout_seconds: not a parameter of "
                          "jax.distributed.initialize in JAX 1.0.")


def test_timeout_lines_read_the_installed_jax():
    import inspect

    import jax

    parameters = inspect.signature(jax.distributed.initialize).parameters
    defaults = {name: parameters[name].default if name in parameters else None
                for name in sharding_policies.JAX_TIMEOUTS}
    lines = sharding_policies.timeout_lines(jax.__version__, defaults)
    heartbeat = lines[1]
    default = defaults["heartbeat_timeout_seconds"]
    assert heartbeat.startswith(f"heartbeat_timeout_seconds={default}")
    assert "passed to the coordination service (which process 0 starts) and each" in heartbeat
    assert "its docstring: \"The time (in seconds) after which a process" in heartbeat


def test_exit_wait_sentence_follows_the_shutdown_timeout_of_the_version():
    routes = sharding_policies.jax_timeout_routes(SOURCE)  # the client gets no shutdown_timeout
    two_limits = sharding_policies.exit_wait_sentence("0.10.2", ALL, routes=routes)
    assert two_limits.startswith(
        "So in JAX 0.10.2 the process waiting at exit waits for the others for at most the "
        "shorter of two limits: shutdown_timeout_seconds (5.0 minutes by default, the "
        "coordination service's), and its client's own shutdown timeout, which initialize() "
        "does not set, so jaxlib's default applies (5 minutes")
    assert "Raising shutdown_timeout_seconds alone does not make it wait longer" in two_limits
    client_too = {**routes, "client": {**routes["client"],
                                       "shutdown_timeout": "shutdown_timeout_seconds"}}
    one_limit = sharding_policies.exit_wait_sentence("9.9", ALL, routes=client_too)
    assert one_limit == ("So in JAX 9.9 the process waiting at exit waits for the others "
                         "for at most shutdown_timeout_seconds, 5.0 minutes by default, with "
                         "every device of the job idle meanwhile.")
    unreadable = sharding_policies.exit_wait_sentence("9.9", ALL, routes=None)
    assert "or less if its client's own shutdown timeout is shorter" in unreadable
    without = sharding_policies.exit_wait_sentence("0.7.2", NO_SHUTDOWN, routes=routes)
    assert without.startswith("So in JAX 0.7.2 initialize() gives no way to set how long")
    assert "minutes" not in without


def test_exit_wait_sentence_reads_the_installed_jax():
    # JAX 0.10.2's initialize() passes shutdown_timeout to the service only
    import inspect

    import jax

    parameters = inspect.signature(jax.distributed.initialize).parameters
    defaults = {name: parameters[name].default if name in parameters else None
                for name in sharding_policies.JAX_TIMEOUTS}
    sentence = sharding_policies.exit_wait_sentence(jax.__version__, defaults)
    if jax.__version__ == "0.10.2":
        assert "the shorter of two limits" in sentence


def test_batched_steps_sentence_for_each_outcome():
    # the script's loader, 11 records in 2 shards, batches of 2 (measured on both libraries)
    course_lib_batches = [[[0, 1], [2, 3], [4, 5]], [[6, 7], [8, 9]]]
    hangs = sharding_policies.batched_steps_sentence("course_lib", course_lib_batches, 11)
    assert hangs == ("course_lib: shard 0 ran 3 steps [[0, 1], [2, 3], [4, 5]]; shard 1 ran 2 "
                     "steps [[6, 7], [8, 9]]. Unequal step counts (3 against 2), so this job "
                     "waits at the extra step's collective; key 10 reached no batch.")
    grain_batches = [[[0, 1], [2, 3]], [[6, 7], [8, 9]]]
    finishes = sharding_policies.batched_steps_sentence("Grain 0.2.18", grain_batches, 11)
    assert finishes.endswith("Equal step counts, so this job would finish; keys 4, 5, 10 "
                             "reached no batch.")
    every = sharding_policies.batched_steps_sentence("x", [[[0, 1]], [[2]]], 3)
    assert "shard 1 ran 1 step [[2]]" in every and every.endswith("all 3 records reached a batch.")
    with pytest.raises(ValueError, match="batches is empty"):
        sharding_policies.batched_steps_sentence("x", [], 3)


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


def test_endless_run_sentence_for_each_outcome():
    crossed = sharding_policies.endless_run_sentence(25, [19, 17], [160, 224])
    assert crossed.startswith("process 0: 25 steps, 160 records read twice; process 1: 25 "
                              "steps, 224 records read twice. One epoch of each shard held "
                              "[19, 17] batches.")
    assert "Every process read past its epoch's end into the next" in crossed
    short = sharding_policies.endless_run_sentence(10, [19, 17], [0, 0])
    assert "processes 0 and 1 read no record twice" in short
    assert "raise the step count" in short and "Every process" not in short
    one = sharding_policies.endless_run_sentence(18, [19, 17], [0, 30])
    assert "process 0 read no record twice: 18 steps did not take it past" in one


def test_shard_plots_label_their_axes_and_name_the_loader():
    import matplotlib

    matplotlib.use("Agg")
    sizes = {drop: {2: [5, 6] if not drop else [5, 5]} for drop in (False, True)}
    figure = sharding_policies.plot_shard_sizes(sizes, 11)
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in figure.axes)
    assert figure._suptitle.get_text() == "Shard sizes as course_lib's loader reads them"
    keys = np.arange(40)[::2]
    figure = sharding_policies.plot_shard_policies({"stride": keys}, np.sort(np.arange(40) % 4),
                                                   batch_size=4, num_steps=3)
    assert figure.axes[0].get_xlabel() == "label" and figure.axes[0].get_ylabel() == "step"


def test_plot_step_partners_keeps_coinciding_epochs_visible():
    import matplotlib

    matplotlib.use("Agg")
    shared = sharding_policies.shard_step_keys(40, shard_count=2, num_epochs=3, seed=0,
                                               own_shuffles=False)
    figure = sharding_policies.plot_step_partners(shared, shared)
    sizes = [line.get_markersize() for line in figure.axes[0].lines]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == 3  # epoch 0 largest


def test_shard_sizes_plot_keeps_both_markers_visible_where_the_lines_meet():
    import matplotlib

    matplotlib.use("Agg")
    sizes = {drop: {2: [5, 5], 3: [4, 3, 3] if not drop else [3, 3, 3]} for drop in (False, True)}
    figure = sharding_policies.plot_shard_sizes(sizes, 10)
    for ax in figure.axes:
        kept, dropped = ax.get_lines()[:2]
        # at 2 shards both lines are at 0: the hollow, larger square leaves the dot visible
        assert dropped.get_markerfacecolor() == "none"
        assert dropped.get_markersize() > kept.get_markersize()


def test_device_rows_lines_for_each_outcome():
    own = [{"rank": 1, "local_ids": [4, 5, 6, 7], "device_ids": {"2": [4, 5], "3": [6, 7]}},
           {"rank": 0, "local_ids": [0, 1, 2, 3], "device_ids": {"1": [2, 3], "0": [0, 1]}}]
    lines = sharding_policies.device_rows_lines(own)
    assert lines[0] == ("rank 0: local batch [0, 1, 2, 3]; device 0 holds [0, 1]; "
                        "device 1 holds [2, 3]")
    assert lines[1].startswith("rank 1: local batch [4, 5, 6, 7]; device 2 holds [4, 5]")
    assert lines[2].startswith("Every device holds only rows of its own process's local batch")
    mixed = [{"rank": 0, "local_ids": [0, 1, 2, 3], "device_ids": {"0": [0, 1], "1": [4, 5]}},
             {"rank": 1, "local_ids": [4, 5, 6, 7], "device_ids": {"2": [2, 3], "3": [6, 7]}}]
    verdict = sharding_policies.device_rows_lines(mixed)[-1]
    assert verdict.startswith("Not every device holds only its own process's rows")
    assert "rank 0's device 1 holds [4, 5] from another process" in verdict
    assert "rank 1's device 2 holds [2, 3] from another process" in verdict
    with pytest.raises(ValueError, match="no reports"):
        sharding_policies.device_rows_lines([])
