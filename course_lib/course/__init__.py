"""What only the notebooks need: the fast/full switch, the lesson data, shared plots.

The loader itself lives in the other modules (`import course_lib as grain`). This module
holds the few things every lesson repeats, so that cells stay short and the same decision
is made once:

- **Fast or full.** `COURSE_FAST=1` in the environment shrinks data and repetitions so that
  a lesson runs in well under a minute (that is how the test suite runs them); without it a
  lesson measures at full size. `print_mode()` says which one is running, `choose(fast=...,
  full=...)` picks a size.
- **Real data, offline.** The 1,797 handwritten digits that scikit-learn ships, as arrays
  (`digits()`) or written once as PNG files on disk (`digit_images_on_disk()`), upscaled so
  that decoding one costs what decoding a real photo-sized file costs. `mnist_or_digits()`
  tries to download MNIST and says what it falls back to when offline.
- **Measurements and sentences.** `median_time` times a call a few times; `compare` turns
  two timings into a sentence that says "faster" or "slower" from the numbers themselves.
- **Pictures.** Bar charts, worker-count curves, timelines and image grids, all with
  labelled axes.
- **Cells that are meant to fail.** `must_raise` shows the real traceback, lets the cell
  succeed (so Run All goes on everywhere), and
  `check_raised` (in the next cell) proves that the error really happened.

The shared helpers live in `basics`; each lesson's own measurements and pictures live in a
module named for its topic (`bottleneck`, `building_blocks`, `determinism`,
`parallel_workers`, `sharding_policies`, `training_loop`, `resume`). Everything is
re-exported here, so a notebook only writes `from course_lib import course`.
"""

from course_lib.course.basics import (
    DIGIT_SIDE,
    FAST_ENV,
    Estimate,
    bar_chart,
    check_raised,
    choose,
    compare,
    compare_estimates,
    data_root,
    digit_images_on_disk,
    digits,
    fast_mode,
    format_estimate,
    format_seconds,
    jax_messages,
    last_error,
    median_time,
    mnist_or_digits,
    must_raise,
    outcome,
    plot_scaling,
    plot_timelines,
    print_mode,
    repeated_times,
    show_images,
    show_traceback,
    upscale,
)
from course_lib.course.bottleneck import (
    bottleneck_sentence,
    busy_step_sentence,
    diagnosis_sentence,
    dispatch_sentence,
    idle_prediction_sentence,
    machine_load_sentence,
    overlap_bound_sentence,
    overlap_sentence,
    profile_table,
    progress,
    same_schedule_sentence,
    stand_in_sentence,
    step_period,
)
from course_lib.course.building_blocks import (
    READ_AHEAD_THREAD_PREFIX,
    PipelineTiming,
    filter_first_sentence,
    placement_sentence,
    read_ahead_threads,
    read_threads_sentence,
    time_pipeline,
    time_pipelines,
)
from course_lib.course.determinism import (
    all_keys_in_chunks,
    cycle_walks,
    feistel_domain,
    first_draw_grid,
    first_draws,
    format_bytes,
    plot_cycle_walks,
    plot_draw_grids,
    plot_lines,
    shared_stream_count,
    show_image_rows,
    traced_peak_bytes,
)
from course_lib.course.parallel_workers import (
    LoaderTiming,
    benchmark_workers,
    describe_failure,
    first_batches_in_a_new_process,
    fork_server_sentence,
    grain_batches,
    machine_load,
    pickle_or_share,
    speedups,
    time_loader,
    worker_memory_mb,
    worker_rule_of_thumb,
)
from course_lib.course.resume import (
    plot_resume,
)
from course_lib.course.sharding_policies import (
    contiguous_shard_keys,
    plot_shard_policies,
    plot_shard_sizes,
    strided_shard_keys,
)
from course_lib.course.training_loop import (
    naive_batches,
    plot_training,
)

__all__ = [
    "DIGIT_SIDE",
    "FAST_ENV",
    "READ_AHEAD_THREAD_PREFIX",
    "Estimate",
    "LoaderTiming",
    "PipelineTiming",
    "all_keys_in_chunks",
    "bar_chart",
    "benchmark_workers",
    "bottleneck_sentence",
    "busy_step_sentence",
    "check_raised",
    "choose",
    "compare",
    "compare_estimates",
    "contiguous_shard_keys",
    "cycle_walks",
    "data_root",
    "describe_failure",
    "diagnosis_sentence",
    "digit_images_on_disk",
    "digits",
    "dispatch_sentence",
    "fast_mode",
    "feistel_domain",
    "filter_first_sentence",
    "first_batches_in_a_new_process",
    "first_draw_grid",
    "first_draws",
    "fork_server_sentence",
    "format_bytes",
    "format_estimate",
    "format_seconds",
    "grain_batches",
    "idle_prediction_sentence",
    "jax_messages",
    "last_error",
    "machine_load",
    "machine_load_sentence",
    "median_time",
    "mnist_or_digits",
    "must_raise",
    "naive_batches",
    "outcome",
    "overlap_bound_sentence",
    "overlap_sentence",
    "pickle_or_share",
    "placement_sentence",
    "plot_cycle_walks",
    "plot_draw_grids",
    "plot_lines",
    "plot_resume",
    "plot_scaling",
    "plot_shard_policies",
    "plot_shard_sizes",
    "plot_timelines",
    "plot_training",
    "print_mode",
    "profile_table",
    "progress",
    "read_ahead_threads",
    "read_threads_sentence",
    "repeated_times",
    "same_schedule_sentence",
    "shared_stream_count",
    "show_image_rows",
    "show_images",
    "show_traceback",
    "speedups",
    "stand_in_sentence",
    "step_period",
    "strided_shard_keys",
    "time_loader",
    "time_pipeline",
    "time_pipelines",
    "traced_peak_bytes",
    "upscale",
    "worker_memory_mb",
    "worker_rule_of_thumb",
]
