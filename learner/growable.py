"""A numpy array that grows at its end in amortised O(1) per element (the incremental learner)."""

from __future__ import annotations

import numpy as np

GROWTH = 1.5  # each reallocation: amortised O(1) copies per element, spare memory < 1/3


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

    def extend(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=self._data.dtype).reshape(-1)
        end = self._size + len(values)
        if end > len(self._data):
            grown = np.empty(max(end, int(GROWTH * len(self._data))), dtype=self._data.dtype)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : end] = values
        self._size = end
