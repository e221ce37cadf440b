"""The checks behind the graded exercises (`exercises/`), one module per exercise.

A check cell is one call, such as `checks.check_rotation(RandomRotation)`. The check runs the
learner's code, never reads its text, and either prints one line starting with a tick or
raises `AssertionError` saying what went wrong and what to try. Running it again gives the
same verdict.
"""

from course_lib.checks._verdict import expect, fail, learner_code, passed
from course_lib.checks.lazy_source import check_decode, check_lazy_costs, check_lazy_source
from course_lib.checks.packing import (
    check_causal_segment_mask,
    check_next_token_loss_mask,
    check_pack_first_fit,
    check_packed_like_alone,
    check_segment_positions,
)
from course_lib.checks.recompilation import check_count_traces
from course_lib.checks.resume import check_resume_batches
from course_lib.checks.rotation import check_rotation
from course_lib.checks.sharded_files import (
    check_sharded_loader,
    check_sharded_source,
    check_write_shards,
)
from course_lib.checks.shards import check_shard_samplers
from course_lib.checks.weighted_mix import check_weighted_mix
from course_lib.checks.worker_benchmark import (
    check_best_worker_count,
    check_time_worker_counts,
    check_worker_plot,
)

__all__ = [
    "check_best_worker_count",
    "check_causal_segment_mask",
    "check_count_traces",
    "check_decode",
    "check_lazy_costs",
    "check_lazy_source",
    "check_next_token_loss_mask",
    "check_pack_first_fit",
    "check_packed_like_alone",
    "check_resume_batches",
    "check_rotation",
    "check_segment_positions",
    "check_shard_samplers",
    "check_sharded_loader",
    "check_sharded_source",
    "check_time_worker_counts",
    "check_weighted_mix",
    "check_worker_plot",
    "check_write_shards",
    "expect",
    "fail",
    "learner_code",
    "passed",
]
