"""Keep freed memory for reuse while a loader runs: glibc's malloc thresholds.

Why this exists. A transform that does real NumPy work allocates a few arrays of a few
hundred KiB for every record (an image upsampled to 224x224 in float32 is 196 KiB) and
frees them a moment later. glibc's malloc, the allocator of Python on Linux, serves a block
above its *mmap threshold* (128 KiB when a process starts) with a fresh mapping from the
kernel and unmaps it on `free`; and it hands the free top of its heap back to the kernel
once more than the *trim threshold* is free there. Either way the next record asks the
kernel again, and every page it touches is faulted in and zeroed anew. glibc raises both
thresholds by itself when a large mapped block is freed, but only to that block's size, so
whether a process pays depends on what it did before: importing JAX, torch or Grain
usually frees large blocks and pushes the thresholds up, a script that imported only NumPy
and course_lib does not. The same transform then costs about 1.4 to 2 times as much per
record, in the main process only (worker processes start with the thresholds raised,
through glibc's `MALLOC_*_` variables; see `workers.py`).

What course_lib does. When the first loader iterator of the process starts, it raises the
mmap threshold to 32 MiB and the trim threshold to 256 MiB with `mallopt`, the values the
workers start with: blocks below 32 MiB come from the heap, and up to 256 MiB of free heap
is kept for the next record. glibc cannot report the values it had before, so they stay
raised for the life of the process; whenever the last running iterator closes,
`malloc_trim(0)` hands the memory kept for reuse back to the kernel, so a notebook that has
finished with its loader does not keep it.

Opting out. Set `COURSE_LIB_MALLOC_TUNING=0` in the environment before the first loader
starts, or set glibc's own `MALLOC_MMAP_THRESHOLD_` or `MALLOC_TRIM_THRESHOLD_` (your values
win: course_lib then leaves malloc alone). Where the C library is not glibc (macOS, musl,
Windows) nothing happens.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading

MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 256 << 20
OPT_OUT_VARIABLE = "COURSE_LIB_MALLOC_TUNING"
GLIBC_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

# mallopt's parameter numbers, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# Re-entrant: an abandoned iterator's __del__ may run (and stop) inside a locked section.
_lock = threading.RLock()
_running_iterators = 0
_thresholds_raised = False


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library, if it is glibc (the one with `mallopt` and `malloc_trim`), else None."""
    try:
        # The symbols already loaded into this process, libc's among them: no search for
        # the library file (ctypes.util.find_library would run ldconfig in a subprocess).
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


def tuning_allowed() -> bool:
    """False when the user opted out or chose glibc's thresholds through its variables."""
    if os.environ.get(OPT_OUT_VARIABLE, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return not any(name in os.environ for name in GLIBC_VARIABLES)


def thresholds_raised() -> bool:
    """Whether this process raised glibc's thresholds (they stay raised once they are)."""
    return _thresholds_raised


def loader_started() -> None:
    """An iterator starts reading in this process: raise the thresholds (the first time)."""
    global _running_iterators, _thresholds_raised
    with _lock:
        _running_iterators += 1
        if _thresholds_raised or not tuning_allowed():
            return
        libc = _glibc()
        if libc is None:
            return
        # mallopt returns 1 on success; it fixes the thresholds, so glibc stops moving them.
        mmap_set = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
        trim_set = libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
        _thresholds_raised = mmap_set and trim_set


def loader_stopped() -> None:
    """An iterator stopped: when none is left running, hand the kept memory back."""
    global _running_iterators
    with _lock:
        _running_iterators = max(0, _running_iterators - 1)
        if _running_iterators == 0 and _thresholds_raised:
            _glibc().malloc_trim(0)
