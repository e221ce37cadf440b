"""Unequal shards in a real two-process JAX job: the process with one more step hangs.

11 records over 2 processes with `ShardByJaxProcess(drop_remainder=False)` gives shards of
6 and 5 records (the first shard takes the remainder, as in Grain); in batches of 2
(incomplete batches dropped) that is 3 steps on rank 0 and 2 on rank 1. Every step sums the
global batch, a cross-process collective like a gradient all-reduce. Rank 0's third
collective waits for a rank 1 that has already finished, and rank 1 itself waits at exit, in
JAX's shutdown barrier, for rank 0: neither ever returns.
The launcher stops both at the deadline and shows where each was waiting.
`drop_remainder=True` gives both shards 5 records, 2 steps each, and the job completes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_lib.launch import LaunchResult, launch

SCRIPT = Path(__file__).parent / "multiprocess" / "unequal_steps.py"
NUM_RECORDS, BATCH_SIZE = 11, 2
DEADLINE = 10  # seconds: the job starts in about 2 s and its real work takes milliseconds


def reports(result: LaunchResult) -> list[dict]:
    """The JSON each rank printed after 'RESULT ', in rank order."""
    found = []
    for rank in result.ranks:
        lines = [line for line in rank.output.splitlines() if line.startswith("RESULT ")]
        assert lines, f"rank {rank.rank} printed no RESULT line:\n{rank.output}"
        found.append(json.loads(lines[-1].removeprefix("RESULT ")))
    return found


@pytest.mark.timeout(60)
def test_unequal_shards_hang_on_the_extra_collective_and_are_reported_stuck():
    result = launch(SCRIPT, num_processes=2, timeout=DEADLINE, check=False,
                    args=[str(NUM_RECORDS), str(BATCH_SIZE), "0"])
    summary = result.summary()
    assert not result.ok and result.timed_out, summary
    assert result.failed_ranks == [] and result.stuck_ranks == [0, 1], summary
    assert result.elapsed < DEADLINE + 10, "the launcher did not stop the stuck ranks"
    rank0, rank1 = result.ranks

    # Rank 0 entered the collective of its extra step and never came out of it ...
    assert "rank 0: step 2 waits for the collective" in rank0.output, summary
    assert "rank 0: step 2 done" not in rank0.output, summary
    assert "unequal_steps.py" in rank0.main_stack and "<module>" in rank0.main_stack, summary
    # ... while rank 1 finished its 2 steps and then waited at exit for rank 0.
    assert "rank 1: finished 2 steps" in rank1.output, summary
    assert "unequal_steps.py" not in rank1.main_stack, summary
    assert "shutdown" in rank1.main_stack, summary

    assert "deadline" in summary and "rank 0 was waiting here at the deadline" in summary
    print(summary)  # what a student sees (pytest -s)


@pytest.mark.timeout(60)
def test_drop_remainder_gives_equal_steps_and_the_job_completes():
    result = launch(SCRIPT, num_processes=2, timeout=45,
                    args=[str(NUM_RECORDS), str(BATCH_SIZE), "1"])
    assert result.ok and not result.timed_out
    steps = reports(result)
    assert [r["steps"] for r in steps] == [2, 2]
    # Both computed the same global sums: records 0+1 and 5+6 at step 0, 2+3 and 7+8 next.
    assert steps[0]["sums"] == steps[1]["sums"] == [12, 20]
    assert all(rank.stacks == "" for rank in result.ranks)
