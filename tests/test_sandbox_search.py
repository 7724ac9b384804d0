"""The discovery layout of the sandbox web (a poorly linked long tail of small sites, site-level
truth) and its search engine (SearxNG's JSON API on ``search.test`` and on the server's own
address), tested over HTTP against the real server on loopback."""

from __future__ import annotations

import html
import json
import re
import time
from collections import Counter, defaultdict

import pytest
import requests
import tomllib
from sandbox_pages import decoded, host_of, links_of

from jlse.models.tokenizer import tokenize
from jlse.sandbox import SandboxServer, build_web
from jlse.sandbox.search_index import tokenize_texts
from jlse.sandbox.topicdir import _seeds
from jlse.sandbox.vocab import CRAWL_TOPICS, DISTRACTOR_TOPICS

TAG = re.compile(r"<[^>]*>")
ALL_TOPICS = CRAWL_TOPICS + DISTRACTOR_TOPICS
# The default web as measured before the discovery layout existed: it must never move.
DEFAULT_PAGES, DEFAULT_BYTES = 6723, 34_510_324


def indexable(web, url: str) -> bool:
    """What a search engine honouring robots.txt for ``*`` may index."""
    site = web.plan.by_host[host_of(url)]
    page = site.pages[url.removeprefix(site.base)]
    return site.spec.robots != "500" and (site.spec.robots == "404"
                                          or page.kind not in ("admin", "print"))


@pytest.fixture(scope="module")
def web(discovery_web):
    return discovery_web


@pytest.fixture(scope="module")
def server(web):
    """The discovery web served on loopback (its search index starts building at once)."""
    served = SandboxServer(web)
    served.start()
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture(scope="module")
def link_graph(web) -> dict[str, set[str]]:
    """Host -> hosts of other sites that link to it, from every rendered page."""
    in_links: dict[str, set[str]] = defaultdict(set)
    for truth in web.iter_truth():
        for target in links_of(web, truth.url):
            if host_of(target) != truth.site:
                in_links[host_of(target)].add(truth.site)
    return in_links


def search(server, q: str, direct: bool = False, path: str = "/search", timeout: float = 60,
           **params) -> requests.Response:
    params = {"q": q, "format": "json", **params}
    if direct:
        return requests.get(f"{server.proxy_url}{path}", params=params, timeout=timeout)
    return requests.get(f"http://search.test{path}", params=params, timeout=timeout,
                        proxies={"http": server.proxy_url})


def all_results(server, q: str) -> list[str]:
    urls: list[str] = []
    for pageno in range(1, 100):
        answer = search(server, q, pageno=pageno).json()
        urls += [hit["url"] for hit in answer["results"]]
        if not answer["results"]:
            return urls
    raise AssertionError(f"{q}: more than 99 pages of results")


# --- the layout ---

def test_default_web_is_unchanged(sandbox_web, web):
    default = sandbox_web
    assert not default.discovery and not default.plan.extra_links
    assert default.n_pages == DEFAULT_PAGES
    assert sum(len(default.page_bytes(t.url)) for t in default.iter_truth()) == DEFAULT_BYTES
    assert build_web(discovery=False).plan.extra_links == {}
    # the discovery web keeps every default page, seed and hub page as it was
    assert list(default.iter_truth()) == list(web.iter_truth())[:DEFAULT_PAGES]
    for topic in default.topics:
        assert _seeds(default, topic) == _seeds(web, topic)
    for hub in default.plan.hubs:
        for path in list(hub.pages)[:5]:
            assert default.page_bytes(hub.url(path)) == web.page_bytes(hub.url(path))


def test_long_tail_sites_and_site_truth(web, tmp_path):
    truths = web.site_truth()
    tail = [truth for truth in truths.values() if truth.longtail]
    for topic in ALL_TOPICS:
        sites = [truth for truth in tail if web.plan.by_host[truth.site].spec.topic == topic]
        assert 20 <= len(sites) <= 30, topic
        assert {truth.lang for truth in sites} == {"en", "zh"}
        assert all(10 <= truth.n_pages <= 30 and truth.topic == topic for truth in sites)
    mixed = [truth for truth in tail if truth.share < 1]
    assert 0.08 <= len(mixed) / len(tail) <= 0.25
    assert all(0.5 < truth.share < 0.8 for truth in mixed)
    assert sum(truth.n_pages for truth in truths.values()) == web.n_pages
    assert len(list(web.iter_truth())) == web.n_pages > DEFAULT_PAGES + 2000

    site = web.plan.by_host[mixed[0].site]
    minority = site.spec.mix_topic
    pages = [t for t in web.iter_truth() if t.site == site.host and t.topic == minority]
    assert pages and any(t.is_target for t in pages)
    head = web.page_bytes(pages[0].url).decode(site.spec.encoding)
    assert site.language.topics[minority].label in head  # a minority page speaks its topic
    assert web.is_relevant_site(site.host, site.spec.topic)
    assert not web.is_relevant_site(site.host, minority)
    assert web.is_relevant_site("http://mobile-insight.test/p/1.html", "phones")
    assert truths["mobile-insight.test"].share == 1.0 and truths["daohang.test"].topic == "hub"
    assert not web.is_relevant_site("nowhere.test", "phones")

    assert len(web.write_truth(tmp_path / "t.jsonl").read_text("utf-8").splitlines()) == \
        web.n_pages
    rows = [json.loads(line) for line in
            web.write_site_truth(tmp_path / "s.jsonl").read_text("utf-8").splitlines()]
    assert len(rows) == len(web.sites)
    assert set(rows[0]) == {"site", "topic", "share", "n_pages", "lang", "longtail"}


def test_long_tail_is_poorly_linked(web, link_graph):
    truths = web.site_truth()
    tail = {host for host, truth in truths.items() if truth.longtail}
    for topic in ALL_TOPICS:
        of_topic = [h for h in tail if truths[h].topic == topic]
        from_known = [h for h in of_topic if any(not truths[s].longtail for s in link_graph[h])]
        assert 1 <= len(from_known) <= 2, (topic, from_known)
        seed_links = {host_of(link) for seed in _seeds(web, topic)
                      for link in links_of(web, seed)} & tail
        assert len(seed_links) <= 2 and all(truths[h].topic == topic for h in seed_links)
    orphans = [h for h in tail if not link_graph[h]]
    assert 0.2 * len(tail) <= len(orphans) <= 0.4 * len(tail)
    pairs = [(truths[source].topic, truths[h].topic) for h in tail for source in link_graph[h]
             if source in tail]
    same = sum(a == b for a, b in pairs)
    assert 0.65 < same / len(pairs) < 0.95  # mostly their own topic, sometimes another


def test_keywords_only_topic_dir(web, tmp_path):
    out = web.write_topic_dir("cameras", tmp_path / "cameras", keywords_only=True)
    assert sorted(p.name for p in out.iterdir()) == ["seeds.txt", "topic.toml"]
    assert (out / "seeds.txt").read_text("utf-8").split() == _seeds(web, "cameras")
    assert "数码相机" in tomllib.loads((out / "topic.toml").read_text("utf-8"))["keywords"]


def test_index_tokens_are_the_tokenizers(web):
    urls = [truth.url for truth in web.iter_truth()][::97]  # Chinese pages included
    texts = [html.unescape(TAG.sub(" ", decoded(web, url))) for url in urls]
    texts += ["5G手机，拍照很好", "Café ©2024 手機 ＡＢＣ", "", "的了"]
    for tokens, text in zip(tokenize_texts(texts), texts, strict=True):
        assert Counter(tokens) == Counter(tokenize(text))


# --- the search engine ---

@pytest.mark.parametrize("topic, query", [
    ("phones", "smartphone"), ("cameras", "mirrorless camera"), ("laptops", "laptop"),
    ("phones", "智能手机"), ("cooking", "recipe"), ("finance", "stocks")])
def test_keyword_search_finds_the_topic(server, web, topic, query):
    answer = search(server, query).json()
    assert answer["query"] == query and answer["number_of_results"] > 10
    hits = answer["results"]
    assert len(hits) == 10 and all(hit["engine"] == "sandbox" for hit in hits)
    assert all(hit["title"] and 0 < len(hit["content"]) <= 202 for hit in hits)
    assert sum(web.truth(hit["url"]).topic == topic for hit in hits) >= 8
    ranked = web.search_engine.ranked(query)
    index = web.search_engine.index()
    assert all(indexable(web, index.urls[doc]) for doc, _score in ranked)
    assert len({host_of(hit["url"]) for hit in hits}) >= 2


def test_link_query_gives_the_true_in_links(server, web, link_graph):
    tail = [h for h, truth in web.site_truth().items()
            if truth.longtail and len(link_graph[h]) >= 2]
    target = f"http://{min(tail, key=lambda h: (len(link_graph[h]), h))}/"
    expected = {t.url for t in web.iter_truth() if t.url != target and indexable(web, t.url)
                and target in links_of(web, t.url)}
    found = all_results(server, f"link:{target}")
    assert len(found) == len(set(found)) and set(found) == expected
    same_site = [host_of(url) == host_of(target) for url in found]
    assert same_site == sorted(same_site) and not same_site[0]  # other sites first
    assert all_results(server, f"link:{target.upper().removesuffix('/')}") == found
    assert search(server, "link:http://nowhere.test/").json()["results"] == []


def test_related_query_gives_other_sites_of_the_topic(server, web):
    for host in ("lens-and-light.test", "shouji-zhijia.test"):
        site = web.plan.by_host[host]
        url = site.detail_url(site.by_category[0][0])
        hits = search(server, f"related:{url}").json()["results"]
        assert len(hits) == 10 and all(host_of(hit["url"]) != host for hit in hits)
        assert sum(web.truth(hit["url"]).topic == site.spec.topic for hit in hits) >= 8
    answer = search(server, "related:http://nowhere.test/x.html").json()
    assert answer["results"] == [] and answer["number_of_results"] == 0


def test_paging(server, web):
    first, second = (search(server, "laptop", pageno=n).json() for n in (1, 2))
    total = first["number_of_results"]
    assert second["number_of_results"] == total > 20
    urls = [hit["url"] for hit in first["results"] + second["results"]]
    index = web.search_engine.index()
    assert urls == [index.urls[doc] for doc, _score in web.search_engine.ranked("laptop")[:20]]
    assert [hit["positions"] for hit in second["results"]] == [[n] for n in range(11, 21)]
    last = -(-total // 10)
    assert len(search(server, "laptop", pageno=last).json()["results"]) == total - 10 * (last - 1)
    beyond = search(server, "laptop", pageno=last + 1).json()
    assert beyond["results"] == [] and beyond["number_of_results"] == total


def test_direct_and_search_test_answer_alike(server):
    n_logged = len(server.search_log())
    via_proxy = search(server, "digital camera").json()
    assert search(server, "digital camera", direct=True).json() == via_proxy
    for host in (f"localhost:{server.port}", f"[::1]:{server.port}"):
        direct = requests.get(f"{server.proxy_url}/search", headers={"Host": host}, timeout=60,
                              params={"q": "digital camera", "format": "json"})
        assert direct.json() == via_proxy
    page = search(server, "digital camera", format="html")
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert via_proxy["results"][0]["url"] in html.unescape(page.text)
    logged = server.search_log()[n_logged:]
    assert [entry.host for entry in logged] == [
        "search.test", "127.0.0.1", "localhost", "[::1]", "search.test"]
    assert all(entry.path.startswith("/search?q=digital+camera") for entry in logged)
    assert requests.get(f"{server.proxy_url}/", timeout=10).status_code == 200
    assert requests.get(f"{server.proxy_url}/other", timeout=10).status_code == 404
    assert search(server, "  ").status_code == 400
    assert search(server, "laptop", pageno="0").status_code == 400


@pytest.mark.parametrize("direct", [False, True])
def test_fault_modes(server, direct):
    def fault(mode: str, q: str = f"camera {direct}", **params) -> requests.Response:
        return search(server, q, direct, f"/fault/{mode}/search", **params)

    assert fault("500").status_code == fault("500").status_code == 500
    assert fault("500once").status_code == 500
    assert fault("500once").json()["number_of_results"] > 0
    assert fault("500once", q=f"lens {direct}").status_code == 500
    page = fault("html")
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    broken = fault("badjson")
    assert broken.status_code == 200 and broken.headers["Content-Type"] == "application/json"
    with pytest.raises(ValueError):
        json.loads(broken.content)
    empty = fault("empty").json()
    assert empty["results"] == [] and empty["number_of_results"] == 0
    started = time.monotonic()
    assert fault("slow", delay="0.3").json()["results"]
    assert time.monotonic() - started >= 0.3
    with pytest.raises(requests.Timeout):  # 5 s by default
        search(server, "camera", direct, "/fault/slow/search", timeout=1)
    assert fault("bogus").status_code == 404


def test_the_default_layout_is_searchable_too():
    small = build_web(scale=0.1)
    with SandboxServer(small) as served:
        hits = search(served, "smartphone", direct=True).json()["results"]
    assert len(hits) == 10 and sum(small.truth(hit["url"]).topic == "phones" for hit in hits) >= 8
