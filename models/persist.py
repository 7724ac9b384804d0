"""Model files of a trained :class:`TopicModel`, without pickle.

``directory/model.json`` holds the format version, a model version counter (incremented on each
save into the directory), the creation time, the versions of jlse, numpy, scipy, scikit-learn and
jieba, the page classifier, the cross-validation report, the sha256 of the arrays file and every
component's parameters (vocabularies as JSON lists). ``directory/model.npz`` holds every learned
array (``np.savez``), read back with ``allow_pickle=False``: an object array cannot be saved or
loaded. Loading refuses files of another format version or saved under another major.minor of
numpy or scikit-learn (:class:`ModelVersionError`); missing, corrupt or mismatched files are a
:class:`ModelFileError`. Both are ValueErrors with a message that names the file.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import tempfile
import zipfile
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from jlse.models.topic_model import TopicModel

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
HEADER_FILE = "model.json"
ARRAYS_FILE = "model.npz"
LIBRARIES = ("jlse", "numpy", "scipy", "scikit-learn", "jieba")
CHECKED_LIBRARIES = ("numpy", "scikit-learn")  # major.minor must match to load


class ModelFileError(ValueError):
    """Model files missing, unreadable, corrupt or not matching each other."""


class ModelVersionError(ValueError):
    """Model files written by another format version or under incompatible library versions."""

    def __init__(self, library: str, saved: str, installed: str, path: Path) -> None:
        super().__init__(
            f"{path}: saved with {library} {saved}, installed is {installed}; "
            f"the model files cannot be used - retrain the topic (jlse train)"
        )
        self.library, self.saved, self.installed = library, saved, installed


def library_versions() -> dict[str, str]:
    """Installed version of each of :data:`LIBRARIES` ("unknown" when not installed)."""
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "unknown"
    return versions


def save_topic_model(model: TopicModel, directory: Path, *, cv_report: dict | None = None) -> Path:
    """Write ``model.npz`` then ``model.json`` into ``directory``; returns the model.json path."""
    directory = Path(directory)
    arrays, state = model.get_state()
    for name, array in arrays.items():
        if not isinstance(array, np.ndarray) or array.dtype.hasobject:
            raise TypeError(f"save_topic_model: array {name!r} is not a plain numeric/text array")
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    arrays_bytes = buffer.getvalue()
    directory.mkdir(parents=True, exist_ok=True)
    header = {
        "format_version": FORMAT_VERSION,
        "model_version": _saved_model_version(directory) + 1,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "libraries": library_versions(),
        "page_classifier": model.page_classifier,
        "cv_report": cv_report,
        "arrays_sha256": hashlib.sha256(arrays_bytes).hexdigest(),
        "topic_model": state,
    }
    try:
        text = json.dumps(header, ensure_ascii=False, indent=1, allow_nan=False)
    except ValueError as exc:  # NaN or infinity in the report or the parameters
        raise ValueError(f"save_topic_model: header is not valid JSON ({exc})") from None
    _write_atomically(directory / ARRAYS_FILE, arrays_bytes)
    json_path = directory / HEADER_FILE
    _write_atomically(json_path, text.encode("utf-8"))
    logger.info("saved topic model version %d to %s", header["model_version"], directory)
    return json_path


def read_model_header(directory: Path) -> dict[str, Any]:
    """The parsed ``model.json`` of ``directory``, or a ModelFileError."""
    path = Path(directory) / HEADER_FILE
    try:
        header = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelFileError(f"{path}: no model file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFileError(f"{path}: unreadable model header ({exc})") from None
    if not isinstance(header, dict):
        raise ModelFileError(f"{path}: not a model header (expected a JSON object)")
    return header


def check_compatible(header: dict[str, Any], path: Path) -> None:
    """A ModelVersionError unless the format version and numpy/scikit-learn major.minor match."""
    saved_format = header.get("format_version")
    if saved_format != FORMAT_VERSION:
        raise ModelVersionError("model format", str(saved_format), str(FORMAT_VERSION), path)
    saved = header.get("libraries") if isinstance(header.get("libraries"), dict) else {}
    installed = library_versions()
    for library in CHECKED_LIBRARIES:
        saved_version = str(saved.get(library, "unknown"))
        if _major_minor(saved_version) != _major_minor(installed[library]):
            raise ModelVersionError(library, saved_version, installed[library], path)


def load_topic_model(directory: Path) -> TopicModel:
    """The model saved in ``directory``; predictions equal those of the saved model."""
    directory = Path(directory)
    header = read_model_header(directory)
    check_compatible(header, directory / HEADER_FILE)
    arrays = _read_arrays(directory / ARRAYS_FILE, header.get("arrays_sha256"))
    try:
        model = TopicModel.from_state(arrays, header["topic_model"])
    except (KeyError, ValueError, TypeError, AttributeError, IndexError) as exc:
        raise ModelFileError(f"{directory}: model files do not describe a topic model "
                             f"({type(exc).__name__}: {exc})") from None
    logger.info("loaded topic model version %s from %s", header.get("model_version"), directory)
    return model


def _read_arrays(path: Path, expected_sha256: Any) -> dict[str, np.ndarray]:
    try:
        digest = _sha256(path)
    except OSError as exc:
        raise ModelFileError(f"{path}: model arrays unreadable ({exc})") from None
    if digest != expected_sha256:
        raise ModelFileError(f"{path}: does not match {HEADER_FILE} (sha256 differs) - corrupt, "
                             "or written by another save; retrain the topic")
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ModelFileError(f"{path}: model arrays unreadable ({exc})") from None


def _saved_model_version(directory: Path) -> int:
    """The model version of the files already in ``directory`` (0 when none is readable)."""
    try:
        version = read_model_header(directory).get("model_version", 0)
    except ModelFileError:
        return 0
    return version if isinstance(version, int) and version > 0 else 0


def _major_minor(version: str) -> tuple[str, ...]:
    return tuple(version.split(".")[:2])


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_atomically(path: Path, data: bytes) -> None:
    """Write through a temporary file in the same directory, then rename over ``path``."""
    handle = tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False)
    try:
        with handle:
            handle.write(data)
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


BLOB_HEADER_ARRAY = "__header__"  # the JSON header inside a model blob, as a uint8 array


def topic_model_to_bytes(model: TopicModel) -> bytes:
    """The model as one ``.npz`` blob: its raw arrays plus a UTF-8 JSON header (no pickle).

    For distributed mode, where the model travels through Redis to every worker."""
    arrays, state = model.get_state()
    if BLOB_HEADER_ARRAY in arrays:
        raise ValueError(f"topic_model_to_bytes: array name {BLOB_HEADER_ARRAY!r} is reserved")
    for name, array in arrays.items():
        if not isinstance(array, np.ndarray) or array.dtype.hasobject:
            raise TypeError(f"topic_model_to_bytes: array {name!r} is not a plain numeric/text array")
    header = {"format_version": FORMAT_VERSION, "libraries": library_versions(),
              "page_classifier": model.page_classifier, "topic_model": state}
    text = json.dumps(header, ensure_ascii=False, allow_nan=False).encode("utf-8")
    buffer = io.BytesIO()
    np.savez(buffer, **arrays, **{BLOB_HEADER_ARRAY: np.frombuffer(text, dtype=np.uint8)})
    return buffer.getvalue()


def topic_model_from_bytes(blob: bytes, source: str = "model blob") -> TopicModel:
    """The model :func:`topic_model_to_bytes` wrote; ModelFileError/ModelVersionError if not."""
    where = Path(source)
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        header = json.loads(arrays.pop(BLOB_HEADER_ARRAY).tobytes().decode("utf-8"))
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise ModelFileError(f"{source}: not a topic model blob ({exc})") from None
    if not isinstance(header, dict):
        raise ModelFileError(f"{source}: not a topic model blob (header is not an object)")
    check_compatible(header, where)
    try:
        return TopicModel.from_state(arrays, header["topic_model"])
    except (KeyError, ValueError, TypeError, AttributeError, IndexError) as exc:
        raise ModelFileError(f"{source}: blob does not describe a topic model "
                             f"({type(exc).__name__}: {exc})") from None
