"""What only the notebooks need: the fast/full switch, the lesson data, the one table, plots.

The loader itself lives in the other modules (`import course_lib as grain`). This package
holds the few things every lesson repeats, so that cells stay short and the same decision
is made once:

- **Fast or full.** `COURSE_FAST=1` in the environment shrinks data and repetitions so that
  a lesson runs quickly (that is how the test suite runs them); without it a lesson measures
  at full size. `print_mode()` says which one is running, `choose(fast=..., full=...)` picks
  a size.
- **Real data, offline.** The 1,797 handwritten digits that scikit-learn ships, as arrays
  (`digits()`) or written once as PNG files on disk (`digit_images_on_disk()`), upscaled so
  that decoding one costs what decoding a real photo-sized file costs. `mnist_or_digits()`
  tries to download MNIST and says what it falls back to when offline.
- **The one rule and its table.** `table.compare(runs, baseline=...)` prints every
  comparison of the course: medians with their standard error, the ratio to the baseline
  and a verdict from `table.verdict` (faster, slower, no clear difference, too noisy to tell).
  `run_times` and `median_time` time a call a few times.
- **Pictures.** Bar charts with every run drawn as a dot, worker-count curves and image
  grids, all with labelled axes.
- **Cells that are meant to fail.** `must_raise` shows the real error, lets the cell succeed
  (so Run All goes on everywhere), and `check_raised` (in the next cell) proves that the
  error really happened.

The shared helpers live in `basics` and `table`; each lesson's own data and pictures live in
a module named for its topic (`bottleneck`, `determinism`, `parallel_workers`,
`sharding_policies`, `recompilation`, `training_loop`, `resume`, `bigger_than_memory`,
`sequential_formats`, `variable_length`, `moving_to_grain`, `capstone`,
`mixing_data_sets`). Only the helpers of `basics` (and `import_grain`, which several lessons
call) are re-exported here as `course.<name>`; a lesson imports its own module by name,
`from course_lib.course import bottleneck`, so a reader sees which lesson a helper belongs to.
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
    table,
    training_loop,
    variable_length,
)
from course_lib.course.basics import (
    DIGIT_SIDE,
    FAST_ENV,
    bar_chart,
    check_raised,
    choose,
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
    print_mode,
    run_times,
    show_images,
    show_traceback,
    upscale,
)
from course_lib.course.moving_to_grain import import_grain

__all__ = [
    "DIGIT_SIDE",
    "FAST_ENV",
    "bar_chart",
    "basics",
    "bigger_than_memory",
    "bottleneck",
    "capstone",
    "check_raised",
    "choose",
    "data_root",
    "determinism",
    "digit_images_on_disk",
    "digits",
    "fast_mode",
    "format_seconds",
    "import_grain",
    "jax_messages",
    "last_error",
    "median_time",
    "mixing_data_sets",
    "mnist_or_digits",
    "moving_to_grain",
    "must_raise",
    "parallel_workers",
    "plot_scaling",
    "print_mode",
    "recompilation",
    "resume",
    "run_times",
    "sequential_formats",
    "sharding_policies",
    "show_images",
    "show_traceback",
    "table",
    "training_loop",
    "upscale",
    "variable_length",
]
