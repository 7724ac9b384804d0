"""The sandbox web: determinism, size, truth, encodings, robots, traps, redirects, faults, the
proxy server and topic directories. HTTP goes through the session's loopback ``sandbox`` server.
"""

from __future__ import annotations

import html
import json
import random
import re
import socket
import threading
import time
import uuid
import zlib
from collections import defaultdict
from urllib.parse import urljoin, urlsplit

import pytest
import requests
import tomllib
from protego import Protego
from sandbox_pages import decoded, host_of, links_of

from jlse.sandbox import SandboxServer, build_web
from jlse.sandbox.fault_encodings import codec_of
from jlse.sandbox.faults import ENCODING_SAMPLES
from jlse.settings import load_settings


@pytest.fixture()
def get(sandbox):
    def fetch(url: str, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", 10)
        return requests.get(url, proxies={"http": sandbox.proxy_url}, **kwargs)

    return fetch


# --- the web as data ---

def test_same_seed_same_web_other_seed_other_web():
    first, second, other = build_web(seed=7), build_web(seed=7), build_web(seed=8)
    assert list(first.iter_truth()) == list(second.iter_truth())
    urls = random.Random(1).sample([t.url for t in first.iter_truth()], 40)
    assert all(first.page_bytes(u) == second.page_bytes(u) for u in urls)
    home = "http://mobile-insight.test/"
    assert first.page_bytes(home) != other.page_bytes(home)


def test_size_topics_and_languages(sandbox_web):
    web = sandbox_web
    assert len(web.sites) >= 30 and web.topics == ["phones", "cameras", "laptops"]
    truths = list(web.iter_truth())
    assert len(truths) == web.n_pages >= 5000
    assert sum(t.crawlable for t in truths) >= 5000
    for topic in web.topics:
        relevant = [t for t in truths if t.topic == topic]
        assert len(relevant) >= 300
        assert {t.lang for t in relevant} == {"en", "zh"}
        assert sum(t.is_target for t in relevant) >= 200
    assert len({t.topic for t in truths} - set(web.topics) - {"hub"}) >= 4
    assert sum(web.plan.by_host[h].spec.kind == "hub" for h in web.sites) == 5


def test_scale_multiplies_pages_and_builds_fast(sandbox_web):
    started = time.monotonic()
    big = build_web(scale=4)
    assert time.monotonic() - started < 5
    assert 3.5 * sandbox_web.n_pages < big.n_pages < 4.5 * sandbox_web.n_pages


def test_truth_records(sandbox_web, tmp_path):
    web = sandbox_web
    site = web.plan.by_host["mobile-insight.test"]
    detail = web.truth(site.detail_url(next(iter(site.items))))
    listing = web.truth(site.list_url(0))
    assert detail.is_target and detail.topic == "phones" and detail.lang == "en"
    assert not listing.is_target and web.is_relevant(listing.url, "phones")
    assert not web.is_relevant(listing.url, "cameras")
    assert web.truth("http://mobile-insight.test/calendar/2024/05") is None
    assert web.truth("http://nowhere.test/") is None
    assert not web.truth("http://mobile-insight.test/admin/").crawlable
    assert not web.truth("http://matchday.test/").crawlable  # robots.txt answers 500
    assert not web.truth("http://laptop-guide.test/").crawlable  # Disallow: / for jlse
    lines = web.write_truth(tmp_path / "truth.jsonl").read_text("utf-8").splitlines()
    assert len(lines) == web.n_pages
    assert set(json.loads(lines[0])) == {"url", "site", "topic", "target", "lang", "crawlable"}


def test_detail_pages_are_text_list_pages_are_links(sandbox_web):
    web = sandbox_web
    site = web.plan.by_host["mobile-insight.test"]
    detail = web.page_bytes(site.detail_url(site.by_category[0][0])).decode()
    listing = web.page_bytes(site.list_url(0)).decode()
    longest_block = max(len(p) for p in re.findall(r"<p>(.*?)</p>", detail))
    assert longest_block > 300
    assert detail.count("<a ") + 10 < listing.count("<a ")
    assert 'class="next">Next page</a>' in listing and 'alt="' in listing
    sizes = [len(web.page_bytes(site.detail_url(i))) for i in site.by_category[1]]
    assert 3000 < sorted(sizes)[len(sizes) // 2] < 30000


def test_chinese_text_is_made_of_words(sandbox_web):
    import jieba

    web = sandbox_web
    site = web.plan.by_host["shouji-zhijia.test"]
    text = decoded(web, site.detail_url(site.by_category[0][0]))
    paragraph = max(re.findall(r"<p>(.*?)</p>", text), key=len)
    tokens = [t for t in jieba.lcut(paragraph) if re.fullmatch(r"\w+", t)]
    assert sum(len(t) > 1 for t in tokens) / len(tokens) > 0.6
    assert {"手机", "价格", "评测", "屏幕"} & set(jieba.lcut(text))


def test_delayed_benefit_sites_are_reached_only_through_irrelevant_pages(sandbox_web):
    web = sandbox_web
    in_links: dict[str, set[str]] = defaultdict(set)  # host -> topics of linking pages
    for truth in web.iter_truth():
        if truth.topic in web.topics or truth.topic == "hub":
            for target in links_of(web, truth.url):
                if host_of(target) != truth.site:
                    in_links[host_of(target)].add(truth.topic)
    for topic in web.topics:
        hidden = [h for h in web.sites if web.truth(f"http://{h}/").topic == topic
                  and topic not in in_links[h]]
        assert hidden, f"no {topic} site is reached only through irrelevant pages"
        for host in hidden:
            assert "hub" in in_links[host]
            assert web.truth(f"http://{host}/").crawlable


# --- encodings ---

def test_fault_encoding_pages_decode_to_their_phrase(get):
    for name, phrase in ENCODING_SAMPLES.items():
        response = get(f"http://faults.test/enc/{name}")
        body, codec = response.content, codec_of(name)
        header = response.headers["Content-Type"]
        assert (f"charset={codec}" in header) == name.endswith("-header"), name
        assert (b"charset=" in body[:300]) == name.endswith("-meta"), name
        assert body.startswith(b"\xef\xbb\xbf") == (name == "utf8-bom")
        text = body.decode("utf-8-sig" if name == "utf8-bom" else codec)
        assert phrase in text and len(body) > 2000, name
        if codec not in ("utf-8", "iso-8859-1"):
            with pytest.raises(UnicodeDecodeError):
                body.decode("utf-8")


def test_sites_declare_their_encoding_as_planned(get, sandbox_web):
    seen = set()
    for host in sandbox_web.sites:
        spec = sandbox_web.plan.by_host[host].spec
        response = get(f"http://{host}/")
        head = response.content[:400].decode("latin-1")
        in_header = f"charset={spec.encoding}" in response.headers["Content-Type"]
        assert in_header == (spec.declare in ("header", "both")), host
        assert (f'<meta charset="{spec.encoding}">' in head) == (spec.declare in ("meta", "both"))
        assert ("http-equiv" in head) == (spec.declare == "http-equiv"), host
        assert spec.name in response.content.decode(spec.encoding), host
        seen.add((spec.encoding, spec.declare))
    required = {("utf-8", "header"), ("gbk", "header"), ("gb18030", "meta"), ("gbk", "none"),
                ("big5", "http-equiv"), ("iso-8859-1", "header"), ("utf-8", "none")}
    assert required <= seen
    latin = sandbox_web.plan.by_host["pixel-journal.test"]
    text = "".join(decoded(sandbox_web, latin.detail_url(i)) for i in latin.by_category[0])
    assert "café" in text and "naïve" in text


# --- robots.txt ---

def test_robots_txt_variants(get, sandbox_web):
    web = sandbox_web
    statuses = {}
    for host in web.sites:
        response = get(f"http://{host}/robots.txt")
        statuses[host] = response.status_code
        if response.status_code == 200:
            assert response.text == web.robots_rules(host)
    assert statuses["handset-lab.test"] == 404 and statuses["matchday.test"] == 500
    assert web.robots_rules("matchday.test") is None
    blocked = Protego.parse(web.robots_rules("laptop-guide.test"))
    assert not blocked.can_fetch("http://laptop-guide.test/", "jlse/0.1 (+https://x)")
    assert blocked.can_fetch("http://laptop-guide.test/", "otherbot")
    assert Protego.parse(web.robots_rules("snapshot-mini.test")).crawl_delay("jlse") == 1
    assert sum(1 for t in web.iter_truth() if t.site == "snapshot-mini.test") <= 30
    rules = Protego.parse(web.robots_rules("mobile-insight.test"))
    assert not rules.can_fetch("http://mobile-insight.test/admin/", "jlse")
    assert 'href="/admin/"' in web.page_bytes("http://mobile-insight.test/").decode()
    printable = [t for t in web.iter_truth() if "/print/" in t.url]
    assert printable and not printable[0].crawlable


def test_robots_hosts(get):
    assert get("http://robots-404.test/robots.txt").status_code == 404
    assert get("http://robots-500.test/robots.txt").status_code == 500
    assert "Crawl-delay: 2" in get("http://robots-delay.test/robots.txt").text
    moved = get("http://robots-redirect.test/robots.txt")
    assert moved.history[0].status_code == 301 and "Disallow: /blocked/" in moved.text
    assert get("http://robots-404.test/page/3.html").status_code == 200
    with pytest.raises(requests.exceptions.ReadTimeout):
        get("http://robots-hang.test/robots.txt", timeout=0.5)


def test_a_delay_is_answered_and_a_client_that_leaves_frees_its_thread(sandbox_web):
    """The server waits out a response's delay (latency here) and answers; a client that
    gives up on a robots.txt that never answers ends that wait (no thread per abandoned
    request: a link farm of dead hosts would leave thousands)."""
    with SandboxServer(sandbox_web, latency=0.0) as server:
        proxies = {"http": server.proxy_url}
        server.set_latency(1.2)
        started = time.monotonic()
        assert requests.get("http://normal.hostile.test/", proxies=proxies,
                            timeout=10).status_code == 200
        assert 1.2 <= time.monotonic() - started < 5
        server.set_latency(0.0)
        before = threading.active_count()
        with pytest.raises(requests.exceptions.ReadTimeout):
            requests.get("http://dead-robots-7.test/robots.txt", proxies=proxies, timeout=0.5)
        deadline = time.monotonic() + 5
        while threading.active_count() > before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert threading.active_count() <= before


# --- traps and redirects ---

def test_spider_traps_never_end(get, sandbox_web):
    url, seen = "http://mobile-insight.test/calendar/2024/05", set()
    for _ in range(30):
        seen.add(url)
        page = get(url)
        assert page.status_code == 200 and sandbox_web.is_trap(url)
        url = urljoin(url, re.findall(r'href="(/calendar/[^"]+)"', page.text)[-1])
    assert len(seen) == 30 and "2026/11" in url
    url = "http://lens-and-light.test/tree/a/"
    for step in range(20):
        assert get(url).status_code == 200
        url = urljoin(url, "ab"[step % 2] + "/")
    assert len(urlsplit(url).path.strip("/").split("/")) == 22 and sandbox_web.is_trap(url)
    url, seen = "http://trip-diary.test/session/0.html?sid=x", set()
    for _ in range(20):
        seen.add(url)
        url = urljoin(url, html.unescape(re.findall(r'href="(/session/1[^"]+)"', get(url).text)[0]))
    assert len(seen) == 20


def test_site_redirects(get, sandbox, sandbox_web):
    site = sandbox_web.plan.by_host["mobile-insight.test"]
    item = next(iter(site.items))
    moved = get(f"http://mobile-insight.test/go/{item}")
    assert [r.status_code for r in moved.history] == [301] and moved.url == site.detail_url(item)
    chained = get(f"http://mobile-insight.test/r/3/{item}")
    assert len(chained.history) == 3 and chained.url == site.detail_url(item)
    session = requests.Session()
    session.max_redirects = 6
    with pytest.raises(requests.TooManyRedirects):
        session.get("http://lens-and-light.test/loop/a", proxies={"http": sandbox.proxy_url})


def test_fault_redirects(get):
    assert [r.status_code for r in get("http://faults.test/redirect/3").history] == [302] * 4
    for path, location in [("/redirect-private", "http://127.0.0.1:9/x"),
                           ("/redirect-metadata", "http://169.254.169.254/latest/meta-data/"),
                           ("/redirect-robots", "/private/secret.html"),
                           ("/redirect-loop/a", "/redirect-loop/b")]:
        response = get(f"http://faults.test{path}", allow_redirects=False)
        assert response.status_code == 302 and response.headers["Location"] == location
    relative = get("http://faults.test/redirect-relative", allow_redirects=False)
    assert relative.status_code == 301 and relative.headers["Location"] == "../ok.html"
    assert get("http://faults.test/redirect-relative").url == "http://faults.test/ok.html"


# --- faults.test ---

def test_fault_statuses_flaky_and_slow(get):
    assert get("http://faults.test/ok.html").text.count("<title>OK page</title>") == 1
    assert get("http://faults.test/status/418").status_code == 418
    assert get("http://faults.test/status/204").content == b""
    key = uuid.uuid4().hex
    assert [get(f"http://faults.test/flaky/{key}").status_code for _ in range(4)] == \
        [503, 503, 200, 200]
    started = time.monotonic()
    assert get("http://faults.test/slow?seconds=0.3").status_code == 200
    assert time.monotonic() - started >= 0.3
    for url in ("http://faults.test/hang", "http://bijiben-zhijia.test/hang.html"):
        with pytest.raises(requests.exceptions.ReadTimeout):
            get(url, timeout=0.5)
    assert get("http://fund-daily.test/error/1.html").status_code == 500
    assert get("http://fund-daily.test/missing/1.html").status_code == 404


def test_trickle_sends_one_byte_at_a_time(get):
    started = time.monotonic()
    with get("http://faults.test/trickle", stream=True) as response:
        assert response.headers["Content-Length"] == "120"  # headers come at once
        assert len(response.raw.read(2)) == 2
        assert 0.9 <= time.monotonic() - started < 5  # then the body, a byte per 0.5 s


def test_huge_binary_and_malformed_bodies(get):
    for path, chunked in (("/huge.html", False), ("/huge-nolength.html", True)):
        with get(f"http://faults.test{path}", stream=True) as response:
            assert ("Content-Length" not in response.headers) == chunked
            body = b"".join(response.iter_content(1 << 20))
        assert len(body) == 20 * 1024 * 1024 and body.endswith(b"</html>\n")
    binary = get("http://faults.test/binary.bin")
    assert binary.headers["Content-Type"] == "application/octet-stream"
    assert len(binary.content) == 1 << 20
    assert get("http://faults.test/image.png").content.startswith(b"\x89PNG\r\n\x1a\n")
    as_html = get("http://faults.test/binary-as-html")
    assert as_html.headers["Content-Type"] == "text/html" and len(as_html.content) == 100_000
    malformed = get("http://faults.test/malformed.html").content
    assert b"\x00" in malformed
    import lxml.html

    hrefs = {a.get("href") for a in lxml.html.fromstring(malformed).iter("a")}
    assert {"/ok.html", "/status/404", "/redirect/1"} <= hrefs and "/from-script.html" not in hrefs
    index = get("http://faults.test/links.html").text
    assert all(f'href="{path}"' in index for path in ("/gzip-bomb.html", "/enc/big5-none"))


def test_gzip_bomb_is_small_on_the_wire(get):
    with get("http://faults.test/gzip-bomb.html", stream=True) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        wire = response.raw.read(decode_content=False)
    assert len(wire) < 2 * 1024 * 1024
    inflater, total = zlib.decompressobj(31), 0
    for start in range(0, len(wire), 1 << 16):
        piece = wire[start:start + (1 << 16)]
        while piece:
            out = inflater.decompress(piece, 1 << 26)
            total += len(out)
            piece = inflater.unconsumed_tail
    assert inflater.eof and total == 1 << 30


# --- the server ---

def test_proxy_and_host_header_modes(get, sandbox):
    via_proxy = get("http://mobile-insight.test/")
    direct = requests.get(f"{sandbox.proxy_url}/", headers={"Host": "mobile-insight.test"},
                          timeout=10)
    assert via_proxy.status_code == direct.status_code == 200
    assert via_proxy.content == direct.content
    assert int(via_proxy.headers["Content-Length"]) == len(via_proxy.content)
    head = requests.head("http://mobile-insight.test/", proxies={"http": sandbox.proxy_url})
    assert head.headers["Content-Length"] == via_proxy.headers["Content-Length"]
    dead = get("http://no-such-site.test/")
    assert dead.status_code == 502 and "unknown host" in dead.text
    assert get("http://mobile-insight.test/static/img/1.png").headers["Content-Type"] == "image/png"
    with socket.create_connection(("127.0.0.1", sandbox.port), timeout=5) as conn:
        conn.sendall(b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n")
        assert conn.recv(100).startswith(b"HTTP/1.1 501")
    assert sandbox.base_url("a.test") == "http://a.test/"


def test_keep_alive_and_request_log(sandbox):
    sandbox.clear_log()
    session = requests.Session()
    session.headers["User-Agent"] = "jlse-test/1.0"
    proxies = {"http": sandbox.proxy_url}
    sizes = [len(session.get("http://recipe-box.test/", proxies=proxies).content),
             len(session.get("http://recipe-box.test/robots.txt", proxies=proxies).content)]
    session.get("http://nowhere.test/x?y=1", proxies=proxies)
    log = sandbox.log
    assert [(e.host, e.path, e.status) for e in log] == [
        ("recipe-box.test", "/", 200), ("recipe-box.test", "/robots.txt", 200),
        ("nowhere.test", "/x?y=1", 502)]
    assert [e.n_bytes for e in log[:2]] == sizes and log[0].user_agent == "jlse-test/1.0"
    assert log[0].t <= log[1].t <= log[2].t
    assert sandbox.request_count() == 3 and sandbox.request_count("recipe-box.test") == 2


def test_latency_and_prompt_stop(sandbox_web):
    server = SandboxServer(sandbox_web, latency=0.2)
    server.start()
    proxies = {"http": server.proxy_url}
    started = time.monotonic()
    requests.get("http://faults.test/ok.html", proxies=proxies, timeout=5)
    assert time.monotonic() - started >= 0.2
    outcome = []

    def hang() -> None:
        try:
            requests.get("http://faults.test/hang", proxies=proxies, timeout=30)
        except requests.RequestException as exc:
            outcome.append(exc)

    client = threading.Thread(target=hang)
    client.start()
    while server.request_count("faults.test") < 2:
        time.sleep(0.02)
    started = time.monotonic()
    server.stop()
    client.join(timeout=5)
    assert time.monotonic() - started < 3 and not client.is_alive() and outcome
    assert len(server.log) == 2


# --- topic directories ---

def test_topic_directory(sandbox_web, tmp_path):
    web, n = sandbox_web, 6
    out = web.write_topic_dir("laptops", tmp_path / "laptops", n_samples=n)
    seeds = (out / "seeds.txt").read_text("utf-8").split()
    assert len(seeds) == 6 and all(web.truth(url) for url in seeds)
    seed_topics = {web.truth(url).topic for url in seeds}
    assert seed_topics == {"laptops", "hub"}
    hidden = [h for h in web.sites if web.plan.by_host[h].spec.hidden
              and web.truth(f"http://{h}/").topic == "laptops"]
    assert hidden and not any(host_of(url) in hidden for url in seeds)
    toml = tomllib.loads((out / "topic.toml").read_text("utf-8"))
    assert set(toml) == {"name", "keywords"} and toml["name"] == "laptops"
    assert "laptop" in toml["keywords"] and "笔记本电脑" in toml["keywords"]
    assert load_settings(out / "topic.toml").keywords == toml["keywords"]
    for kind in ("relevant", "irrelevant", "target", "nontarget"):
        assert len(list((out / "samples" / kind).glob("*.html"))) == n
    anchors = [line.split("\t") for line in (out / "samples" / "anchors.tsv").read_text(
        "utf-8").splitlines()]
    labels = [row[0] for row in anchors]
    assert all(len(row) == 2 and row[1] for row in anchors)
    assert labels.count("relevant") == labels.count("irrelevant") == 3 * n
    served = "".join(decoded(web, t.url) for t in web.iter_truth()
                     if t.topic == "laptops" and t.is_target)
    for sample in (out / "samples" / "target").glob("*.html"):
        text = sample.read_text("utf-8")
        paragraph = max(re.findall(r"<p>(.*?)</p>", text), key=len)
        assert paragraph and paragraph not in served, sample.name
    with pytest.raises(ValueError):
        web.write_topic_dir("cooking", tmp_path / "cooking")
