"""Sharing in-memory arrays with worker processes, once.

Pickling a 50 MB array to each of eight workers copies it eight times and delays the first
batch. Instead the arrays are copied once into a shared memory segment; what the workers
receive is a small handle that they turn back into an `ArrayDataSource` over mapped views.
The main process owns the segment and unlinks it when the iterator closes.
"""

from __future__ import annotations

from multiprocessing import shared_memory

import numpy as np

from course_lib.sources import ArrayDataSource


class SharedArrays:
    """NumPy arrays copied once into one shared memory segment; pickles as a reference."""

    def __init__(self, arrays: dict[str, np.ndarray], segment=None, layout=None):
        if segment is None:
            layout, offset = {}, 0
            for name, array in arrays.items():
                layout[name] = (offset, array.shape, array.dtype.str)
                offset += -(-array.nbytes // 64) * 64
            segment = shared_memory.SharedMemory(create=True, size=max(offset, 1))
            for name, array in arrays.items():
                self._view(segment, layout[name])[...] = array
        self.segment, self.layout = segment, layout

    @staticmethod
    def _view(segment, entry) -> np.ndarray:
        offset, shape, dtype = entry
        return np.ndarray(shape, dtype=np.dtype(dtype), buffer=segment.buf, offset=offset)

    def arrays(self) -> dict[str, np.ndarray]:
        views = {name: self._view(self.segment, entry) for name, entry in self.layout.items()}
        for view in views.values():
            view.flags.writeable = False
        return views

    def __reduce__(self):
        return _attach_shared_arrays, (self.segment.name, self.layout)

    def unlink(self) -> None:
        self.segment.close()
        self.segment.unlink()


def _attach_shared_arrays(name: str, layout) -> SharedArrays:
    return SharedArrays({}, shared_memory.SharedMemory(name=name), layout)


class SharedArraySourceHandle:
    """Stands in for an `ArrayDataSource` in the payload: it pickles as a reference to the
    shared segment, and unpickles in a worker as an `ArrayDataSource` over mapped views."""

    def __init__(self, shared: SharedArrays, single: bool):
        self.shared, self.single = shared, single

    def __reduce__(self):
        return _open_shared_source, (self.shared, self.single)


def _open_shared_source(shared: SharedArrays, single: bool) -> ArrayDataSource:
    arrays = shared.arrays()
    source = ArrayDataSource(arrays["_"] if single else arrays)
    # NumPy views do not keep the mapping open: if `shared` were collected, its segment
    # would be unmapped under the arrays. The source keeps it alive.
    source._keep_mapped = shared
    return source


def share_source(data_source, owned: list):
    """Replace an in-memory source by a shared-memory handle, so workers map, never copy."""
    if type(data_source) is not ArrayDataSource:
        return data_source
    arrays = data_source._arrays
    single = not isinstance(arrays, dict)
    shared = SharedArrays({"_": arrays} if single else arrays)
    owned.append(shared)
    return SharedArraySourceHandle(shared, single)


# -- the payload every worker receives ------------------------------------------------------
