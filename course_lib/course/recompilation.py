"""Lesson 6, the recompilation trap: the time of every step of an epoch, how often JAX traced
the step, and which programs XLA compiled."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence


def plot_step_times(runs: Sequence[Sequence[float]], rows: Sequence[int]):
    """The time of every step of an epoch (`runs[r][s]`: seconds of step s in run r, each run
    with a new jitted step), one dot per run, on a log axis; `rows[s]` is step s's batch
    size, so the steps whose batch size is new are labelled."""
    import matplotlib.pyplot as plt
    import numpy as np

    times = np.asarray(runs, dtype=np.float64)
    if times.ndim != 2 or times.shape[1] != len(rows):
        raise ValueError(f"runs must be a list of runs with one time per step ({len(rows)} "
                         f"steps, as rows has); got shape {times.shape}.")
    figure, ax = plt.subplots(figsize=(9, 3.6))
    steps = np.arange(times.shape[1])
    for run in times:
        ax.plot(steps, run, "o", color="tab:blue", alpha=0.5, markersize=4)
    ax.plot(steps, np.median(times, axis=0), "_", color="black", markersize=14,
            label="median of the runs")
    ax.set_yscale("log")
    ax.set_xlabel("step of the epoch")
    ax.set_ylabel("seconds (log scale)")
    seen: set[int] = set()
    for step, size in enumerate(rows):
        if size not in seen:
            seen.add(int(size))
            # at either end of the axis, the label runs inwards so it is not cut off
            where = "left" if step == 0 else "right" if step == len(rows) - 1 else "center"
            ax.annotate(f"first batch of {size} rows", (step, float(np.max(times[:, step]))),
                        textcoords="offset points", xytext=(0, 6), ha=where,
                        fontsize="small")
    ax.set_ylim(top=float(np.max(times)) * 4)  # room for the labels
    ax.set_title(f"Every step of one epoch, {len(times)} runs, each with a new jitted step "
                 "(dots: runs)")
    ax.legend(loc="center right")
    figure.tight_layout()
    return figure


def step_traces(messages: Sequence[str], function: str) -> int:
    """How many of the messages `basics.jax_messages` collected are JAX tracing `function`
    itself (its cache-miss explanations name it), leaving out the jitted functions it calls
    (optax's Adam traces one of its own on first use)."""
    pattern = re.compile(rf"(for|never seen function:)\s+{re.escape(function)}\s+(id=\d+\s+)?"
                         "defined at")
    return sum(message.startswith("TRACING CACHE MISS") and bool(pattern.search(message))
               for message in messages)


# JAX 0.10.2 records this jax.monitoring event each time it hands a program to XLA to
# compile (`pxla._cached_compilation`; the name is `dispatch.BACKEND_COMPILE_EVENT`), for
# every function, a jitted one or an operation run eagerly.
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def compilations() -> Iterator[list[str]]:
    """The programs XLA compiled inside the block, of any function ("jit(update)",
    "jit(add)" for an eager `+`), in order: the list yielded fills as the block runs.

    It listens to JAX's own compilation event (`BACKEND_COMPILE_EVENT`) through the public
    `jax.monitoring` listeners, so unlike the step's cache-miss messages it also counts the
    compilations no tracing message names. Where a persistent compilation cache is set
    (`jax_compilation_cache_dir`, unset by default), a program read from it goes through
    the same event and is listed too: the process needed a program it did not hold, so a
    count of zero still means that nothing was compiled, nor read."""
    import jax

    compiled: list[str] = []

    def listen(event: str, duration_secs: float, **metadata: str | int) -> None:
        if event == BACKEND_COMPILE_EVENT:
            compiled.append(str(metadata.get("fun_name", "?")))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield compiled
    finally:
        _unregister_duration_listener(listen)


def _unregister_duration_listener(listen) -> None:
    """Removes a duration listener: `jax.monitoring.unregister_event_duration_listener`
    where JAX has it (0.10.2 does), else the private function JAX 0.7.2 (Colab's) keeps
    for the same job, `jax._src.monitoring._unregister_event_duration_listener_by_callback`."""
    import jax

    unregister = getattr(jax.monitoring, "unregister_event_duration_listener", None)
    if unregister is None:
        from jax._src import monitoring

        unregister = monitoring._unregister_event_duration_listener_by_callback
    unregister(listen)
