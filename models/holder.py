"""A learned model that a learner thread replaces while crawl threads read it."""

from __future__ import annotations

import threading
from typing import Any


class ModelHolder:
    """The current model (a Q-table, a CFC layer model); ``set`` swaps the reference, so readers
    never see a half-built model. A model has a ``version`` (``version`` here is 0 without one)."""

    def __init__(self, model: Any = None) -> None:
        self._model = model
        self._lock = threading.Lock()

    def get(self) -> Any:
        return self._model  # reading one attribute is atomic

    def set(self, model: Any) -> None:
        with self._lock:
            self._model = model

    @property
    def version(self) -> int:
        """Version of the current model, 0 when there is none."""
        model = self._model
        return model.version if model is not None else 0
