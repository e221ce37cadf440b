"""Per-record random streams: a pure function of (seed, position), independent across seeds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.randomness import BATCH_STREAM, RECORD_STREAM, RecordRng, record_rng

SEEDS = st.integers(0, 2**63 - 2)
POSITIONS = st.integers(0, 2**62)


def _draws(generator: np.random.Generator) -> list[int]:
    return generator.integers(0, 2**63, size=4).tolist()


def test_grain_collision_seed_7_index_1_differs_from_seed_8_index_0():
    assert _draws(record_rng(7, 1)) != _draws(record_rng(8, 0))


@settings(deadline=None, max_examples=200)
@given(seed=SEEDS, position=POSITIONS)
def test_streams_are_independent_across_neighbouring_seeds(seed, position):
    assert _draws(record_rng(seed, position + 1)) != _draws(record_rng(seed + 1, position))
    assert _draws(record_rng(seed, position)) != _draws(record_rng(seed + 1, position))


@settings(deadline=None, max_examples=100)
@given(seed=SEEDS, position=POSITIONS)
def test_neighbouring_positions_have_different_streams(seed, position):
    assert _draws(record_rng(seed, position)) != _draws(record_rng(seed, position + 1))


def test_long_draws_of_one_record_do_not_run_into_the_next_record():
    # A stream keyed on consecutive counters could overlap its neighbour after a few draws.
    long_draw = record_rng(3, 10).integers(0, 2**63, size=10_000)
    neighbour_start = record_rng(3, 11).integers(0, 2**63, size=4)
    windows = np.lib.stride_tricks.sliding_window_view(long_draw, 4)
    assert not (windows == neighbour_start).all(axis=1).any()


def test_no_two_of_many_seed_position_pairs_share_a_stream():
    first_draws = {record_rng(seed, position).integers(0, 2**63)
                   for seed in range(40) for position in range(40)}
    assert len(first_draws) == 1600


def test_record_rng_is_deterministic():
    np.testing.assert_array_equal(record_rng(5, 17).normal(size=10),
                                  record_rng(5, 17).normal(size=10))


def test_batch_stream_differs_from_record_stream():
    assert _draws(record_rng(5, 3, BATCH_STREAM)) != _draws(record_rng(5, 3, RECORD_STREAM))
    assert _draws(record_rng(5, 3)) == _draws(record_rng(5, 3, RECORD_STREAM))


def test_record_rng_ignores_global_numpy_state():
    np.random.seed(0)
    first = _draws(record_rng(1, 2))
    np.random.seed(1)
    np.random.random(100)
    assert _draws(record_rng(1, 2)) == first


def _mixed_draws(generator: np.random.Generator) -> list:
    # 32-bit draws leave half a 64-bit word buffered: a rewind must discard it.
    return [generator.integers(0, 10, size=3, dtype=np.int32).tolist(),
            generator.random(3).tolist(),
            generator.normal(size=3).tolist(),
            generator.integers(0, 2**40, size=2).tolist(),
            generator.permutation(5).tolist()]


@settings(deadline=None, max_examples=60)
@given(seed=SEEDS, positions=st.lists(POSITIONS, min_size=1, max_size=6),
       stream=st.sampled_from([RECORD_STREAM, BATCH_STREAM]))
def test_record_rng_at_reproduces_record_rng_after_other_draws(seed, positions, stream):
    rewound = RecordRng(seed, stream)
    for position in positions:
        rewound.at(position + 1).integers(0, 10, size=1, dtype=np.int32)  # a half-used word
        got = _mixed_draws(rewound.at(position))
        assert got == _mixed_draws(record_rng(seed, position, stream))


def test_record_rng_at_returns_the_same_position_twice_in_a_row():
    rewound = RecordRng(9)
    first = _mixed_draws(rewound.at(4))
    assert _mixed_draws(rewound.at(4)) == first


def test_record_rng_at_reuses_one_generator_that_nobody_kept():
    rewound = RecordRng(0)
    first = id(rewound.at(0))  # the generator is let go of at once, as a transform should
    assert all(id(rewound.at(position)) == first for position in range(1, 100))


def test_record_rng_at_leaves_a_kept_generator_to_continue_its_own_stream():
    rewound = RecordRng(4)
    kept = rewound.at(7)
    kept.random()
    other = rewound.at(8)
    assert other is not kept
    assert kept.random() == record_rng(4, 7).random(2)[1]
    assert other.random() == record_rng(4, 8).random()


@pytest.mark.parametrize("seed", [0, 1, 2**63 - 1])
def test_extreme_seeds_and_positions_work(seed):
    assert len(_draws(record_rng(seed, 2**64 - 1))) == 4
    assert _draws(RecordRng(seed).at(2**64 - 1)) == _draws(record_rng(seed, 2**64 - 1))


def test_fast_rewind_and_public_state_setter_give_the_same_streams():
    from course_lib.randomness import RecordRng, record_rng

    fast, slow = RecordRng(11), RecordRng(11)
    slow._fast = None  # force the public `bit_generator.state` path
    for position in (0, 1, 77, 2**40 + 3):
        expected = record_rng(11, position).random(5)
        assert np.array_equal(fast.at(position).random(5), expected)
        assert np.array_equal(slow.at(position).random(5), expected)
