"""Plain records passed between the frontier, the workers and the crawl database.

They are JSON-friendly on purpose (``to_dict``/``from_dict``): in distributed mode the same
records travel in Celery messages and Redis, where nothing may be pickled.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any


class LinkStatus(str, Enum):
    """Where a URL of the LinkTable stands. The crawl database is the source of truth."""

    QUEUED = "queued"  # discovered, waiting in the frontier
    FETCHED = "fetched"  # fetched (whatever the outcome) - never fetched again
    REJECTED = "rejected"  # refused before fetching (trap, scope, robots, address guard)


class Outcome(str, Enum):
    """What happened to one fetch attempt; every fetch ends in exactly one of these."""

    OK = "ok"  # HTML fetched and parsed
    NOT_HTML = "not_html"  # fetched, content type is not HTML: recorded, not parsed
    HTTP_ERROR = "http_error"  # 4xx/5xx after retries
    REDIRECT = "redirect"  # 3xx: the target went back to the frontier as a new URL
    TOO_MANY_REDIRECTS = "too_many_redirects"
    BAD_REDIRECT = "bad_redirect"  # 3xx whose Location is not a URL (e.g. "http://[::1")
    TOO_LARGE = "too_large"  # byte cap or decompressed-size cap hit
    TIMEOUT = "timeout"  # connect/read timeout or total deadline
    CONNECTION_ERROR = "connection_error"  # DNS failure, refused, reset, dead host
    ROBOTS_DISALLOWED = "robots_disallowed"
    ROBOTS_UNAVAILABLE = "robots_unavailable"  # robots.txt 5xx/unreachable: retry later
    ADDRESS_REFUSED = "address_refused"  # private/loopback/... target not allowed
    OUT_OF_SCOPE = "out_of_scope"
    TRAP = "trap"  # refused by a trap defence
    INVALID_URL = "invalid_url"
    PARSE_ERROR = "parse_error"  # body could not be parsed at all (kept, not expanded)
    ERROR = "error"  # anything unexpected; logged with a traceback, crawl goes on


# The error of a CONNECTION_ERROR after the host answered (it exists and listens).
BODY_FAILED = "body transfer failed"

# Outcomes where no page request reached the host: they do not count against the page budget.
UNCOUNTED_OUTCOMES = frozenset({
    Outcome.ROBOTS_DISALLOWED, Outcome.ROBOTS_UNAVAILABLE, Outcome.TRAP, Outcome.OUT_OF_SCOPE,
    Outcome.ADDRESS_REFUSED, Outcome.INVALID_URL,
})


@dataclass
class Link:
    """One out-link found on a page: the JLSE link triple plus the URL it points to."""

    url: str  # absolute, canonical
    anchor_text: str = ""  # anchor text plus alt text of linked images
    context: str = ""  # text of DOM nodes within distance delta of the <a>

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Link:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass
class CrawlTask:
    """A URL to fetch, as the frontier hands it out."""

    url: str  # canonical
    url_id: int  # LinkTable id
    priority: float = 1.0
    depth: int = 0
    parent_id: int | None = None
    anchor_text: str = ""
    context: str = ""
    redirect_hops: int = 0  # how many redirects led here
    pattern_run: int = 0  # ancestors in a row with this URL's pattern (trap defence)
    attempt: int = 0  # earlier requests of this URL that failed and were retried (5xx, network)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)  # every field is a scalar: asdict's deep copy is 10x slower

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CrawlTask:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass
class FetchRecord:
    """One line of the crawl history: a fetch attempt and what came of it."""

    url_id: int
    url: str
    outcome: Outcome
    fetched_at: float = 0.0  # unix time
    status_code: int | None = None
    content_type: str = ""
    n_bytes: int = 0
    elapsed: float = 0.0  # seconds
    final_url: str = ""
    relevance: float | None = None  # P(relevant | page), None when not classified
    is_target: bool = False
    title: str = ""
    error: str = ""  # short human-readable reason for anything but OK
    # the response's WARC record (jlse.workers.page_store): file name, offset, length
    warc_file: str = ""
    warc_offset: int = 0
    warc_length: int = 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = self.outcome.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FetchRecord:
        kwargs = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        kwargs["outcome"] = Outcome(kwargs["outcome"])
        return cls(**kwargs)


@dataclass
class NewLink:
    """A URL to add to the LinkTable (idempotent on the canonical URL)."""

    url: str
    parent_id: int | None
    depth: int
    anchor_text: str = ""
    context: str = ""
    priority: float = 1.0
    pattern_run: int = 0
    redirect_hops: int = 0
    # for the strategy's site bandit, ranked where the crawl's results are written
    # (``Strategy.observe_result``): 0 not ranked; a link to another site on a page judged
    # relevant (1) or irrelevant (3; 2 was a target page's, before target pages were expanded)
    site_group: int = 0


@dataclass
class StoredLink:
    """A LinkTable row as the store returns it."""

    id: int
    url: str
    parent_id: int | None
    depth: int
    anchor_text: str
    context: str
    priority: float
    status: LinkStatus
    pattern_run: int = 0
    redirect_hops: int = 0
    relevance: float | None = None
    is_target: bool = False
    title: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_task(self) -> CrawlTask:
        return CrawlTask(
            url=self.url,
            url_id=self.id,
            priority=self.priority,
            depth=self.depth,
            parent_id=self.parent_id,
            anchor_text=self.anchor_text,
            context=self.context,
            redirect_hops=self.redirect_hops,
            pattern_run=self.pattern_run,
        )
