"""The crawl's writes on PostgreSQL as set-based statements: links, and the pages of a batch.

Batches go to the server as one array literal per column (``'{...}'::text[]``), not as
psycopg2's ``ARRAY[...]`` of one quoted constant per value: the server reads such a literal
with ``array_in`` instead of parsing, analysing and folding one constant node per value, and
the client builds it in Python instead of quoting every value (bench_store: server CPU per
link row 10 µs instead of 15, client 11 µs instead of 20).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import struct
from collections.abc import Callable, Iterable, Sequence
from numbers import Integral
from typing import Any

from jlse.records import FetchRecord, NewLink, Outcome
from jlse.scheduler.store.base import StoreError
from jlse.scheduler.store.partitions import UNPARTITIONED, LinkLayout
from jlse.scheduler.store.sql import clean_text, host_of

log = logging.getLogger(__name__)

# CPython's own md5 hashes a URL in a third of OpenSSL's time (an OpenSSL context is set up
# per call: 1.0 against 0.36 µs a URL), the same digest; some builds leave it out.
try:
    from _md5 import md5 as _md5
except ImportError:  # pragma: no cover
    _md5 = functools.partial(hashlib.md5, usedforsecurity=False)

_PLAIN_NUMBERS = (int, float)
_ARRAY_ESCAPES = (("\\", "\\\\"), ('"', '\\"'))  # inside an array literal's quotes
_SIGNED_64 = struct.Struct(">q")  # md5's first 8 bytes as a signed BIGINT
# Each line's plain host, or "" (the line matches whatever it holds: one result per line).
_PLAIN_HOSTS = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://([a-z0-9.-]+)(?=[/?#]|$))?.*$",
                          re.MULTILINE)

# A link's unique key is a 64-bit fingerprint of its URL (url_fingerprint). Two URLs with the
# same fingerprint (1e9 URLs hold such a pair with a chance of about 3%) are told apart by the
# URL text: the second takes the fingerprint of its next probe, up to FINGERPRINT_PROBES, and a
# lookup by URL tries them all.
FINGERPRINT_PROBES = 4
# add_links in one statement: the batch as arrays (unnest), ids drawn in input order (the
# subquery with nextval is not flattened, so nextval runs before the sort), rows inserted in
# fingerprint order (concurrent workers lock shared keys in the same order: no deadlocks).
# ON CONFLICT DO NOTHING: a known row is neither locked nor written. The rows it created come
# back, then the rows the statement's snapshot holds under the batch's other fingerprints (an
# index probe each): known URLs with their status and priority (upsert_links raises those
# that rise), or another URL under the same fingerprint (its next probe). A row another
# transaction committed after the snapshot is in neither: upsert_links reads it afterwards.
# Partitioned (partitions.py): a new id is nextval * P + part, and the known rows are read
# partition by partition, one branch each naming its partition (pruned when planned: a join
# or an = ANY over the whole table would probe every partition with every key).
ADD_LINKS_SQL = (
    "WITH written AS ("
    " INSERT INTO links (id, url_fp[[, part]], url, host, parent_id, depth, anchor_text,"
    " context, priority, pattern_run, redirect_hops, discovered_at)"
    " SELECT * FROM (SELECT nextval(%(seq)s::regclass)[[ * {parts} + (b.fp & {mask})]],"
    "  b.fp[[, (b.fp & {mask})::smallint]], b.url, b.host, b.parent, b.depth, b.anchor,"
    "  b.context, b.priority, b.run, b.hops, %(now)s::float8"
    "  FROM unnest(%(fp)s::bigint[], %(url)s::text[], %(host)s::text[], %(parent)s::bigint[],"
    "  %(depth)s::int[], %(anchor)s::text[], %(context)s::text[], %(priority)s::float8[],"
    "  %(run)s::int[], %(hops)s::int[])"
    "  AS b(fp, url, host, parent, depth, anchor, context, priority, run, hops)) AS i ORDER BY 2"
    " ON CONFLICT (url_fp[[, part]]) DO NOTHING RETURNING id, url_fp"
    ") SELECT id, url_fp, NULL, NULL, NULL FROM written"
)
_KNOWN_AFTER_WRITE = (
    " UNION ALL SELECT l.id, l.url_fp, l.url, l.status, l.priority FROM links l"
    " WHERE [[l.part = {part} AND ]]l.url_fp = ANY(ARRAY(SELECT u.fp"
    "  FROM unnest(%(fp{part})s::bigint[]) AS u(fp) WHERE u.fp NOT IN (SELECT url_fp FROM written)))"
)
# Rows of a batch committed by another transaction after add_links's snapshot, by fingerprint.
_KNOWN_LINKS = ("SELECT id, url_fp, url, status, priority FROM links"
                " WHERE [[part = {part} AND ]]url_fp = ANY(%(fp{part})s::bigint[])")
# The priority of known queued URLs that rises (rare: a URL found again with a higher score).
RAISE_PRIORITIES_SQL = (
    "UPDATE links l SET priority = r.priority"
    " FROM unnest(%(ids)s::bigint[], %(priorities)s::float8[]) AS r(id, priority)"
    " WHERE l.id = r.id[[ AND l.part = (r.id & {mask})::smallint"
    " AND l.part = ANY(%(parts)s::smallint[])]] AND l.status = 'queued' AND l.priority < r.priority"
)
# The pages of a batch in one statement, as record_fetch_once writes one: a link changes (and
# gets its ResultTable row) only if it was still queued; every history row of a link that
# exists is added, in input order. A missing link fails the batch: unpartitioned, by its
# foreign key; partitioned (no foreign key), by record_pages, which reads what is present.
RECORD_PAGES_SQL = (
    "WITH input AS ("
    " SELECT * FROM unnest(%(id)s::bigint[], %(at)s::float8[], %(relevance)s::float8[],"
    "  %(target)s::int[], %(title)s::text[], %(status)s::int[], %(type)s::text[],"
    "  %(bytes)s::bigint[], %(elapsed)s::float8[], %(outcome)s::text[], %(final)s::text[],"
    "  %(error)s::text[], %(wfile)s::text[], %(woffset)s::bigint[], %(wlength)s::bigint[])"
    "  WITH ORDINALITY AS r(id, at, relevance, target, title, status, type, bytes, elapsed,"
    "  outcome, final, error, wfile, woffset, wlength, n)"
    "), updated AS ("
    " UPDATE links l SET status = 'fetched', fetched_at = i.at, relevance = i.relevance,"
    " is_target = i.target, title = i.title FROM input i"
    " WHERE l.id = i.id[[ AND l.part = (i.id & {mask})::smallint"
    " AND l.part = ANY(%(parts)s::smallint[]) AND l.id = ANY(%(id)s::bigint[])]]"
    " AND l.status = 'queued'"
    " RETURNING l.id, i.target, i.relevance"
    "), present AS ("  # unpartitioned, a missing link fails its foreign key instead
    " SELECT id FROM input[[ WHERE id IN (SELECT l.id FROM links l"
    " WHERE l.id = ANY(%(id)s::bigint[]) AND l.part = ANY(%(parts)s::smallint[]))]]"
    "), history AS ("
    " INSERT INTO fetches (url_id, fetched_at, status_code, content_type, n_bytes, elapsed,"
    " outcome, final_url, relevance, is_target, error, warc_file, warc_offset, warc_length)"
    " SELECT id, at, status, type, bytes, elapsed, outcome, final, relevance, target, error,"
    " wfile, woffset, wlength FROM input[[ WHERE id IN (SELECT id FROM present)]] ORDER BY n"
    "), result AS ("
    " INSERT INTO results (url_id, relevance, stored_at)"
    " SELECT id, relevance, %(now)s FROM updated WHERE target = 1"
    " ON CONFLICT (url_id) DO NOTHING"
    ") SELECT ARRAY(SELECT id FROM updated), ARRAY(SELECT id FROM present)"
)


def text_array(values: Iterable[str]) -> str:
    """A PostgreSQL array literal of ``values`` (cleaned text: no NUL)."""
    values = values if isinstance(values, list) else list(values)
    if not values:
        return "{}"
    joined = join_escaped(values, _ARRAY_ESCAPES, "text_array")
    return '{"' + joined.replace("\x00", '","') + '"}'


def join_escaped(values: list[str], escapes: Sequence[tuple[str, str]], caller: str) -> str:
    """``values`` (cleaned text) joined on NUL, which none holds, and escaped (``escapes``:
    (character, replacement) pairs, in order) in one pass over the whole string."""
    joined = "\x00".join(values)
    if joined.count("\x00") != len(values) - 1:
        raise ValueError(f"{caller}: a value holds a NUL character (clean_text removes them)")
    for raw, escaped in escapes:
        if raw in joined:
            joined = joined.replace(raw, escaped)
    return joined


def number_array(values: Iterable[float | int | None]) -> str:
    """A PostgreSQL array literal of numbers (numpy's too; floats round-trip, inf and nan
    included)."""
    return "{" + ",".join(number_strings(values)) + "}"


def number_strings(values: Iterable[float | int | None], null: str = "NULL") -> list[str]:
    """Each number as PostgreSQL reads it, None as ``null``. A column of floats alone, or of
    ints alone (most are), takes one C-level pass."""
    values = values if isinstance(values, list) else list(values)
    for plain in (float.__repr__, int.__repr__):  # TypeError at the first value of another type
        try:
            return list(map(plain, values))
        except TypeError:
            pass
    return [repr(value) if type(value) in _PLAIN_NUMBERS else _number(value, null)
            for value in values]


def _number(value: float | int | None, null: str) -> str:
    if value is None:
        return null
    return str(int(value)) if isinstance(value, Integral) else repr(float(value))


def fast_hosts(urls: list[str]) -> list[str]:
    """``host_of`` of each URL. One regular expression finds them all in the URLs joined on
    newlines; a URL whose host is not plain lower-case letters, digits, dots and dashes without
    a port (almost every canonical URL's is) finds an empty host there, and ``urlsplit`` it."""
    if not urls:
        return []
    joined = "\n".join(urls)
    if joined.count("\n") != len(urls) - 1:  # a URL holds a newline: one at a time
        return [host_of(url) for url in urls]
    hosts = _PLAIN_HOSTS.findall(joined)
    if "" in hosts:
        hosts = [host or host_of(url) for host, url in zip(hosts, urls, strict=True)]
    return hosts


def url_fingerprint(url: str, probe: int = 0) -> int:
    """The 64-bit key of ``url`` in links (signed, as BIGINT): md5's first 8 bytes, which
    PostgreSQL computes as ``('x' || left(md5(url), 16))::bit(64)::bigint`` (the migration
    from schema 1 does). Probe k > 0 hashes the URL behind a prefix no URL has."""
    return url_fingerprints([url], probe)[0]


def url_fingerprints(urls: Iterable[str], probe: int = 0) -> list[int]:
    """``url_fingerprint`` of each of ``urls``."""
    md5, first_8 = _md5, _SIGNED_64.unpack_from
    if probe == 0:
        return [first_8(md5(url.encode()).digest())[0] for url in urls]
    return [first_8(md5(f"\x01{probe}\x01{url}".encode()).digest())[0] for url in urls]


Answers = tuple[dict[int, tuple[int, bool]], list[tuple[int, float]]]


def upsert_links(cur: Any, links: list[NewLink], now: float, sequence: str,
                 layout: LinkLayout = UNPARTITIONED,
                 copy: Callable[[Any, dict[int, NewLink]], Answers | None] | None = None
                 ) -> dict[str, tuple[int, bool]]:
    """Insert or find deduplicated ``links``: url -> (id, created); ``sequence`` draws ids;
    ``layout`` is the database's (partitions.py). ``copy`` (pg_copy.py), if given, writes
    each batch first, as ``_insert_or_read`` would, or answers None to leave it to that."""
    found: dict[str, tuple[int, bool]] = {}
    pending = links
    for probe in range(FINGERPRINT_PROBES):
        if not pending:
            return found
        by_fp: dict[int, NewLink] = {}
        clashing = []  # a second URL of this batch under one fingerprint: next probe
        for fingerprint, link in zip(url_fingerprints([link.url for link in pending], probe),
                                     pending, strict=True):
            if by_fp.setdefault(fingerprint, link) is not link:
                clashing.append(link)
        answers = copy(cur, by_fp) if copy is not None else None
        answered, rising = answers or _insert_or_read(cur, by_fp, now, sequence, layout)
        if rising:
            cur.execute(layout.sql(RAISE_PRIORITIES_SQL), {
                "ids": number_array(link_id for link_id, _ in rising),
                "priorities": number_array(priority for _, priority in rising),
                "parts": number_array(layout.parts_of(link_id for link_id, _ in rising))})
        found.update({by_fp[fp].url: answer for fp, answer in answered.items()})
        pending = [link for fp, link in by_fp.items() if fp not in answered] + clashing
        if pending:
            log.warning("add_links: %d URLs share a fingerprint with another URL; probe %d",
                        len(pending), probe + 1)
    if pending:
        raise StoreError(f"add_links: {len(pending)} URLs neither inserted nor found, "
                         f"e.g. {pending[0].url}")
    return found


def _insert_or_read(cur: Any, by_fp: dict[int, NewLink], now: float, sequence: str,
                    layout: LinkLayout) -> Answers:
    """``by_fp``'s new rows inserted, the rest read, in one statement (``ADD_LINKS_SQL``):
    fingerprint -> (id, created), and the known queued ids whose priority rises."""
    groups = layout.groups(by_fp)
    cur.execute(add_links_sql(layout, tuple(groups)),
                {**link_params(by_fp, now, sequence), **group_params(groups)})
    answered: dict[int, tuple[int, bool]] = {}
    rising: list[tuple[int, float]] = []
    read_answers(cur.fetchall(), by_fp, answered, rising)
    unanswered = layout.groups(fp for fp in by_fp if fp not in answered)
    if unanswered:  # committed meanwhile by another worker, or another URL's key
        cur.execute(known_links_sql(layout, tuple(unanswered)), group_params(unanswered))
        read_answers(cur.fetchall(), by_fp, answered, rising)
    return answered, rising


@functools.lru_cache(maxsize=4096)
def add_links_sql(layout: LinkLayout, parts: tuple[int, ...]) -> str:
    """``ADD_LINKS_SQL`` reading the known rows of the partitions ``parts``."""
    return layout.sql(ADD_LINKS_SQL + "".join(
        _KNOWN_AFTER_WRITE.replace("{part}", str(part)) for part in parts))


@functools.lru_cache(maxsize=4096)
def known_links_sql(layout: LinkLayout, parts: tuple[int, ...]) -> str:
    return layout.sql(" UNION ALL ".join(_KNOWN_LINKS.replace("{part}", str(part))
                                         for part in parts))


def group_params(groups: dict[int, list[int]]) -> dict[str, str]:
    """The fingerprints of each partition (``fp{part}``) as array literals."""
    return {f"fp{part}": number_array(keys) for part, keys in groups.items()}


def read_answers(rows: list[tuple], by_fp: dict[int, NewLink],
                  answered: dict[int, tuple[int, bool]], rising: list[tuple[int, float]]) -> None:
    """Rows (id, url_fp, url, status, priority) into ``answered`` (fingerprint -> (id,
    created)); a row without a URL is one the insert created. A known queued URL whose
    priority rises goes to ``rising``; a row of another URL is not an answer."""
    for link_id, fp, url, status, priority in rows:
        if url is None:
            answered[fp] = (link_id, True)
            continue
        link = by_fp[fp]
        if url == link.url:
            answered[fp] = (link_id, False)
            if status == "queued" and priority < link.priority:
                rising.append((link_id, link.priority))


def link_params(by_fp: dict[int, NewLink], now: float, sequence: str) -> dict[str, Any]:
    links = list(by_fp.values())  # input order (dicts keep it): ids follow it
    return {
        "seq": sequence, "now": now, "fp": number_array(by_fp),
        "url": text_array(link.url for link in links),
        "host": text_array(fast_hosts([link.url for link in links])),
        "parent": number_array(link.parent_id for link in links),
        "depth": number_array(link.depth for link in links),
        "anchor": text_array(link.anchor_text for link in links),
        "context": text_array(link.context for link in links),
        "priority": number_array(link.priority for link in links),
        "run": number_array(link.pattern_run for link in links),
        "hops": number_array(link.redirect_hops for link in links),
    }


def record_pages(cur: Any, records: Sequence[FetchRecord], now: float,
                 layout: LinkLayout = UNPARTITIONED) -> list[bool]:
    """``RECORD_PAGES_SQL`` for ``records``: per record, whether its link was still queued
    (False: only its history row was added). A missing link fails the batch (the caller's
    transaction rolls back)."""
    params = page_params(records, now)
    params["parts"] = number_array(layout.parts_of(record.url_id for record in records))
    cur.execute(layout.sql(RECORD_PAGES_SQL), params)
    updated, present = (set(ids) for ids in cur.fetchone())
    missing = [record.url_id for record in records if record.url_id not in present]
    if missing:
        raise StoreError(f"write_pages: no link with id {missing[0]}")
    return [record.url_id in updated for record in records]


def page_params(records: Sequence[FetchRecord], now: float) -> dict[str, Any]:
    def texts(name: str) -> str:
        return text_array(clean_text(getattr(record, name)) for record in records)

    def numbers(name: str) -> str:
        return number_array(getattr(record, name) for record in records)

    return {
        "now": now, "id": numbers("url_id"),
        "at": number_array(record.fetched_at or now for record in records),
        "relevance": numbers("relevance"),
        "target": number_array(int(bool(record.is_target)) for record in records),
        "title": texts("title"), "status": numbers("status_code"), "type": texts("content_type"),
        "bytes": numbers("n_bytes"), "elapsed": numbers("elapsed"),
        "outcome": text_array(Outcome(record.outcome).value for record in records),
        "final": texts("final_url"), "error": texts("error"), "wfile": texts("warc_file"),
        "woffset": numbers("warc_offset"), "wlength": numbers("warc_length"),
    }
