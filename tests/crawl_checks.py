"""Independent checks of a crawl from the sandbox server's own request log.

They do not trust the crawler's database: they read what the web server saw.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from protego import Protego

UA_TOKEN = "jlse"


def page_requests(log) -> list:
    return [e for e in log if not e.path.startswith("/robots.txt") and e.path != "/real-robots.txt"]


def robots_fetches_per_host(log) -> Counter:
    """robots.txt requests per host, counting a host's failed answers (5xx, which it may retry
    after) apart: {host: requests answered below 500}."""
    return Counter(e.host for e in log if e.path.startswith("/robots.txt") and e.status < 500)


def duplicate_fetches(log) -> list[tuple[str, str]]:
    """URLs answered twice; bounded retries after a 5xx answer are not refetches."""
    counts = Counter((e.host, e.path) for e in page_requests(log) if e.status < 500)
    return [key for key, n in counts.items() if n > 1]


def robots_violations(log, web) -> list[str]:
    parsers: dict[str, Protego | None] = {}
    bad = []
    for e in page_requests(log):
        if e.host not in parsers:
            rules = web.robots_rules(e.host)
            parsers[e.host] = Protego.parse(rules) if rules else None
        parser = parsers[e.host]
        url = f"http://{e.host}{e.path}"
        truth = web.truth(url)
        if (parser is not None and not parser.can_fetch(url, UA_TOKEN)) or (
                truth is not None and not truth.crawlable):
            bad.append(url)
    return bad


def crawl_delay_breaches(log, web, slack: float = 0.05) -> list[str]:
    """Requests to a host sooner after the previous one than its Crawl-delay allows."""
    by_host = defaultdict(list)
    for e in log:
        by_host[e.host].append(e.t)
    bad = []
    for host, times in by_host.items():
        rules = web.robots_rules(host)
        delay = Protego.parse(rules).crawl_delay(UA_TOKEN) if rules else None
        if not delay:
            continue
        times.sort()
        for a, b in zip(times, times[1:], strict=False):
            if b - a < delay - slack:
                bad.append(f"{host}: {b - a:.2f}s < {delay}s")
    return bad


def trap_fetches(log, web) -> int:
    return sum(1 for e in page_requests(log) if web.is_trap(f"http://{e.host}{e.path}"))


def lost_urls(store_url: str, client, prefix: str, crawl_id: str) -> list[str]:
    """URLs of a distributed crawl's database that ended neither fetched/rejected nor in the
    Redis frontier (queued or leased) under key prefix ``prefix``."""
    from jlse.records import LinkStatus
    from jlse.scheduler.crawl_registry import CrawlRegistry
    from jlse.scheduler.store import open_store

    frontier = CrawlRegistry(client, prefix).frontier(crawl_id)
    lost = []
    with open_store(store_url) as store:
        stranded = set(frontier.stranded(store))
        for link in store.iter_links():
            if link.status in (LinkStatus.FETCHED, LinkStatus.REJECTED):
                continue
            if link.status is not LinkStatus.QUEUED:
                lost.append(f"{link.url} ({link.status.value})")
            elif link.url in stranded and not _parent_pending(store, link):
                lost.append(f"{link.url} (queued, not in the frontier)")
    return lost


def _parent_pending(store, link) -> bool:
    """A link written by a worker killed before it reached Redis: its page is still queued
    (the lease was reaped), so fetching that page again queues the link again."""
    from jlse.records import LinkStatus

    parent = store.get_link(link.parent_id) if link.parent_id is not None else None
    return parent is not None and parent.status is LinkStatus.QUEUED
