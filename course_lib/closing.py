"""How what a loader starts (threads, processes, shared memory) is always stopped.

A loader's iterator may own a background thread, read threads, worker processes and
shared-memory segments. `close()` releases them; three other exits must call it too:

- the end of a `with` block, and the iterator being garbage collected (a loop abandoned by
  `break` or an exception, a notebook cell that rebinds the name): `ClosesOnExit`, which both
  faces' iterators inherit, and the executors under them (`read_ahead.ReadAhead`,
  `workers.WorkerElements`);
- the interpreter's exit, for whatever is still open then: `close_at_exit`, the one exit
  registry. Each thing that starts a thread or a process (`read_ahead.ReadAhead`,
  `record_stage.ChunkProcessor`, `workers.WorkerPool`) registers itself when it starts and
  leaves when it closes. The registry's hook runs before Python joins threads, and before
  `concurrent.futures` joins its pools' threads (which would first run every queued task:
  seconds of slow transforms), so nothing makes the exit wait.
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401  its exit hook first, so that ours runs before it
import logging
import threading
import weakref

logger = logging.getLogger("course_lib")

# What is open, and the name of the method that stops it; held weakly, since collecting an
# abandoned one closes it too.
_open: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class ClosesOnExit:
    """`with iterator:` and garbage collection call `self.close()`, which must be safe to
    call more than once."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # at interpreter exit, modules the close needs may be gone
            return


def close_at_exit(resource, method: str = "close") -> None:
    """Call `resource.<method>()` at interpreter exit if it is still open then."""
    _open[resource] = method


def closed(resource) -> None:
    """`resource` was closed: nothing to do for it at exit."""
    _open.pop(resource, None)


def _close_everything_open() -> None:
    for resource, method in list(_open.items()):
        try:
            getattr(resource, method)()
        except Exception as error:  # one failure must not keep the others running
            logger.warning("closing %r at interpreter exit failed: %s", resource, error)


# `threading._register_atexit` hooks run last registered first, before threads are joined;
# `concurrent.futures.thread`, imported above, registered its own already. Where that
# function is missing, a plain atexit hook comes too late to spare the wait, but still stops
# what runs.
getattr(threading, "_register_atexit", atexit.register)(_close_everything_open)
