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
`parallel_workers`, `sharding_policies`, `training_loop`, `resume`, `moving_to_grain`).
Everything is re-exported here, so a notebook only writes `from course_lib import course`.
"""

from course_lib.course.basics import (
    DIGIT_SIDE,
    FAST_ENV,
    bar_chart,
    check_raised,
    choose,
    compare,
    data_root,
    digit_images_on_disk,
    digits,
    fast_mode,
    format_seconds,
    jax_messages,
    last_error,
    median_time,
    mnist_or_digits,
    must_raise,
    plot_scaling,
    plot_timelines,
    print_mode,
    show_images,
    show_traceback,
    upscale,
)
from course_lib.course.bottleneck import (
    bottleneck_sentence,
    profile_table,
    progress,
)
from course_lib.course.building_blocks import (
    READ_AHEAD_THREAD_PREFIX,
    PipelineTiming,
    read_ahead_threads,
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
from course_lib.course.moving_to_grain import (
    NAME_MAP,
    FeedMeasurement,
    FeedSummary,
    first_batch_sentence,
    grain_missing_sentence,
    grain_ready,
    import_grain,
    measure_feeds,
    plot_side_by_side,
    print_name_map,
    resume_checks,
    run_json_lines,
    same_first_batches,
    speed_sentence,
    state_outline,
    summarise,
    summary_table,
    what_to_remember,
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
    PairRepeats,
    contiguous_shard_keys,
    describe_pair_repeats,
    describe_step_counts,
    pair_repeats,
    plot_shard_policies,
    plot_shard_sizes,
    plot_step_partners,
    shard_step_keys,
    steps_per_process,
    strided_shard_keys,
)
from course_lib.course.training_loop import (
    naive_batches,
    plot_training,
)

__all__ = [
    "DIGIT_SIDE",
    "FAST_ENV",
    "NAME_MAP",
    "READ_AHEAD_THREAD_PREFIX",
    "FeedMeasurement",
    "FeedSummary",
    "LoaderTiming",
    "PairRepeats",
    "PipelineTiming",
    "all_keys_in_chunks",
    "bar_chart",
    "benchmark_workers",
    "bottleneck_sentence",
    "check_raised",
    "choose",
    "compare",
    "contiguous_shard_keys",
    "cycle_walks",
    "data_root",
    "describe_failure",
    "describe_pair_repeats",
    "describe_step_counts",
    "digit_images_on_disk",
    "digits",
    "fast_mode",
    "feistel_domain",
    "first_batch_sentence",
    "first_batches_in_a_new_process",
    "first_draw_grid",
    "first_draws",
    "fork_server_sentence",
    "format_bytes",
    "format_seconds",
    "grain_batches",
    "grain_missing_sentence",
    "grain_ready",
    "import_grain",
    "jax_messages",
    "last_error",
    "machine_load",
    "measure_feeds",
    "median_time",
    "mnist_or_digits",
    "must_raise",
    "naive_batches",
    "pair_repeats",
    "pickle_or_share",
    "plot_cycle_walks",
    "plot_draw_grids",
    "plot_lines",
    "plot_resume",
    "plot_scaling",
    "plot_shard_policies",
    "plot_shard_sizes",
    "plot_side_by_side",
    "plot_step_partners",
    "plot_timelines",
    "plot_training",
    "print_mode",
    "print_name_map",
    "profile_table",
    "progress",
    "read_ahead_threads",
    "resume_checks",
    "run_json_lines",
    "same_first_batches",
    "shard_step_keys",
    "shared_stream_count",
    "show_image_rows",
    "show_images",
    "show_traceback",
    "speed_sentence",
    "speedups",
    "state_outline",
    "steps_per_process",
    "strided_shard_keys",
    "summarise",
    "summary_table",
    "time_loader",
    "time_pipeline",
    "time_pipelines",
    "traced_peak_bytes",
    "upscale",
    "what_to_remember",
    "worker_memory_mb",
    "worker_rule_of_thumb",
]
