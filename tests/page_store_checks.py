"""Checks of a distributed crawl's page store (workers/page_store.py), shared by the tests that
crawl into one: every exported page has its text, every file passes ``warcio check``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from jlse.workers import page_store
from jlse.workers.warc import OPEN_SUFFIX, SUFFIX


def warcio_check(paths: list[Path]) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "warcio"), "check",
                           *map(str, paths)], capture_output=True, text=True, timeout=300)


def check_page_store(export_jsonl: Path, store: Path, hosts: set[str],
                     orphans: set[Path] = frozenset()) -> dict[str, int]:
    """``jlse export --content`` gave every fetched page its text; ``hosts`` all wrote files;
    after the workers stopped, the only ``.open`` files are ``orphans`` (of killed workers),
    and once they are sealed every file is whole and passes ``warcio check``."""
    rows = [json.loads(line) for line in export_jsonl.read_text().splitlines()]
    ok = [row for row in rows if row["outcome"] == "ok"]
    empty = [row["url"] for row in ok if not row["text"]]
    assert not empty, f"{len(empty)} of {len(ok)} pages without text, e.g. {empty[:3]}"
    left_open = set(store.glob(f"*{OPEN_SUFFIX}"))
    assert left_open <= set(orphans), left_open - set(orphans)
    for path in left_open:
        page_store.seal(path)
    files = sorted(store.glob(f"*{SUFFIX}"))
    writers = {path.name.split("-")[3] for path in files}
    assert hosts <= writers, writers
    checked = warcio_check(files)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    torn = [path for path in files if page_store.whole_length(path) != path.stat().st_size]
    assert not torn, torn
    return {"ok_pages": len(ok), "files": len(files), "sealed_orphans": len(left_open),
            "store_bytes": sum(path.stat().st_size for path in files)}
