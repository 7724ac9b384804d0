"""A published Q-table: the fitted link index of G_w's vertices and Q(v) of each vertex.

It is everything a link evaluator needs and nothing else, and it travels as one ``.npz``
(a file, or bytes in Redis) holding plain numeric arrays plus a UTF-8 JSON header (stored as a
``uint8`` array). Each field's terms are one ``uint8`` array, their UTF-8 bytes each followed by
a NUL (format 2; format 1, still read, listed them in the header, as a term holding a NUL
still is). Nothing is pickled: loading uses ``allow_pickle=False``, so an object array
in the archive is refused, and every array is checked against the header before use.
"""

from __future__ import annotations

import io
import json
import logging
import os
import tempfile
import time
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import scipy
import scipy.sparse as sp
from numpy.lib.npyio import NpzFile

from jlse.models import term_table
from jlse.models.bm25 import WEIGHT_DTYPE, FieldBM25, PackedTerms, split_terms
from jlse.models.link_index import DEFAULT_MAX_POSTINGS, DEFAULT_RESCORE, FIELDS, LinkIndex
from jlse.models.qlearning import q_learning
from jlse.models.term_table import TermTable

logger = logging.getLogger(__name__)

FORMAT = "jlse-qtable"
INDEX_FORMAT = "jlse-linkindex"  # a link index alone, shared by several Q-table versions
FORMAT_VERSION = 2  # 2: a field's terms as one byte array (1: a JSON list); both are read
READ_VERSIONS = (1, 2)
HEADER_KEY = "header"
SEARCH_PREFIX = "search."  # an index's search structures, saved by a machine's cache alone
TABLE_KEY = SEARCH_PREFIX + "key"  # the hash key of the fields' term tables


@dataclass
class QTable:
    """Q(v) per vertex of G_w, aligned with a fitted :class:`LinkIndex` of the vertices."""

    version: int
    index: LinkIndex
    q: np.ndarray
    created_at: float
    meta: dict[str, Any] = field(default_factory=dict)

    def predicted(self, anchors: Sequence[str], urls: Sequence[str],
                  contexts: Sequence[str]) -> np.ndarray:
        """sim_predicted = s_v* . Q(v*) of each link; 0 where no vertex matches."""
        best, score = self.index.best_vertices(anchors, urls, contexts)
        matched = best >= 0
        predicted = np.zeros(len(best), dtype=np.float64)
        predicted[matched] = score[matched] * self.q[best[matched]]
        return predicted

    def to_arrays(self, index_ref: str | None = None) -> tuple[dict[str, np.ndarray],
                                                                dict[str, Any]]:
        """Raw arrays and a JSON-able header holding the rest (vocabularies, parameters).

        With ``index_ref`` the link index is left out and the header names it instead (``index``):
        a version that shares the index of an earlier one travels as Q alone (``learner/publish
        .py``; the index is an archive of :func:`write_index`)."""
        arrays: dict[str, np.ndarray] = {"q": np.asarray(self.q, dtype=np.float64)}
        header = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "version": int(self.version),
            "created_at": float(self.created_at),
            "meta": self.meta,
            "n_vertices": int(self.index.n_vertices_),
        }
        if index_ref is None:
            index_arrays, parameters = _index_arrays(self.index)
            arrays.update(index_arrays)
            header.update(parameters)
        else:
            header["index"] = str(index_ref)
        return arrays, header

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], header: dict[str, Any],
                    index: LinkIndex | None = None) -> QTable:
        """The Q-table :meth:`to_arrays` described; ValueError if anything is missing or wrong.
        A header that names its index (``index``) needs that index, as :func:`read_index` gave
        it."""
        _check_format(header)
        try:
            return cls._build(arrays, header, index)
        except (KeyError, TypeError, ValueError) as exc:
            reason = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"Q-table: invalid arrays or header: {reason}") from None

    @classmethod
    def _build(cls, arrays: dict[str, np.ndarray], header: dict[str, Any],
               index: LinkIndex | None) -> QTable:
        n_vertices = int(header["n_vertices"])
        if n_vertices < 0:
            raise ValueError(f"n_vertices is {n_vertices}")
        if "index" in header:
            if index is None:
                raise ValueError(f"it shares index {header['index']!r}, which was not given")
            if index.n_vertices_ != n_vertices:
                raise ValueError(f"its index has {index.n_vertices_} vertices, not {n_vertices}")
        else:
            index = _index_from_arrays(arrays, header, n_vertices)
        q = _array(arrays, "q", np.float64)
        if q.shape != (n_vertices,) or not np.all(np.isfinite(q)):
            raise ValueError(f"q has shape {q.shape} for {n_vertices} vertices or holds "
                             "non-finite values")
        return cls(version=int(header["version"]), index=index, q=q,
                   created_at=float(header["created_at"]), meta=dict(header["meta"]))

    def save(self, path: Path) -> None:
        """Write one ``.npz`` atomically (a temporary file in the same folder, then rename)."""
        path = Path(path)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as out:
                self._write(out)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: Path) -> QTable:
        """Read a file written by :meth:`save`; ValueError if it is not a valid Q-table
        (OSError if it cannot be read at all)."""
        with open(path, "rb") as source:
            return cls._read(source)

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        self._write(buffer)
        return buffer.getvalue()

    def write_to(self, out: IO[bytes], index_ref: str | None = None) -> None:
        """Write the archive of :meth:`to_bytes` into a seekable binary file (without the
        index, which it names, given ``index_ref``: :meth:`to_arrays`)."""
        arrays, header = self.to_arrays(index_ref)
        _write_archive(out, arrays, header)

    @classmethod
    def read_from(cls, source: IO[bytes]) -> QTable:
        """:meth:`from_bytes` of a seekable binary file (read member by member, never whole)."""
        return cls._read(source)

    @classmethod
    def from_bytes(cls, data: bytes) -> QTable:
        return cls._read(io.BytesIO(data))

    def _write(self, out: IO[bytes]) -> None:
        arrays, header = self.to_arrays()
        _write_archive(out, arrays, header)

    @classmethod
    def _read(cls, source: IO[bytes]) -> QTable:
        return cls.from_arrays(*read_archive(source))


def _write_archive(out: IO[bytes], arrays: dict[str, np.ndarray], header: dict[str, Any]) -> None:
    text = json.dumps(header, ensure_ascii=False, default=_json_scalar)
    encoded = np.frombuffer(text.encode("utf-8"), np.uint8)
    np.savez(out, **{HEADER_KEY: encoded}, **arrays)


def read_archive(source: IO[bytes]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays and JSON header of a Q-table or index archive (nothing unpickled);
    ValueError if it is not one."""
    try:
        loaded = np.load(source, allow_pickle=False)
        if not isinstance(loaded, NpzFile):
            raise ValueError("a single array, not an .npz archive")
        with loaded as archive:
            arrays = {key: archive[key] for key in archive.files}
    except ValueError as exc:  # among them numpy's refusal of object (pickled) arrays
        raise ValueError(f"Q-table: unreadable archive: {exc}") from None
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise ValueError(f"Q-table: not an .npz archive: {exc!r}") from None
    for key in [key for key in arrays if key.startswith(SEARCH_PREFIX)]:
        del arrays[key]  # derived arrays are trusted from this machine's cache only
    return split_header(arrays)


def split_header(arrays: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays of an archive without its header, and the header parsed; ValueError if
    missing or malformed."""
    encoded = arrays.pop(HEADER_KEY, None)
    if encoded is None or encoded.dtype != np.uint8 or encoded.ndim != 1:
        raise ValueError("Q-table: missing or malformed header")
    try:
        header = json.loads(encoded.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"Q-table: header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ValueError("Q-table: header is not a JSON object")
    return arrays, header


def write_index(index: LinkIndex, out: IO[bytes]) -> None:
    """The archive of a link index alone (shared by the Q-table versions that name it)."""
    arrays, parameters = _index_arrays(index)
    header = {"format": INDEX_FORMAT, "format_version": FORMAT_VERSION,
              "n_vertices": int(index.n_vertices_), **parameters}
    _write_archive(out, arrays, header)


def read_index(source: IO[bytes]) -> LinkIndex:
    """The link index of a :func:`write_index` archive; ValueError if it is not one."""
    return index_from_archive(*read_archive(source))


def index_from_archive(arrays: dict[str, np.ndarray], header: dict[str, Any]) -> LinkIndex:
    """:func:`read_index` of an archive's arrays and header."""
    _check_format(header, INDEX_FORMAT)
    try:
        return _index_from_arrays(arrays, header, int(header["n_vertices"]))
    except (KeyError, TypeError, ValueError) as exc:
        reason = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"link index: invalid arrays or header: {reason}") from None


def _index_arrays(index: LinkIndex) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    arrays: dict[str, np.ndarray] = {}
    fields: dict[str, Any] = {}
    for name, bm25 in zip(FIELDS, index.fields_, strict=True):
        weights = bm25.doc_weights_
        arrays[f"{name}.idf"] = bm25.idf_
        arrays[f"{name}.data"] = weights.data
        arrays[f"{name}.indices"] = weights.indices
        arrays[f"{name}.indptr"] = weights.indptr
        packed = bm25.packed_terms_
        if packed.plain:  # the terms as one byte array (no Python string per term)
            arrays[f"{name}.terms"] = packed.chars
            fields[name] = {"n_terms": packed.n_terms, "avgdl": bm25.avgdl_}
        else:  # a term holds a NUL: a JSON list
            fields[name] = {"vocabulary": bm25.terms_, "avgdl": bm25.avgdl_}
    parameters = {
        "k1": float(index.k1),
        "b": float(index.b),
        "weights": [float(w) for w in index.weights],
        "max_postings": [None if cap is None else int(cap) for cap in index.caps],
        "rescore": int(index.rescore),
        "fields": fields,
    }
    return arrays, parameters


def _index_from_arrays(arrays: dict[str, np.ndarray], header: dict[str, Any],
                       n_vertices: int, search: bool = True) -> LinkIndex:
    if n_vertices < 0:
        raise ValueError(f"n_vertices is {n_vertices}")
    fields, tables = zip(*[_field_from_arrays(name, arrays, header, n_vertices)
                           for name in FIELDS], strict=True)
    postings = _given_postings(arrays, fields, n_vertices) if search else None
    # Archives written before the capped search existed lack its parameters: defaults.
    return LinkIndex.from_fields(fields, header["weights"],
                                 max_postings=header.get("max_postings", DEFAULT_MAX_POSTINGS),
                                 rescore=header.get("rescore", DEFAULT_RESCORE), search=search,
                                 postings=postings,
                                 term_tables=None if None in tables else tables)


def search_arrays(arrays: dict[str, np.ndarray], header: dict[str, Any]) -> dict[str, np.ndarray]:
    """The search structures of the index an archive holds, by name (under
    :data:`SEARCH_PREFIX`), for a machine's copy to save beside it: the search postings
    (:meth:`LinkIndex.capped_postings`) and, where every field's terms are a byte array, each
    field's :class:`TermTable` under one new key. None for a version naming a shared index.
    ValueError if the archive is invalid."""
    _check_format(header, FORMAT if header.get("format") == FORMAT else INDEX_FORMAT)
    if "index" in header:
        return {}
    try:  # the index checks every array, the terms among them
        postings = _index_from_arrays(arrays, header, int(header["n_vertices"]),
                                      search=False).capped_postings()
    except (KeyError, TypeError, ValueError) as exc:
        reason = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"link index: invalid arrays or header: {reason}") from None
    derived = {f"{SEARCH_PREFIX}{name}": array for name, array in
               zip(("data", "indices", "indptr"),
                   (postings.data, postings.indices, postings.indptr), strict=True)}
    if not any("vocabulary" in header["fields"][name] for name in FIELDS):
        key = derived[TABLE_KEY] = term_table.new_key()
        for name in FIELDS:
            table = TermTable.build(arrays[f"{name}.terms"], key)
            derived.update({f"{SEARCH_PREFIX}{name}.{part}": array
                            for part, array in table.arrays().items()})
    return derived


def _given_postings(arrays: dict[str, np.ndarray], fields: list[FieldBM25],
                    n_vertices: int) -> sp.csr_matrix | None:
    """The search postings saved beside a mapped index (``models.qtable_files``), checked;
    None where there are none."""
    if f"{SEARCH_PREFIX}indptr" not in arrays:
        return None
    data = arrays.get(f"{SEARCH_PREFIX}data")
    if data is None or data.dtype != WEIGHT_DTYPE:
        raise ValueError("search postings: missing or malformed data")
    indices = _index_array(arrays, f"{SEARCH_PREFIX}indices")
    indptr = _index_array(arrays, f"{SEARCH_PREFIX}indptr")
    n_terms = sum(field.n_terms_ for field in fields)
    _check_csr("search", data, indices, indptr, n_terms, n_vertices)
    return sp.csr_matrix((data, indices, indptr), shape=(n_terms, n_vertices))


def build_qtable(version: int, anchors: Sequence[str], urls: Sequence[str],
                 contexts: Sequence[str], src: np.ndarray, dst: np.ndarray, is_leaf: np.ndarray,
                 *, k1: float = 2.0, b: float = 0.75,
                 weights: Sequence[float] = (0.5, 0.2, 0.3), gamma: float = 0.9,
                 reward: float = 1.0,
                 max_postings: int | Sequence[int | None] | None = DEFAULT_MAX_POSTINGS,
                 rescore: int = DEFAULT_RESCORE) -> QTable:
    """Fit the link index over G_w's vertex triples and learn Q(v) over its edges.

    ``max_postings`` and ``rescore`` are the link search's parameters (see
    :class:`models.link_index.LinkIndex`); they travel with the table."""
    index = LinkIndex(k1=k1, b=b, weights=tuple(weights), max_postings=max_postings,
                      rescore=rescore).fit(anchors, urls, contexts)
    q, iterations = q_learning(index.n_vertices_, src, dst, is_leaf, gamma=gamma, reward=reward)
    meta = {
        "n_vertices": index.n_vertices_,
        "n_edges": int(np.size(src)),
        "n_results": int(np.count_nonzero(is_leaf)),
        "iterations": iterations,
        "gamma": gamma,
        "reward": reward,
        "numpy": np.__version__,
        "scipy": scipy.__version__,
    }
    return QTable(version=version, index=index, q=q, created_at=time.time(), meta=meta)


def _json_scalar(value: Any) -> Any:
    """numpy scalars in ``meta`` (counts, parameters) as plain Python numbers."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"Q-table meta: {type(value).__name__} is not JSON serialisable")


def _check_format(header: dict[str, Any], expected: str = FORMAT) -> None:
    if header.get("format") != expected:
        raise ValueError(f"Q-table: not a {expected} archive (format {header.get('format')!r})")
    if header.get("format_version") not in READ_VERSIONS:
        raise ValueError(f"Q-table: format version {header.get('format_version')!r} is not "
                         f"supported (this code reads version {FORMAT_VERSION})")


def _field_from_arrays(name: str, arrays: dict[str, np.ndarray], header: dict[str, Any],
                       n_vertices: int) -> tuple[FieldBM25, TermTable | None]:
    """Field ``name``'s BM25 index, and its term table where a machine's copy saved one (then
    the field holds its terms packed, and no dictionary of them)."""
    state = header["fields"][name]
    table = _term_table(name, arrays, state)
    if table is not None:
        vocabulary: dict[str, int] | PackedTerms = PackedTerms(table.chars, table.ends)
        n_terms = table.n_terms
    else:
        vocabulary = _vocabulary(name, arrays, state)
        n_terms = len(vocabulary)
    data = _array(arrays, f"{name}.data", WEIGHT_DTYPE)
    indices = _index_array(arrays, f"{name}.indices")
    indptr = _index_array(arrays, f"{name}.indptr")
    _check_csr(name, data, indices, indptr, n_vertices, n_terms)
    doc_weights = sp.csr_matrix((data, indices, indptr), shape=(n_vertices, n_terms))
    field = FieldBM25.from_learned(vocabulary, _array(arrays, f"{name}.idf", np.float64),
                                   doc_weights, float(state["avgdl"]),
                                   k1=float(header["k1"]), b=float(header["b"]))
    return field, table


def _vocabulary(name: str, arrays: dict[str, np.ndarray], state: dict[str, Any]) -> dict[str, int]:
    if "vocabulary" in state:
        terms = state["vocabulary"]
    else:
        try:
            terms = split_terms(_terms(name, arrays), int(state["n_terms"]))
        except ValueError as exc:  # among them UnicodeDecodeError
            raise ValueError(f"field {name}: terms: {exc}") from None
    vocabulary = dict(zip(terms, range(len(terms)), strict=True))
    if len(vocabulary) != len(terms):
        raise ValueError(f"field {name}: duplicate vocabulary terms")
    return vocabulary


def _terms(name: str, arrays: dict[str, np.ndarray]) -> np.ndarray:
    chars = arrays.get(f"{name}.terms")
    if chars is None or chars.dtype != np.uint8 or chars.ndim != 1:
        raise ValueError(f"field {name}: missing or malformed terms")
    return chars


def _term_table(name: str, arrays: dict[str, np.ndarray],
                state: dict[str, Any]) -> TermTable | None:
    """The term table saved beside a mapped index (``models.qtable_files``), checked; None
    where there is none."""
    prefix = f"{SEARCH_PREFIX}{name}."
    if f"{prefix}hashes" not in arrays or "vocabulary" in state:
        return None
    parts = [arrays.get(key) for key in (TABLE_KEY, f"{prefix}hashes", f"{prefix}ids")]
    ends = arrays.get(f"{prefix}ends")
    if any(part is None for part in parts) or ends is None:
        raise ValueError(f"field {name}: incomplete term table")
    try:
        table = TermTable.from_arrays(*parts, _terms(name, arrays), ends)
    except ValueError as exc:
        raise ValueError(f"field {name}: {exc}") from None
    if table.n_terms != int(state["n_terms"]):
        raise ValueError(f"field {name}: a term table of {table.n_terms} terms, not "
                         f"{state['n_terms']}")
    return table


def _array(arrays: dict[str, np.ndarray], key: str, dtype: type) -> np.ndarray:
    """``arrays[key]`` as a 1-d array of ``dtype``; ValueError if absent or not numeric."""
    if key not in arrays:
        raise ValueError(f"array {key!r} is missing")
    array = arrays[key]
    if array.ndim != 1 or array.dtype.kind not in "biuf":
        raise ValueError(f"array {key!r} is not a 1-d numeric array")
    return array.astype(dtype, copy=False)


def _index_array(arrays: dict[str, np.ndarray], key: str) -> np.ndarray:
    """``arrays[key]`` as a 1-d array of int32 or int64 as stored: converting a mapped array
    would make a private copy of it (scipy keeps int32 indices as they are)."""
    array = arrays.get(key)
    if array is not None and array.ndim == 1 and array.dtype in (np.int32, np.int64):
        return array
    return _array(arrays, key, np.int64)


def _check_csr(name: str, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
               n_rows: int, n_columns: int) -> None:
    """Full structural check, so that a damaged archive fails here and not in a product later."""
    valid = (
        indptr.shape == (n_rows + 1,)
        and data.shape == indices.shape
        and indptr[0] == 0
        and indptr[-1] == data.size
        and bool(np.all(np.diff(indptr) >= 0))
        and (indices.size == 0 or (indices.min() >= 0 and indices.max() < n_columns))
        and bool(np.all(np.isfinite(data)))
    )
    if not valid:
        raise ValueError(f"field {name}: inconsistent sparse weight arrays")
