"""The HTML parser: metadata, text, links and their context, blocks, stats, robustness."""

from __future__ import annotations

import threading
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jlse.workers.parser import _WORD, ParsedPage, count_words, parse_html

PAGE_URL = "http://news.example.com/world/story-1.html"

DETAIL_PAGE = """<!DOCTYPE html>
<html><head>
  <title>  Rare  Birds Return to the Valley </title>
  <meta name="Description" content="Ornithologists report the return of rare birds.">
  <META NAME="keywords" CONTENT="birds, valley,  ornithology">
  <meta charset="utf-8">
  <style>body { color: red } .secret-style-rule {}</style>
  <script>var secretScriptText = "<a href='/from-script'>no</a>";</script>
</head>
<body>
  <div id="header"><a href="/">Home</a> | <a href="/world/">World</a></div>
  <div id="sidebar"><p>Sidebar note about unrelated gardening tips far away.</p></div>
  <article>
    <h1>Rare birds return</h1>
    <p>After decades of absence, the crested ibis has been seen nesting in the valley again.
       Researchers counted more than forty pairs along the river this spring, a number that
       surprised everyone who had followed the slow recovery of the species.</p>
    <p>The local survey team, led by a retired teacher, walked the same route every week and
       noted each sighting. <span>Read the <a href="../science/ibis-survey.html">full survey
       report <img src="chart.png" alt="nesting chart"></a> published by the team.</span></p>
    <h2>What comes next</h2>
    <p>Funding for the reserve has been extended for five more years, and volunteers will
       continue to monitor the nests through the summer months.</p>
  </article>
  <noscript>Please enable JavaScript to see comments</noscript>
  <template><p>template text hidden</p></template>
  <!-- a comment that is not text -->
  <input type="hidden" value="hidden-input-value">
  <div id="footer"><a href="/about">About us</a></div>
</body></html>"""

LIST_PAGE = """<html><head><title>World news - all stories</title></head><body>
<ul class="nav"><li><a href="/">Home</a></li><li><a href="/world/">World</a></li>
<li><a href="/sport/">Sport</a></li><li><a href="/science/">Science</a></li></ul>
<div class="list">
""" + "\n".join(
    f'<div class="item"><a href="/world/story-{i}.html">Story number {i} headline about events</a>'
    f" <span>May {i}</span></div>"
    for i in range(2, 40)
) + """
</div><p>Page 1 of 12</p></body></html>"""

CHINESE_PAGE = """<html><head><meta charset="gbk"><title>中文新闻网</title></head><body>
<h1>稀有鸟类回到山谷</h1>
<p>经过几十年的缺席，朱鹮再次在山谷中筑巢。研究人员今年春天沿河统计到四十多对。</p>
<p>当地调查小组每周都沿着同一条路线行走，记录每一次目击。<a href="/report.html">完整报告</a></p>
<p>Some English words appear too.</p>
</body></html>"""


def _links(page: ParsedPage) -> dict[str, object]:
    return {link.url: link for link in page.links}


# --- metadata and text --------------------------------------------------------------------


def test_title_and_meta() -> None:
    page = parse_html(DETAIL_PAGE, PAGE_URL)
    assert page.title == "Rare Birds Return to the Valley"
    assert page.description == "Ornithologists report the return of rare birds."
    assert page.keywords == "birds, valley, ornithology"
    assert page.url == PAGE_URL
    assert page.lang == "en"


def test_visible_text_excludes_scripts_styles_and_hidden_parts() -> None:
    text = parse_html(DETAIL_PAGE, PAGE_URL).text
    assert "crested ibis has been seen nesting" in text
    assert text.startswith("Rare Birds Return to the Valley")
    assert "full survey report" in text
    for hidden in ("secretScriptText", "secret-style-rule", "enable JavaScript", "template text",
                   "a comment", "hidden-input-value", "Ornithologists"):
        assert hidden not in text
    assert "  " not in text and "\n" not in text


def test_links_are_canonical_and_deduplicated() -> None:
    page = parse_html(LIST_PAGE + '<a href="/world/story-2.html#c">Comments</a>', PAGE_URL)
    urls = [link.url for link in page.links]
    assert urls[:2] == ["http://news.example.com/", "http://news.example.com/world/"]
    assert "http://news.example.com/world/story-39.html" in urls
    assert len(urls) == len(set(urls)) == 4 + 38
    story = _links(page)["http://news.example.com/world/story-2.html"]
    assert story.anchor_text == "Story number 2 headline about events Comments"


def test_anchor_text_includes_image_alt() -> None:
    links = _links(parse_html(DETAIL_PAGE, PAGE_URL))
    survey = links["http://news.example.com/science/ibis-survey.html"]
    assert survey.anchor_text == "full survey report nesting chart"
    assert "http://news.example.com/from-script" not in links


def test_non_http_links_are_dropped_and_area_links_kept() -> None:
    html = """<body><a href="javascript:void(0)">js</a><a href="mailto:a@b.c">mail</a>
    <a href="tel:123">call</a><a href="data:text/html,x">data</a><a href="ftp://f.test/x">ftp</a>
    <a href="">self</a><a name="anchor-without-href">named</a><a href=" http://ok.test/x ">ok</a>
    <map><area href="/region" alt="Region map"></map></body>"""
    links = _links(parse_html(html, PAGE_URL))
    assert set(links) == {PAGE_URL, "http://ok.test/x", "http://news.example.com/region"}
    assert links["http://news.example.com/region"].anchor_text == "Region map"
    assert links[PAGE_URL].anchor_text == "self"


def test_base_href_resolves_links() -> None:
    html = '<head><base href="/archive/2024/"></head><body><a href="item.html">Item</a></body>'
    page = parse_html(html, PAGE_URL)
    assert page.base_url == "http://news.example.com/archive/2024/"
    assert page.links[0].url == "http://news.example.com/archive/2024/item.html"
    bad_base = parse_html('<base href="javascript:x"><a href="item.html">I</a>', PAGE_URL)
    assert bad_base.base_url == PAGE_URL
    assert bad_base.links[0].url == "http://news.example.com/world/item.html"


def test_context_has_neighbouring_text_not_far_away_text() -> None:
    links = _links(parse_html(DETAIL_PAGE, PAGE_URL))
    context = links["http://news.example.com/science/ibis-survey.html"].context
    assert "published by the team" in context
    assert "walked the same route" in context
    assert "full survey report" not in context  # the anchor's own text
    assert "gardening" not in context  # another subtree of the page
    assert "Funding for the reserve" not in context


def test_context_distance_widens_the_context() -> None:
    html = "<div><p>outer words</p><div><span>near words <a href='/x'>link</a></span></div></div>"
    near = parse_html(html, PAGE_URL, context_distance=2).links[0].context
    wide = parse_html(html, PAGE_URL, context_distance=6).links[0].context
    none = parse_html(html, PAGE_URL, context_distance=0).links[0].context
    assert near == "near words"
    assert wide == "outer words near words"
    assert none == ""


def test_context_is_capped_and_keeps_the_nearest_text() -> None:
    before = " ".join(f"b{i}" for i in range(400))
    after = " ".join(f"a{i}" for i in range(400))
    html = f"<p>{before} <a href='/x'>link</a> {after}</p>"
    context = parse_html(html, PAGE_URL).links[0].context
    assert len(context) <= 400
    assert "b399 a0" in context  # the words right next to the link
    assert "b0 " not in context and "a399" not in context
    assert not context.startswith(" ") and context.split()[0].startswith("b")


def test_anchor_text_is_capped() -> None:
    html = "".join(f"<a href='/same'>{f'word{i} ' * 10}</a>" for i in range(20))
    page = parse_html(html, PAGE_URL)
    assert len(page.links) == 1
    assert len(page.links[0].anchor_text) <= 300


def test_max_links() -> None:
    html = "".join(f"<a href='/p{i}'>p{i}</a>" for i in range(50))
    page = parse_html(html, PAGE_URL, max_links=10)
    assert [link.url for link in page.links] == [f"http://news.example.com/p{i}" for i in range(10)]
    assert page.stats.n_links == 50
    assert page.notes == {"links_cut": 40}


def test_max_links_keeps_a_spread_over_hosts_in_document_order() -> None:
    own = [f"<a href='/p{i}'>p{i}</a>" for i in range(30)]
    html = "".join(own[:10]) + "<a href='//b.test/x'>b</a>" + "".join(own[10:]) + \
        "<a href='HTTP://C.test/'>the last link</a>"
    page = parse_html(html, PAGE_URL, max_links=5)
    assert [link.url for link in page.links] == [
        "http://news.example.com/p0", "http://news.example.com/p1", "http://news.example.com/p2",
        "http://b.test/x", "http://c.test/"]
    assert page.links[-1].anchor_text == "the last link"


def test_max_tags_cuts_the_text_before_lxml() -> None:
    html = "<p>start</p>" + "".join(f"<a href='/p{i}'>p{i}</a>" for i in range(100)) + "<p>end</p>"
    page = parse_html(html, PAGE_URL, max_tags=41)  # <p>, </p>, then 19 whole links and a half
    assert len(page.links) == 20 and "end" not in page.text
    assert page.notes == {"tags_cut": 1}
    assert parse_html(html, PAGE_URL).notes == {}


def test_nesting_past_libxml2s_limits_keeps_the_rest_of_the_page() -> None:
    for depth, note in ((300, {}), (5000, {"deep_nesting": 1})):
        html = ("<html><body>" + "<div>\n" * depth + "<p>deep <a href='/in'>in</a></p>"
                + "</div>" * depth + "<p>after <a href='/after'>after</a></p></body></html>")
        page = parse_html(html, PAGE_URL, max_tags=100_000)
        urls = [link.url for link in page.links]
        assert "http://news.example.com/after" in urls, depth
        assert "after" in page.text and page.notes == note


# --- blocks and stats ----------------------------------------------------------------------


def test_position_blocks() -> None:
    blocks = parse_html(DETAIL_PAGE, PAGE_URL).blocks
    assert blocks["title"] == "Rare Birds Return to the Valley"
    assert blocks["headings"] == "Rare birds return What comes next"
    assert blocks["meta"] == (
        "Ornithologists report the return of rare birds. birds, valley, ornithology"
    )
    assert "Home World" in blocks["anchor"] and "nesting chart" in blocks["anchor"]
    assert "crested ibis" in blocks["body"]
    assert "Home" not in blocks["body"] and "What comes next" not in blocks["body"]


def test_stats_separate_detail_pages_from_list_pages() -> None:
    detail = parse_html(DETAIL_PAGE, PAGE_URL).stats
    listing = parse_html(LIST_PAGE, PAGE_URL).stats
    assert detail.n_links == 4 and listing.n_links == 42
    assert detail.n_link_words / detail.n_words < 0.1
    assert listing.n_link_words / listing.n_words > 0.6
    assert max(detail.text_blocks) >= 35  # a long paragraph
    assert max(listing.text_blocks) <= 5
    assert all(words >= 1 for words in detail.text_blocks + listing.text_blocks)


def test_stats_counts_on_a_small_page() -> None:
    html = "<body><p>one two <b>three</b> <a href='/x'>four five</a></p><div>six</div></body>"
    page = parse_html(html, PAGE_URL)
    assert page.stats.n_words == 6
    assert page.stats.n_link_words == 2
    assert page.stats.n_links == 1
    assert sorted(page.stats.text_blocks) == [1, 3]


def test_chinese_page() -> None:
    page = parse_html(CHINESE_PAGE, "http://cn.example.com/")
    assert page.lang == "zh"
    assert page.title == "中文新闻网"
    assert "朱鹮再次在山谷中筑巢" in page.text
    assert page.links[0].url == "http://cn.example.com/report.html"
    assert page.links[0].anchor_text == "完整报告"
    assert "记录每一次目击" in page.links[0].context
    english = parse_html("<p>Mostly English text with one word 中文 in it.</p>", PAGE_URL)
    assert english.lang == "en"


def test_count_words() -> None:
    assert count_words("Hello, world! It's 2024.") == 5
    assert count_words("中文分词") == 4
    assert count_words("jlse爬虫v2") == 4
    assert count_words("snake_case e-mail café") == 5
    assert count_words("  \n\t ") == 0
    assert count_words("") == 0


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_count_words_matches_its_definition(text: str) -> None:
    assert count_words(text) == len(_WORD.findall(text))


# --- robustness ----------------------------------------------------------------------------


def test_malformed_markup_still_yields_links() -> None:
    html = """<html><body><div><p>Unclosed paragraph <b>bold <i>italic
    <a href=/one>first link</a> <a href='/two'>second <a href="/three">third</a>
    <table><tr><td><a href=/four>four</td></tr> <p <a href="/five">five</a>
    </span></div></div></body></html> trailing <a href="/six">six"""
    urls = {link.url for link in parse_html(html, PAGE_URL).links}
    for name in ("one", "two", "three", "four", "six"):
        assert f"http://news.example.com/{name}" in urls


def test_svg_and_iframe_content_is_not_text() -> None:
    html = """<body><svg><title>Chart title</title><text>axis label</text></svg>
    <iframe src="/frame">fallback words</iframe><p>Real text</p></body>"""
    page = parse_html(html, PAGE_URL)
    assert page.title == ""
    assert page.text == "Real text"


def test_xhtml_with_encoding_declaration() -> None:
    xhtml = """<?xml version="1.0" encoding="ISO-8859-1"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Strict//EN"
  "http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd">
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Café menu</title></head>
<body><p>Crème brûlée <a href="dessert.html">desserts</a></p></body></html>"""
    page = parse_html(xhtml, PAGE_URL)
    assert page.title == "Café menu"
    assert page.links[0].url == "http://news.example.com/world/dessert.html"
    assert "Crème brûlée" in page.text


def test_empty_and_garbage_input_give_an_empty_page() -> None:
    for html in ("", "   \n ", "\x00\x00", "<?xml version='1.0'?>", "<!-- only a comment -->"):
        page = parse_html(html, PAGE_URL)
        assert page.title == "" and page.links == [] and page.text == ""
        assert set(page.blocks) == {"title", "headings", "body", "anchor", "meta"}
    assert parse_html(b"<a href='/x'>x</a>", PAGE_URL).links == []  # type: ignore[arg-type]


def test_nul_bytes_and_lone_surrogates() -> None:
    page = parse_html("<title>A\x00B</title><a href='/x\x00y'>l\ud800ink</a>", PAGE_URL)
    assert page.title == "AB"
    assert page.links[0].url == "http://news.example.com/xy"


def test_invalid_page_url_does_not_crash() -> None:
    page = parse_html("<a href='http://ok.test/'>ok</a><a href='rel'>rel</a>", "not a url")
    assert page.url == "not a url"
    assert [link.url for link in page.links] == ["http://ok.test/"]


def test_parsing_in_threads_gives_the_same_result() -> None:
    expected = parse_html(DETAIL_PAGE, PAGE_URL)
    results: list[ParsedPage] = []

    def parse_many() -> None:
        for _ in range(20):
            results.append(parse_html(DETAIL_PAGE, PAGE_URL))

    threads = [threading.Thread(target=parse_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 80 and all(result == expected for result in results)


def test_many_links_parse_in_linear_time() -> None:
    html = "<p>" + " ".join(f"word{i} <a href='/p{i}'>link {i}</a>" for i in range(4000)) + "</p>"
    started = time.perf_counter()
    page = parse_html(html, PAGE_URL, max_links=5000)
    elapsed = time.perf_counter() - started
    assert len(page.links) == 4000
    assert elapsed < 2.0  # a context read per link over the whole <p> would take far longer


FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check_page(page: ParsedPage) -> None:
    assert isinstance(page.text, str) and isinstance(page.title, str)
    assert all(link.url.startswith(("http://", "https://")) for link in page.links)
    assert len({link.url for link in page.links}) == len(page.links)
    assert page.lang in ("zh", "en")


@FUZZ
@given(st.text())
def test_fuzz_any_text(html: str) -> None:
    _check_page(parse_html(html, PAGE_URL))


_MUTATIONS = st.lists(
    st.tuples(
        st.sampled_from(["truncate", "delete", "insert", "bytes"]),
        st.floats(0, 1),
        st.sampled_from(["<", ">", '"', "'", "</a>", "<a href=", "&", "<!--", "<script>", "\x00"]),
        st.binary(max_size=40),
    ),
    min_size=1,
    max_size=8,
)


def _mutate(html: str, mutations: list) -> str:
    for kind, where, snippet, raw in mutations:
        at = int(where * len(html))
        if kind == "truncate":
            html = html[:at]
        elif kind == "delete":
            html = html[:at] + html[at + 1 :]
        elif kind == "insert":
            html = html[:at] + snippet + html[at:]
        else:
            html = html[:at] + raw.decode("latin-1") + html[at:]
    return html


@FUZZ
@given(st.sampled_from([DETAIL_PAGE, LIST_PAGE, CHINESE_PAGE]), _MUTATIONS)
def test_fuzz_mutated_real_pages(html: str, mutations: list) -> None:
    _check_page(parse_html(_mutate(html, mutations), PAGE_URL))
