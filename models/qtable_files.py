"""A Q-table or link-index archive unpacked into a directory of ``.npy`` files, which the
processes of a worker machine memory-map: one copy of the arrays per machine (the page cache's),
not one per process.

A member of an ``.npz`` cannot be mapped where it lies (``np.load(mmap_mode=...)`` maps ``.npy``
files only, and a member's data sits at an unaligned offset of the zip). Each member *is* an
``.npy`` file, though, whose header numpy pads so that its data starts 64-byte aligned: the
archive is unpacked by copying each member's bytes into its own file (``learner/qtable_cache.py``
does it once per machine and version), and every process maps those files read-only.

The search structures of an index are derived from its arrays, so each process would build
them privately: the search postings (:meth:`LinkIndex.capped_postings`: the capped term-major
postings, a third of the index's size) and the vocabularies (each field's terms looked up by
hash, :class:`models.term_table.TermTable`, where each process made a dictionary of strings).
The unpacking builds them once and saves them beside the members (``search.*``). An archive
from Redis never supplies them: its own ``search.*`` members are refused here and ignored by
:func:`models.qtable.read_archive`.

Security as for archives read from Redis: ``allow_pickle=False``, member names checked, every
array checked against the header by :class:`models.qtable.QTable` before use.
"""

from __future__ import annotations

import re
import shutil
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from jlse.models import qtable as qt

SEARCH_PREFIX = qt.SEARCH_PREFIX
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # a member's file name, less ".npy"
_COPY_BYTES = 1 << 22


def unpack_archive(archive: Path, directory: Path) -> None:
    """Write each array of ``archive`` (an ``.npz`` file) as ``directory/<name>.npy`` (the
    directory exists, empty), then the index's search structures (postings and term tables);
    ValueError if it is not a valid Q-table or index archive."""
    try:
        with zipfile.ZipFile(archive) as members:
            for info in members.infolist():
                _copy_member(members, info, directory)
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error, RuntimeError) as exc:
        raise ValueError(f"Q-table: not an .npz archive: {exc!r}") from None
    for name, array in qt.search_arrays(*map_directory(directory)).items():
        np.save(directory / f"{name}.npy", array, allow_pickle=False)


def _copy_member(members: zipfile.ZipFile, info: zipfile.ZipInfo, directory: Path) -> None:
    name = info.filename.removesuffix(".npy")
    if (name == info.filename or not _NAME.fullmatch(name) or name.startswith(SEARCH_PREFIX)):
        raise ValueError(f"Q-table: unexpected archive member {info.filename!r}")
    try:
        with members.open(info) as source, open(directory / info.filename, "xb") as out:
            shutil.copyfileobj(source, out, _COPY_BYTES)  # CRC checked as it reads
    except FileExistsError:
        raise ValueError(f"Q-table: archive member {info.filename!r} twice") from None


def map_directory(directory: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays and header of an unpacked archive (:func:`unpack_archive`), each array a
    read-only view of its file's shared mapping; ValueError if a file is damaged."""
    arrays = {path.name.removesuffix(".npy"): _map(path)
              for path in sorted(directory.glob("*.npy"))}
    return qt.split_header(arrays)


def _map(path: Path) -> np.ndarray:
    try:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:  # among them a file cut short
        raise ValueError(f"Q-table: unreadable array file {path.name}: {exc}") from None
    if not isinstance(mapped, np.memmap):
        raise ValueError(f"Q-table: {path.name} is not one array")
    return mapped.view(np.ndarray)  # a plain array whose base is the read-only mapping
