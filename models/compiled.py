"""Loops compiled by numba (the ``models/_*_kernel.py`` modules), loaded on first use.

numba compiles a kernel the first time a process calls it and caches the machine code on disk
(``__pycache__`` beside the kernel's module, or numba's user cache directory), so later
processes load it in a fraction of a second. Each kernel has a numpy counterpart that gives the
same results (the tests compare them); where numba cannot be imported, :func:`kernel` returns
None, the callers take their numpy steps, and the log says so once.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

_loaded: dict[tuple[str, str], Callable | None] = {}


def kernel(module: str, name: str) -> Callable | None:
    """The compiled function ``name`` of ``jlse.models.<module>``, or None without numba."""
    key = (module, name)
    if key not in _loaded:
        try:
            _loaded[key] = getattr(importlib.import_module(f"jlse.models.{module}"), name)
        except ImportError as error:  # numba missing, or built for another numpy
            if not any(found is None for found in _loaded.values()):
                logger.warning("numba unavailable (%s): the link search and the link-text "
                               "model take their numpy steps, at about 1.4 times the CPU", error)
            _loaded[key] = None
    return _loaded[key]
