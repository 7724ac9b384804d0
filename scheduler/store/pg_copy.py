"""New links written by ``COPY``: read which of a batch's URLs are known, then copy the rest.

The one-statement insert (``pg_writes.ADD_LINKS_SQL``) makes the server read every value
from an array, draw an id for every row, try each row's insertion against the fingerprint
index (``ON CONFLICT``) and return what it did. Here the server does less: one statement
reads the known rows by fingerprint (an index probe each) and draws the ids the new rows
lack; ``COPY`` then writes only the new rows, in fingerprint order (workers that write shared
keys at once lock them in the same order). Ids are drawn ahead into an ``IdReserve`` of at
most one batch, so a batch's new rows still take ids in input order.

Another worker may insert one of the new URLs between the read and the ``COPY``: the ``COPY``
then fails on the unique fingerprint and writes nothing (it is one statement, autocommitted),
and the caller writes the batch with the one-statement insert, which settles such races.
"""

from __future__ import annotations

import io
from collections import deque
from collections.abc import Iterator
from typing import Any

import psycopg2.errors

from jlse.records import NewLink
from jlse.scheduler.store.partitions import LinkLayout
from jlse.scheduler.store.pg_writes import (
    Answers,
    fast_hosts,
    group_params,
    join_escaped,
    known_links_sql,
    number_strings,
    read_answers,
)

# The known rows of a batch, and in a row of its own the ids the reserve lacks, as one array.
_READ_KNOWN = "SELECT *, NULL::bigint[] FROM ({known}) AS k"
_DRAW_IDS = (" UNION ALL SELECT NULL, NULL, NULL, NULL, NULL,"
             " ARRAY(SELECT nextval(%(seq)s::regclass) FROM generate_series(1, %(draw)s))")
# Rows made and sent at a time: the server inserts a chunk while the next is made (~30 KB).
COPY_CHUNK = 128
_MOSTLY_ZERO = ("pattern_run", "redirect_hops")  # columns left out when all 0, their default
_COPY_ESCAPES = (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r"))
_NULL = "\\N"


class IdReserve:
    """Values of the links sequence drawn ahead of the rows that take them (one store's)."""

    def __init__(self) -> None:
        self.values: deque[int] = deque()
        self.races = 0  # COPYs that met a row another worker wrote meanwhile

    def lacking(self, needed: int) -> int:
        return max(0, needed - len(self.values))

    def take(self, count: int) -> list[int]:
        return [self.values.popleft() for _ in range(count)]


def copy_new_links(cur: Any, by_fp: dict[int, NewLink], now: float, sequence: str,
                   layout: LinkLayout, reserve: IdReserve) -> Answers | None:
    """Known rows of ``by_fp`` read, the new ones copied: (fingerprint -> (id, created), known
    queued ids whose priority rises), as ``pg_writes.upsert_links`` reads them; a fingerprint
    held by another URL is in neither. None if another worker wrote one of the new URLs
    meanwhile: nothing was written."""
    groups = layout.groups(by_fp)
    sql = _READ_KNOWN.replace("{known}", known_links_sql(layout, tuple(groups)))
    draw = reserve.lacking(len(by_fp))
    if draw:
        sql += _DRAW_IDS
    cur.execute(sql, {**group_params(groups), "seq": sequence, "draw": draw})
    known = []
    for *row, drawn in cur.fetchall():
        if drawn is not None:
            reserve.values.extend(drawn)
        else:
            known.append(row)
    answered: dict[int, tuple[int, bool]] = {}
    rising: list[tuple[int, float]] = []
    read_answers(known, by_fp, answered, rising)
    held = {fp for _, fp, *_ in known}  # by this URL or by another (its next probe)
    new = [fp for fp in by_fp if fp not in held]
    if not new:
        return answered, rising
    ids = [value * layout.partitions + layout.part(fp) if layout.partitioned else value
           for value, fp in zip(reserve.take(len(new)), new, strict=True)]
    statement, chunks = copy_rows(new, ids, by_fp, now, layout)
    try:
        cur.copy_expert(statement, _ChunkReader(chunks))
    except psycopg2.errors.UniqueViolation:
        reserve.races += 1
        return None
    answered.update((fp, (link_id, True)) for fp, link_id in zip(new, ids, strict=True))
    return answered, rising


def copy_rows(fps: list[int], ids: list[int], by_fp: dict[int, NewLink], now: float,
              layout: LinkLayout) -> tuple[str, Iterator[bytes]]:
    """The ``COPY`` statement of the new rows and its data (text format) in chunks of
    ``COPY_CHUNK`` rows, made as they are read, in fingerprint order; a column whose values are
    all its default (0) is left out."""
    order = sorted(range(len(fps)), key=fps.__getitem__)
    fps = [fps[n] for n in order]
    ids = [ids[n] for n in order]
    links = [by_fp[fp] for fp in fps]
    names = ["id", "url_fp"] + (["part"] if layout.partitioned else []) + [
        "url", "host", "parent_id", "depth", "anchor_text", "context", "priority"]
    names += [name for name in _MOSTLY_ZERO if any(getattr(link, name) for link in links)]
    names.append("discovered_at")
    chunks = (_chunk(fps[at:at + COPY_CHUNK], ids[at:at + COPY_CHUNK],
                     links[at:at + COPY_CHUNK], names, repr(float(now)), layout)
              for at in range(0, len(fps), COPY_CHUNK))
    return f"COPY links ({', '.join(names)}) FROM STDIN", chunks


def _numbers(values: list[Any]) -> list[str]:
    return number_strings(values, null=_NULL)


def _chunk(fps: list[int], ids: list[int], links: list[NewLink], names: list[str],
           now: str, layout: LinkLayout) -> bytes:
    """Rows of ``COPY``'s text format, a column at a time (one of plain ints or floats takes
    one C-level pass)."""
    urls = [link.url for link in links]
    columns = [_numbers(ids), _numbers(fps)]
    if layout.partitioned:
        columns.append(_numbers([fp & layout.mask for fp in fps]))
    columns += [
        copy_texts(urls), copy_texts(fast_hosts(urls)),
        _numbers([link.parent_id for link in links]),
        _numbers([link.depth for link in links]),
        copy_texts([link.anchor_text for link in links]),
        copy_texts([link.context for link in links]),
        _numbers([link.priority for link in links]),
    ]
    columns += [_numbers([getattr(link, name) for link in links])
                for name in _MOSTLY_ZERO if name in names]
    columns.append([now] * len(links))
    return ("\n".join(map("\t".join, zip(*columns, strict=True))) + "\n").encode()


class _ChunkReader(io.RawIOBase):
    """A file ``copy_expert`` reads: each ``read`` hands over the next chunk, made then, so the
    server inserts the rows sent while the next ones are made."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        super().__init__()
        self._chunks = chunks

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return next(self._chunks, b"")


def copy_texts(values: list[str]) -> list[str]:
    """``values`` (cleaned text: no NUL) escaped for ``COPY``'s text format."""
    if not values:
        return []
    return join_escaped(values, _COPY_ESCAPES, "copy_texts").split("\x00")
