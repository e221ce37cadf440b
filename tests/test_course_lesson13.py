"""Lesson 13's records, counts and pictures."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from course_lib.course import mixing_data_sets as mix
from course_lib.mixing import component_at


def test_a_record_holds_its_padded_bytes_its_corpus_and_its_key():
    source = mix.CorpusPieces([b"ab", b"xyz"], corpus=1, row_length=4)
    record = source[1]
    assert record["tokens"].tolist() == [ord("x"), ord("y"), ord("z"), 0]
    assert int(record["corpus"]) == 1 and int(record["key"]) == 1 and len(source) == 2
    assert pickle.loads(pickle.dumps(source))[0]["tokens"].tolist()[:2] == [97, 98]


def test_a_piece_longer_than_the_row_is_refused():
    with pytest.raises(ValueError, match="row_length=2"):
        mix.CorpusPieces([b"abc"], corpus=0, row_length=2)


def test_the_filter_drops_pieces_with_a_docstring_quote():
    source = mix.CorpusPieces([b'x = 1', b'    """Doc."""'], corpus=1, row_length=16)
    assert mix.no_docstring_quote(source[0]) and not mix.no_docstring_quote(source[1])


def test_per_batch_counts_and_prefix_deviation_are_measured():
    components = np.array([0, 0, 1, 0, 1, 1, 0])
    assert mix.per_batch(components, 3).tolist() == [2, 1]  # the last partial batch is left
    deviation = mix.prefix_deviation(components, 0.5)
    assert deviation.tolist() == [0.5, 1.0, 0.5, 1.0, 0.5, 0.0, 0.5]


def test_the_rule_keeps_every_prefix_within_one_and_a_coin_does_not():
    rule = np.array([component_at(k, (233, 100))[0] for k in range(5000)])
    coin = (np.random.default_rng(0).random(5000) >= 233 / 333).astype(np.int32)
    assert mix.prefix_deviation(rule, 233 / 333).max() <= 1
    assert mix.prefix_deviation(coin, 233 / 333).max() > 5


def _records(pairs):
    return [{"corpus": np.int32(corpus), "key": np.int32(key)} for corpus, key in pairs]


def test_reads_per_corpus_counts_reads_and_distinct_records():
    counts = mix.reads_per_corpus(_records([(0, 0), (0, 1), (1, 0), (0, 0)]), [2, 5])
    assert counts == [{"read": 3, "distinct": 2}, {"read": 1, "distinct": 1}]
    batched = [{"corpus": np.array([0, 1]), "key": np.array([4, 4])}]
    assert mix.reads_per_corpus(batched, [5, 5])[1] == {"read": 1, "distinct": 1}


def test_equal_batches_compares_every_array_and_counts_missing_batches():
    reference = [{"a": np.arange(3)}, {"a": np.arange(3) + 1}]
    assert mix.equal_batches([{"a": np.arange(3)}], reference) == [True, False]
    assert mix.equal_batches([{"a": np.arange(3)}, {"b": np.arange(3) + 1}],
                             reference) == [True, False]
    assert mix.equal_batches([{"a": np.arange(3) + 1}] * 2, reference) == [False, True]


def test_the_pictures_draw():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rule = np.array([component_at(k, (233, 100))[0] for k in range(320)])
    coin = (np.random.default_rng(0).random(320) >= 0.7).astype(np.int32)
    figures = [
        mix.plot_batch_shares(mix.per_batch(rule, 32), mix.per_batch(coin, 32),
                              mix.prefix_deviation(rule, 0.7), mix.prefix_deviation(coin, 0.7),
                              32, 0.7),
    ]
    assert all(figure.axes for figure in figures)
    plt.close("all")
