"""``jlse export``: relevant and target pages with their scores, as JSON lines or CSV."""

from __future__ import annotations

import csv
import json
from typing import TextIO

from jlse.scheduler.store.base import CrawlStore

EXPORT_FIELDS = ("url", "title", "relevance", "is_target", "depth", "fetched_at", "status_code",
                 "content_type", "parent_url")


def export_pages(store: CrawlStore, out: TextIO, fmt: str = "jsonl",
                 min_relevance: float | None = 0.5, targets_only: bool = False) -> int:
    """Write the selected pages to ``out``; returns how many were written."""
    rows = store.export_rows(min_relevance=min_relevance, targets_only=targets_only)
    if fmt == "jsonl":
        count = 0
        for row in rows:
            out.write(json.dumps({k: row.get(k) for k in EXPORT_FIELDS}, ensure_ascii=False))
            out.write("\n")
            count += 1
        return count
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=EXPORT_FIELDS, extrasaction="ignore")
        writer.writeheader()
        count = 0
        for row in rows:
            writer.writerow(row)
            count += 1
        return count
    raise ValueError(f"unknown export format {fmt!r}: use jsonl or csv")
