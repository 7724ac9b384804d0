"""The fixed table of sites of the sandbox web: who they are, how they encode and what they hide."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SiteSpec:
    """One site. The seed decides its categories, items and text; this table decides the rest."""

    host: str
    name: str  # display name
    kind: str  # "topic" (a crawl topic), "distractor" or "hub"
    topic: str  # crawl topic, distractor topic, or "hub"
    script: str  # key of vocab.LANGUAGES: "en", "zh" or "zh-Hant"
    encoding: str  # Python codec of the bytes served
    declare: str = "header"  # header | meta | http-equiv | both | none
    robots: str = "normal"  # normal | 404 | 500 | jlse-blocked | crawl-delay
    url_style: str = "html"  # html | php | path | hub
    hidden: bool = False  # only hub pages link here: the delayed-benefit sites
    small: bool = False  # a fixed handful of pages, whatever the scale
    features: frozenset[str] = frozenset()  # traps, redirects and faults linked from its pages
    hub_kind: str = ""  # hubs only: "portal" or "directory"
    longtail: bool = False  # discovery layout only: a small site the seeds barely link to
    mix_topic: str = ""  # long-tail sites only: a minority topic some of its pages are about

    @property
    def crawlable(self) -> bool:
        """Whether robots.txt lets the ``jlse`` user agent fetch the site's pages at all."""
        return self.robots not in ("500", "jlse-blocked")


def _site(host: str, name: str, kind: str, topic: str, script: str, encoding: str = "utf-8",
          features: str = "", **options) -> SiteSpec:
    return SiteSpec(host, name, kind, topic, script, encoding,
                    features=frozenset(features.split()), **options)


SITES: tuple[SiteSpec, ...] = (
    # --- phones ---
    _site("mobile-insight.test", "Mobile Insight", "topic", "phones", "en",
          features="calendar go"),
    _site("shouji-zhijia.test", "手机之家", "topic", "phones", "zh", "gbk",
          features="session broken", url_style="php"),
    _site("handset-lab.test", "Handset Lab", "topic", "phones", "en", robots="404",
          url_style="path", hidden=True),
    _site("shouji-tw.test", "手機天地", "topic", "phones", "zh-Hant", "big5",
          declare="http-equiv"),
    # --- cameras ---
    _site("lens-and-light.test", "Lens and Light", "topic", "cameras", "en",
          features="tree chain loop", url_style="path"),
    _site("shuma-xiangji.test", "数码相机网", "topic", "cameras", "zh", "gb18030",
          declare="meta", features="slow go"),
    _site("pixel-journal.test", "Pixel Journal", "topic", "cameras", "en", "iso-8859-1",
          features="broken accents", url_style="php"),
    _site("xiangji-pindao.test", "相机频道", "topic", "cameras", "zh", "gbk", declare="none",
          hidden=True, url_style="path"),
    _site("snapshot-mini.test", "Snapshot Mini", "topic", "cameras", "en",
          robots="crawl-delay", small=True),
    # --- laptops ---
    _site("laptop-guide.test", "Laptop Guide", "topic", "laptops", "en", robots="jlse-blocked"),
    _site("bijiben-zhijia.test", "笔记本之家", "topic", "laptops", "zh", declare="both",
          features="hang errors"),
    _site("notebook-bench.test", "Notebook Bench", "topic", "laptops", "en",
          features="calendar go", url_style="php"),
    _site("diannao-pingce.test", "电脑评测室", "topic", "laptops", "zh", declare="none",
          hidden=True, url_style="path"),
    # --- distractors ---
    _site("recipe-box.test", "Recipe Box", "distractor", "cooking", "en", features="tree"),
    _site("meishi-tiandi.test", "美食天地", "distractor", "cooking", "zh", "gbk"),
    _site("kitchen-notes.test", "Kitchen Notes", "distractor", "cooking", "en", declare="meta",
          url_style="path"),
    _site("goal-report.test", "Goal Report", "distractor", "football", "en", url_style="php"),
    _site("zuqiu-zhoukan.test", "足球周刊", "distractor", "football", "zh"),
    _site("matchday.test", "Matchday", "distractor", "football", "en", robots="500"),
    _site("wander-atlas.test", "Wander Atlas", "distractor", "travel", "en", "iso-8859-1",
          declare="meta", features="accents", url_style="path"),
    _site("lvyou-zhinan.test", "旅游指南", "distractor", "travel", "zh", "gb18030"),
    _site("trip-diary.test", "Trip Diary", "distractor", "travel", "en", features="session"),
    _site("market-watch.test", "Market Watch", "distractor", "finance", "en", url_style="php"),
    _site("licai-zhoubao.test", "理财周报", "distractor", "finance", "zh", "gbk"),
    _site("fund-daily.test", "Fund Daily", "distractor", "finance", "en", features="broken"),
    # --- hubs: portals and directories, irrelevant themselves, linking to everything ---
    _site("portal-daily.test", "Portal Daily", "hub", "hub", "en", url_style="hub",
          features="calendar", hub_kind="portal"),
    _site("menhu-wang.test", "门户网", "hub", "hub", "zh", "gbk", url_style="hub",
          hub_kind="portal"),
    _site("web-directory.test", "Web Directory", "hub", "hub", "en", url_style="hub",
          hub_kind="directory"),
    _site("daohang.test", "网址导航", "hub", "hub", "zh", url_style="hub", hub_kind="directory"),
    _site("city-news.test", "City News", "hub", "hub", "en", url_style="hub",
          features="loop broken", hub_kind="portal"),
)
