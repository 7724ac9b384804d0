"""Pages per second of page classification on one core: tokenize, NB relevance, is_target.

Times are CPU time of this process (``time.process_time``), so other work on a shared machine
inflates them less than wall-clock time would.

Pages are synthetic but typical: ~15 KB of HTML (navigation, an article, related links, a
footer, inline script/style), text drawn at random from topic word lists so that no two pages
share clauses (the tokenizer's caches only help with the repeated navigation anchors, as on a
real site). The visible text is extracted with lxml before timing; parsing is not timed.

    .venv/bin/python benchmarks/bench_classify.py [--pages 300]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core: no BLAS threads

import argparse  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from lxml import etree, html  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jlse.models.naive_bayes import NaiveBayesTextClassifier  # noqa: E402
from jlse.models.page_stats import PageStats  # noqa: E402
from jlse.models.result_page import ResultPageClassifier  # noqa: E402
from jlse.models.tokenizer import prepare, tokenize  # noqa: E402

PAGE_BYTES = 15_000

ZH_TOPIC = ("手机 智能手机 屏幕 电池 续航 快充 处理器 芯片 摄像头 像素 夜景 拍照 系统 升级 内存 存储 "
            "版本 价格 旗舰 发布 评测 性能 游戏 流畅 信号 网络 指纹 解锁 充电 无线 折叠 铰链 华为 小米 "
            "苹果 三星 安卓 配置 参数 外观 机身 重量 厚度 散热 扬声器 耳机 蓝牙 双卡").split()
ZH_OTHER = ("红烧肉 做法 火锅 底料 辣椒 饺子 白菜 猪肉 调味 酱油 面条 鸡蛋 番茄 清蒸 火候 食材 厨房 "
            "足球 比赛 球队 球员 进球 裁判 点球 联赛 冠军 门将 射门 教练 防守 球迷 赛季 世界杯 主场 "
            "客场 旅游 景点 酒店 机票 天气 城市 新闻 政策 经济 市场 学校 学生 老师 考试").split()
ZH_COMMON = ("的 了 是 在 和 也 有 这 一个 我们 他们 可以 非常 已经 因为 所以 但是 如果 就 都 还 更 "
             "用户 表示 认为 发现 进行 目前 今年 最新 介绍 方面 问题 时间 情况 需要 提供 支持").split()
EN_TOPIC = ("phone smartphone screen display battery charging processor chip camera sensor night photo "
            "android update storage memory price flagship review performance gaming smooth signal "
            "network fingerprint unlock wireless foldable hinge samsung apple pixel specs design weight "
            "speaker bluetooth dual sim oled refresh rate handset mobile carrier unlocked").split()
EN_OTHER = ("recipe beef stew onion garlic bread dough flour sugar sauce tomato basil pasta chicken oven "
            "roast kitchen football match team striker goal referee penalty league season coach stadium "
            "fans keeper defence travel hotel flight weather city news policy market school students").split()
EN_COMMON = ("the a of and to in is that it for on with as was at by this from but not are have more "
             "users said new also about after their which will one all would there been year time people "
             "week first could other today report").split()


def _sentence(rng: random.Random, topic: list[str], common: list[str], zh: bool) -> str:
    words = [rng.choice(topic if rng.random() < 0.4 else common) for _ in range(rng.randint(6, 18))]
    if zh:
        clauses = ["".join(words[i : i + 4]) for i in range(0, len(words), 4)]
        return "，".join(clauses) + "。"
    return " ".join(words).capitalize() + "."


def make_page(rng: random.Random, topic: list[str], common: list[str], zh: bool) -> str:
    """~PAGE_BYTES of HTML: nav links, an article of paragraphs, related links, footer."""
    def link(n_words: int) -> str:
        words = [rng.choice(topic + common) for _ in range(n_words)]
        return f'<a href="/p/{rng.randrange(10**6)}.html">{("" if zh else " ").join(words)}</a>'

    nav = "".join(f"<li>{link(rng.randint(1, 3))}</li>" for _ in range(30))
    related = "".join(f"<li>{link(rng.randint(3, 6))}</li>" for _ in range(15))
    head = ("<head><meta charset='utf-8'><title>t</title><style>body{margin:0}.nav li{float:left}"
            "</style><script>var cfg={a:1,b:[1,2,3]};function f(){return cfg.a}</script></head>")
    paragraphs: list[str] = []
    while True:
        page = (f"<html>{head}<body><ul class='nav'>{nav}</ul><div class='article'>"
                f"{''.join(paragraphs)}</div><ul class='related'>{related}</ul>"
                f"<div class='footer'>Copyright 2024 {link(2)} {link(2)}</div></body></html>")
        if len(page.encode("utf-8")) >= PAGE_BYTES:
            return page
        sentences = "".join(_sentence(rng, topic, common, zh) for _ in range(rng.randint(2, 5)))
        paragraphs.append(f"<p>{sentences}</p>")


def text_and_stats(page: str) -> tuple[str, PageStats]:
    """Visible text and rough PageStats (CJK characters and Latin words count as words)."""
    tree = html.fromstring(page)
    etree.strip_elements(tree, "script", "style", with_tail=False)
    text = tree.text_content()
    link_text = " ".join(a.text_content() for a in tree.iter("a"))
    blocks = [_words(p.text_content()) for p in tree.iter("p")]
    return text, PageStats(_words(text), _words(link_text), len(list(tree.iter("a"))), blocks)


def _words(text: str) -> int:
    cjk = sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")
    return cjk + len(text.split())


def _pages(count: int, zh: bool, relevant: bool, seed: int) -> list[str]:
    rng = random.Random(seed)
    topic = (ZH_TOPIC if relevant else ZH_OTHER) if zh else (EN_TOPIC if relevant else EN_OTHER)
    common = ZH_COMMON if zh else EN_COMMON
    return [make_page(rng, topic, common, zh) for _ in range(count)]


def bench(language: str, n_pages: int, max_chars: int) -> None:
    zh = language == "zh"
    train = [text_and_stats(p)[0] for p in _pages(40, zh, True, 1) + _pages(40, zh, False, 2)]
    nb = NaiveBayesTextClassifier(max_chars=max_chars).fit(train, [1] * 40 + [0] * 40)
    detail = PageStats(2000, 200, 40, [300, 400, 500, 500, 10, 10])
    listing = PageStats(900, 750, 150, [5, 8, 3, 25, 10])
    svm = ResultPageClassifier().fit([detail, listing] * 5, [1, 0] * 5)

    half = n_pages // 2
    # two disjoint page sets, so relevance() does not find the pages tokenize() just cached
    token_pages = [text_and_stats(p)[0] for p in _pages(half, zh, True, 3) + _pages(half, zh, False, 4)]
    pages = [text_and_stats(p) for p in _pages(half, zh, True, 5) + _pages(half, zh, False, 6)]
    start = time.process_time()
    for text in token_pages:
        tokenize(text)
    tokenize_time = time.process_time() - start
    relevance_time = target_time = 0.0
    correct = 0
    for index, (text, stats) in enumerate(pages):
        start = time.process_time()
        score = nb.relevance(text)
        mid = time.process_time()
        svm.is_target(stats)
        relevance_time += mid - start
        target_time += time.process_time() - mid
        correct += (score > 0.5) == (index < half)
    chars = sum(len(text) for text, _ in pages) / len(pages)
    print(f"{language}: {len(pages)} pages of {PAGE_BYTES // 1000} KB HTML, {chars:.0f} text chars "
          f"each, NB max_chars={max_chars}; NB accuracy {correct / len(pages):.2f}")
    rows = [("tokenize (whole text)", tokenize_time), ("relevance (tokenizes)", relevance_time),
            ("is_target", target_time), ("relevance + is_target", relevance_time + target_time)]
    for name, seconds in rows:
        print(f"  {name:<22} {1000 * seconds / len(pages):6.2f} ms/page {len(pages) / seconds:7.0f} pages/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--max-chars", type=int, nargs="+", default=[20_000, 2_000, 1_000],
                        help="NaiveBayesTextClassifier max_chars values to measure")
    args = parser.parse_args()
    prepare(["预热 warm up"])  # load jieba's dictionary (and its array form) outside the timings
    for language in ("zh", "en"):
        for max_chars in args.max_chars:
            bench(language, args.pages, max_chars)


if __name__ == "__main__":
    main()
