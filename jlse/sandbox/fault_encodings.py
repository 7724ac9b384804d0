"""``faults.test/enc/<name>``: one HTML page per (codec, declaration) pair.

Each page holds ~2 KB of text in the codec's language, so detection has something to work on,
and a unique phrase (``ENCODING_SAMPLES``) that only a correct decoding reproduces.
"""

from __future__ import annotations

import random
from functools import cache

from jlse.sandbox import response as r
from jlse.sandbox.layout import esc
from jlse.sandbox.text import TextGen
from jlse.sandbox.vocab import LANGUAGES

CODECS = {"utf8": "utf-8", "gbk": "gbk", "gb18030": "gb18030", "big5": "big5",
          "latin1": "iso-8859-1"}

ENCODING_SAMPLES: dict[str, str] = {
    "utf8-header": "统一码页头声明的测试短语",
    "utf8-meta": "网页元标签声明编码的句子",
    "utf8-none": "没有任何声明的统一码文本",
    "utf8-bom": "字节顺序标记开头的页面",
    "gbk-header": "国标扩展页头声明的测试",
    "gbk-meta": "国标扩展元标签声明示例",
    "gbk-none": "未声明编码的国标扩展网页",
    "gb18030-header": "国家标准页头声明样本",
    "gb18030-meta": "国家标准元标签声明样本",
    "gb18030-none": "未声明的国家标准编码页面",
    "big5-header": "大五碼標頭宣告的測試",
    "big5-meta": "大五碼中繼標籤宣告範例",
    "big5-none": "沒有宣告編碼的大五碼網頁",
    "latin1-header": "Crème brûlée café naïve",
    "latin1-meta": "Façade déjà vu à la carte",
    "latin1-none": "Piñata jalapeño señor über",
}


def codec_of(name: str) -> str:
    """The Python codec a page is encoded with (``utf8-bom`` is UTF-8 with a BOM)."""
    return CODECS[name.split("-")[0]]


def _text(name: str, codec: str) -> str:
    rng = random.Random(f"enc|{name}")
    family = name.split("-")[0]
    if family == "latin1":
        language = LANGUAGES["en"]
        gen = TextGen(language, language.topics["cameras"], rng, accents=True)
    else:
        language = LANGUAGES["zh-Hant" if family == "big5" else "zh"]
        gen = TextGen(language, language.topics["phones"], rng)
    text = ""
    while len(text.encode(codec)) < 2048:
        text += f"<p>{esc(gen.paragraph(4))}</p>\n"
    return text


def _meta(name: str, codec: str) -> str:
    if not name.endswith("-meta"):
        return ""
    if name.startswith("big5"):
        return f'<meta http-equiv="Content-Type" content="text/html; charset={codec}">'
    return f'<meta charset="{codec}">'


@cache
def encoding_page(name: str) -> r.Response | None:
    """The response for ``/enc/<name>``, or None for an unknown name."""
    if name not in ENCODING_SAMPLES:
        return None
    codec = codec_of(name)
    html = (f"<!DOCTYPE html>\n<html><head>{_meta(name, codec)}<title>Encoding test {name}"
            f"</title></head>\n<body><h1>{esc(ENCODING_SAMPLES[name])}</h1>\n{_text(name, codec)}"
            "</body></html>\n")
    body = html.encode(codec)  # strict: every page must be exactly representable
    if name == "utf8-bom":
        body = b"\xef\xbb\xbf" + body
    content_type = f"text/html; charset={codec}" if name.endswith("-header") else "text/html"
    return r.Response(200, body, content_type)
