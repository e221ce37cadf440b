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
- **Pictures.** Bar charts, worker-count curves and image grids, all with
  labelled axes.
- **Cells that are meant to fail.** `must_raise` shows the real traceback, lets the cell
  succeed (so Run All goes on everywhere), and
  `check_raised` (in the next cell) proves that the error really happened.

The shared helpers live in `basics`; each lesson's own measurements and pictures live in a
module named for its topic (`bottleneck`, `building_blocks`, `determinism`,
`parallel_workers`, `sharding_policies`, `recompilation`, `training_loop`, `resume`,
`bigger_than_memory`, `sequential_formats`, `variable_length`, `moving_to_grain`,
`mixing_data_sets` for lesson 13).
Only the shared helpers of `basics` (and `import_grain`, which lessons 11 and 13 both
call) are re-exported here as `course.<name>`. A lesson imports its own module by name,
`from course_lib.course import bottleneck`, and calls `bottleneck.plot_run_timelines(...)`,
so a reader sees which lesson a helper belongs to.
"""

from course_lib.course import (
    basics,
    bigger_than_memory,
    bottleneck,
    capstone,
    determinism,
    mixing_data_sets,
    moving_to_grain,
    parallel_workers,
    recompilation,
    resume,
    sequential_formats,
    sharding_policies,
    training_loop,
    variable_length,
)
from course_lib.course.basics import (
    DIGIT_SIDE,
    FAST_ENV,
    VERDICTS,
    Comparison,
    Estimate,
    accelerator_sentence,
    bar_chart,
    check_raised,
    choose,
    compare,
    compare_estimates,
    compare_runs,
    data_root,
    digit_images_on_disk,
    digits,
    fast_mode,
    format_duration,
    format_seconds,
    format_times,
    jax_messages,
    judge,
    last_error,
    median_time,
    mnist_or_digits,
    must_raise,
    noise_rule,
    plot_scaling,
    print_mode,
    relative_margin,
    relative_spread,
    round_significant,
    run_times,
    show_images,
    upscale,
)
from course_lib.course.moving_to_grain import import_grain

__all__ = [
    "DIGIT_SIDE",
    "FAST_ENV",
    "VERDICTS",
    "Comparison",
    "Estimate",
    "accelerator_sentence",
    "bar_chart",
    "basics",
    "bigger_than_memory",
    "bottleneck",
    "capstone",
    "check_raised",
    "choose",
    "compare",
    "compare_estimates",
    "compare_runs",
    "data_root",
    "determinism",
    "digit_images_on_disk",
    "digits",
    "fast_mode",
    "format_duration",
    "format_seconds",
    "format_times",
    "import_grain",
    "jax_messages",
    "judge",
    "last_error",
    "median_time",
    "mixing_data_sets",
    "mnist_or_digits",
    "moving_to_grain",
    "must_raise",
    "noise_rule",
    "parallel_workers",
    "plot_scaling",
    "print_mode",
    "recompilation",
    "relative_margin",
    "relative_spread",
    "resume",
    "round_significant",
    "run_times",
    "sequential_formats",
    "sharding_policies",
    "show_images",
    "training_loop",
    "upscale",
    "variable_length",
]
