"""Lesson 11, moving to real Grain: Grain if it is installed, and the lesson's two pictures.

The chains, the loop and the measurements are written in the lesson's cells. This module
holds what they would otherwise repeat:

- **Grain may be missing.** `import_grain()` returns `grain.python` or None, saying what to
  install, so a lesson runs top to bottom either way (`grain_ready()` guards each Grain cell).
  It also marks absl's flags as parsed: Grain 0.2.18 reads the absl flag
  `--grain_enable_multiprocess_worker_profiling` in the calling process when it starts
  worker processes (`process_prefetch.py`), and reading an unparsed flag raises; a script
  parses its flags in `absl.app.run(main)`, a notebook never does. Lessons 3, 6 and 13 call
  it too, as `course.import_grain()`.
- **Pictures.** `plot_losses` draws the loss per step of the same loop on each library;
  `plot_resume_from_checkpoint` draws a resumed run and the control (dashed) on top of
  the uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

GRAIN_INSTALL = 'pip install "grain==0.2.18"'


def import_grain():
    """`grain.python`, ready to start worker processes, or None after saying what to install.

    Grain 0.2.18 reads one absl flag (`--grain_enable_multiprocess_worker_profiling`) in
    the calling process when an `mp_prefetch` iterator, or a `DataLoader` with workers,
    starts them; unparsed, the read raises `UnparsedFlagAccessError`. A notebook never
    parses flags, so they are marked parsed here (their defaults stand)."""
    try:
        import grain.python as grain
    except ImportError as error:
        print(f"Grain is not installed here ({type(error).__name__}: {error}). The course_lib "
              f"parts of this lesson run; the Grain parts are skipped. Install it with "
              f"`{GRAIN_INSTALL}`, restart the kernel and run the lesson again.")
        return None
    import importlib
    import logging

    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    # On an older jaxlib (Colab's 0.7.2) Grain logs, once, when its profiler module is first
    # imported (at the first worker start), that worker profiling needs a newer jaxlib. The
    # course profiles no worker, so the notice is held back while the module is imported
    # here; every other absl message still shows.
    absl_logger = logging.getLogger("absl")
    absl_logger.addFilter(hold_back_profiling_notice)
    try:
        importlib.import_module("grain._src.core.profiler")
    except ImportError:
        pass  # another Grain layout: the notice, if any, shows where Grain logs it
    finally:
        absl_logger.removeFilter(hold_back_profiling_notice)
    return grain


def hold_back_profiling_notice(record) -> bool:
    """A logging filter: False (drop) for Grain's notice that worker profiling needs a newer
    jaxlib, True for any other record."""
    return "multiprocess worker profiling requires" not in record.getMessage()


def grain_ready(grain: Any) -> bool:
    """True when Grain was imported; otherwise print that the cell skips, and why."""
    if grain is not None:
        return True
    print(f"Skipped: this cell needs Grain, which is not installed here ({GRAIN_INSTALL}).")
    return False


def plot_losses(losses: Mapping[str, Sequence[float]]):
    """The training loss per step of the same loop, one line per library."""
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(8, 3.4))
    for name, values in losses.items():
        ax.plot(range(1, len(values) + 1), values, label=name, linewidth=1.5)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title("One Dataset chain and one loop, on each library: the loss per step",
                 fontsize="medium")
    ax.legend()
    figure.tight_layout()
    return figure


def plot_resume_from_checkpoint(uninterrupted: Sequence[Mapping[str, Any]],
                                resumed: Sequence[Mapping[str, Any]],
                                without_data: Sequence[Mapping[str, Any]], save_at: int):
    """The loss per step of the uninterrupted run (which saved a checkpoint at `save_at`
    and went on), of the new process that restored that checkpoint, and of the control
    (restored without the data position, dashed), on one plot."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, ax = plt.subplots(figsize=(8, 3.8))
    ax.plot([row["step"] for row in uninterrupted], [row["loss"] for row in uninterrupted],
            color="grey", linewidth=4, alpha=0.5,
            label="uninterrupted run (saved a checkpoint, went on)")
    ax.plot([row["step"] for row in resumed], [row["loss"] for row in resumed], marker=".",
            color="tab:orange", label="new process, from the checkpoint")
    ax.plot([row["step"] for row in without_data], [row["loss"] for row in without_data],
            color="tab:blue", linestyle="--", label="control: without the data position")
    ax.axvline(save_at + 0.5, color="black", linestyle=":", label=f"checkpoint (step {save_at})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title("The loss per step: the uninterrupted run, a new process that restored its "
                 "checkpoint, and the control", fontsize="medium")
    # below the axes, so that it covers neither curve nor the checkpoint line
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize="small")
    figure.tight_layout()
    return figure
