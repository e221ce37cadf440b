"""Iterators that hold threads, processes or shared memory close them three ways.

A loader's iterator may own a background thread, worker processes and shared-memory
segments. `close()` releases them; this mixin makes the two other exits call it too: the end
of a `with` block, and the iterator being garbage collected (a loop abandoned by `break` or
an exception, a notebook cell that rebinds the name). Both faces of the library, the
`DataLoader`'s iterator and the Dataset API's, inherit it, so neither leaves anything
behind.
"""

from __future__ import annotations


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
