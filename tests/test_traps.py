"""Spider-trap and scope defences."""

from __future__ import annotations

import pytest

from jlse.records import CrawlTask
from jlse.scheduler.frontier import LocalFrontier
from jlse.scheduler.ledger import LocalHostLedger
from jlse.scheduler.traps import TrapGuard
from jlse.scheduler.urls import canonicalize, registered_domain
from jlse.settings import Settings


def _guard(**overrides) -> TrapGuard:
    return TrapGuard(Settings().replace(**overrides))


def test_ordinary_url_is_accepted() -> None:
    assert _guard().refuse_reason("http://example.com/news/1.html", 3, 0) is None


def test_infinite_calendar_is_refused_after_max_pattern_run_steps() -> None:
    guard = _guard(max_pattern_run=5)
    parent, run = "http://cal.test/calendar/2024/01", 0
    accepted = [parent]
    for step in range(1, 100):
        year, month = divmod(2024 * 12 + step, 12)
        child = f"http://cal.test/calendar/{year}/{month + 1:02d}"
        run = guard.child_pattern_run(parent, run, child)
        reason = guard.refuse_reason(child, depth=step, pattern_run=run)
        if reason is not None:
            assert reason == "pattern run"
            break
        accepted.append(child)
        parent = child
    # the first calendar page plus max_pattern_run more in a row, never more
    assert len(accepted) == 1 + 5


def test_calendar_with_query_is_one_pattern() -> None:
    guard = _guard()
    parent = "http://cal.test/view?date=2024-05-01&mode=day"
    child = "http://cal.test/view?mode=day&date=2024-05-02"
    assert guard.child_pattern_run(parent, 7, child) == 8


def test_pattern_run_resets_on_a_different_pattern() -> None:
    guard = _guard()
    assert guard.child_pattern_run("http://h.test/p/1.html", 4, "http://h.test/about") == 0
    assert guard.child_pattern_run("http://h.test/p/1.html", 4, "http://h.test/p/2.html") == 5


def test_repeated_path_segments_are_refused() -> None:
    guard = _guard(max_repeated_segments=2)
    assert guard.refuse_reason("http://h.test/a/b/a/b/a/b", 1, 0) == "repeated path segments"
    assert guard.refuse_reason("http://h.test/a/b/a/b", 1, 0) is None
    assert guard.refuse_reason("http://h.test/2024/01/01/post", 1, 0) is None
    # empty segments (double slashes) are not counted
    assert guard.refuse_reason("http://h.test/a////b", 1, 0) is None


def test_long_url_is_refused() -> None:
    guard = _guard(max_url_length=100)
    assert guard.refuse_reason("http://h.test/" + "x" * 100, 1, 0) == "url too long"
    assert guard.refuse_reason("http://h.test/" + "x" * 50, 1, 0) is None


def test_depth_limit() -> None:
    guard = _guard(max_depth=3)
    assert guard.refuse_reason("http://h.test/x", 3, 0) is None
    assert guard.refuse_reason("http://h.test/x", 4, 0) == "too deep"


def test_allowed_domains_include_subdomains_only() -> None:
    guard = _guard(allowed_domains=["Example.com", "*.other.org"])
    assert guard.refuse_reason("http://example.com/", 0, 0) is None
    assert guard.refuse_reason("http://news.example.com:8080/", 0, 0) is None
    assert guard.refuse_reason("http://a.other.org/", 0, 0) is None
    assert guard.refuse_reason("http://badexample.com/", 0, 0) == "out of scope"
    assert guard.refuse_reason("http://example.com.evil.net/", 0, 0) == "out of scope"
    assert guard.refuse_reason("http://unrelated.test/", 0, 0) == "out of scope"


def test_denied_domains_win_over_allowed() -> None:
    guard = _guard(allowed_domains=["example.com"], denied_domains=["ads.example.com"])
    assert guard.refuse_reason("http://www.example.com/", 0, 0) is None
    assert guard.refuse_reason("http://ads.example.com/x", 0, 0) == "out of scope"
    assert guard.refuse_reason("http://x.ads.example.com/x", 0, 0) == "out of scope"


def test_empty_allowed_domains_means_any_host() -> None:
    guard = _guard(denied_domains=["tracker.test"])
    assert guard.refuse_reason("http://anything.test/", 0, 0) is None
    assert guard.refuse_reason("http://tracker.test/", 0, 0) == "out of scope"
    assert guard.in_scope("[::1]:8080")


def test_url_without_host_is_refused() -> None:
    assert _guard().refuse_reason("not a url", 0, 0) == "invalid url"


def test_host_budget() -> None:
    guard = _guard(max_pages_per_host=3)
    url = "http://busy.test/page"
    assert guard.refuse_reason(url, 1, 0, host_fetched=2) is None
    assert guard.refuse_reason(url, 1, 0, host_fetched=3) == "host budget"
    assert guard.refuse_reason(url, 1, 0) is None


def test_local_ledger_counts_per_host_case_blind() -> None:
    ledger = LocalHostLedger({"A.test": 10})
    assert ledger.fetch_counts("a.test", ["a.test", "b.test"]) == {"a.test": 11, "b.test": 0}
    assert ledger.fetch_counts(None, ["A.TEST"]) == {"A.TEST": 11}
    assert ledger.note_robots_failure("a.test") == 1
    assert ledger.robots_failures("a.test") == 1 and ledger.robots_failures("b.test") == 0


def test_checks_work_on_canonical_urls() -> None:
    guard = _guard(allowed_domains=["Bücher.DE"], max_repeated_segments=1)
    assert guard.refuse_reason(canonicalize("http://www.bücher.de/a") or "", 0, 0) is None
    assert guard.refuse_reason("http://xn--bcher-kva.de/a", 0, 0) is None
    assert guard.refuse_reason("http://buecher.de/a", 0, 0) == "out of scope"
    dotted = canonicalize("http://xn--bcher-kva.de/a/./././b") or ""
    assert guard.refuse_reason(dotted, 0, 0) is None
    assert guard.refuse_reason("http://xn--bcher-kva.de/a/b/a", 0, 0) == "repeated path segments"


# --- registered domains and query variants (the hostile web's traps) -----------------------


def test_domain_host_budget_refuses_one_subdomain_too_many() -> None:
    guard = _guard(max_hosts_per_domain=3)
    ledger = LocalHostLedger()
    for n in range(3):
        ledger.fetch_counts(f"s{n}.trap.example.co.uk", [])
    keys = ["s9.trap.example.co.uk", "@example.co.uk", "#example.co.uk"]
    host, pages, hosts = (ledger.fetch_counts(None, keys)[key] for key in keys)
    assert (host, pages, hosts) == (0, 3, 3)
    assert guard.refuse_reason("http://s9.trap.example.co.uk/", 1, 0, host, pages, hosts) \
        == "domain budget"
    # a host already fetched from keeps going; another registered domain is not affected
    assert guard.refuse_reason("http://s1.trap.example.co.uk/x", 1, 0, 1, pages, hosts) is None
    assert guard.refuse_reason("http://other.co.uk/", 1, 0, 0, 0, 0) is None


def test_domain_page_budget_counts_every_host_of_the_domain() -> None:
    guard = _guard(max_pages_per_domain=4)
    ledger = LocalHostLedger({"a.example.com": 2, "b.example.com": 2})
    counts = ledger.fetch_counts(None, ["@example.com", "#example.com"])
    assert counts == {"@example.com": 4, "#example.com": 2}
    assert guard.refuse_reason("http://a.example.com/p", 1, 0, 2, 4, 2) == "domain budget"


def test_public_suffix_hosts_are_separate_domains() -> None:
    ledger = LocalHostLedger()
    ledger.fetch_counts("alice.github.io", [])
    assert ledger.fetch_counts(None, ["#bob.github.io", "#alice.github.io"]) == {
        "#bob.github.io": 0, "#alice.github.io": 1}


def test_query_variants_of_a_page_of_the_same_shape_are_capped() -> None:
    guard = _guard(max_query_variants=5)
    urls = [f"http://ids.test/item?id={n:x}" for n in range(20)]
    refused = [guard.refuse_reason(url, 2, pattern_run=1) for url in urls]
    assert refused[:5] == [None] * 5 and set(refused[5:]) == {"query variants"}
    assert guard.refuse_reason(urls[2], 2, pattern_run=1) is None  # one already admitted
    # the same URLs linked from a page of another shape (a list page) are not counted
    assert guard.refuse_reason(urls[10], 2, pattern_run=0) is None
    assert guard.refuse_reason("http://ids.test/item?id=1&page=2", 2, pattern_run=1) is None


@pytest.fixture(params=["local", "redis"])
def diverse_frontier(request, clock):
    if request.param == "local":
        return LocalFrontier(1000, 10, 0.5, clock=clock)
    return request.getfixturevalue("make_redis_frontier")(diversity=10, slack=0.5)


def test_domain_diversity_does_not_prefer_a_traps_fresh_subdomains(diverse_frontier) -> None:
    """Every pop of a trap's subdomain counts against its registered domain, so the normal
    site takes turns with the trap instead of waiting behind ever-new 'hosts'."""
    frontier = diverse_frontier
    tasks = [CrawlTask(url=f"http://s{n}.trap.test/", url_id=n, priority=1.0) for n in range(6)]
    tasks += [CrawlTask(url=f"http://normal.test/{n}", url_id=100 + n, priority=1.0)
              for n in range(3)]
    frontier.push_many(tasks)
    popped = []
    for _ in range(6):
        leased = frontier.pop()
        popped.append(registered_domain(leased.url.split("/")[2]))
        frontier.finish(leased)
    # by host, the six fresh subdomains would all come first (each a "new" host)
    assert popped[:2] == ["trap.test", "normal.test"]
