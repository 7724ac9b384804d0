"""A numpy array that grows at its end in amortised O(1) per element (the incremental learner)."""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np

GROWTH = 1.25  # each reallocation: amortised O(1) copies (4 per element), spare memory < 1/5


class Growable:
    """A 1-d array of ``dtype`` with spare capacity: ``extend`` copies only when it is full,
    and then makes it ``GROWTH`` times larger. ``view()`` is the filled part; a view taken
    earlier stays valid and unchanged by later ``extend`` calls (they write past its end, or
    into a new buffer)."""

    def __init__(self, dtype: type, capacity: int = 1024) -> None:
        self._data = np.empty(max(1, capacity), dtype=dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)

    def view(self) -> np.ndarray:
        return self._data[: self._size]

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    def widen(self, dtype: type) -> None:
        """Hold ``dtype`` from now on (values copied; views taken earlier keep the old ones)."""
        self._data = self._data.astype(dtype)

    def extend(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=self._data.dtype).reshape(-1)
        end = self._size + len(values)
        if end > len(self._data):
            grown = np.empty(max(end, int(GROWTH * len(self._data))), dtype=self._data.dtype)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : end] = values
        self._size = end


def release_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere
    nothing). glibc raises its mmap threshold after a large array is freed, so later large
    arrays come from the heap, and a round's freed temporaries (several per vertex added) then
    stay in the process: 400 MB after loading 1e6 vertices, without this."""
    if _libc is not None:
        _libc.malloc_trim(0)


def _load_libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


_libc = _load_libc()
