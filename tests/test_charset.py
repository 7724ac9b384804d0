"""decode_html: every declaration source, the WHATWG label mapping, fall-through, fuzzing."""

from __future__ import annotations

import codecs
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jlse.workers.charset import codec_name, decode_html, looks_binary, sniffs_as_html

ZH_SIMPLIFIED = (
    "网络爬虫是一种按照一定的规则，自动地抓取万维网信息的程序或者脚本。聚焦爬虫根据主题相关性"
    "选择链接，优先访问与主题相关的网页。强化学习可以帮助爬虫预测链接的价值。"
)
ZH_TRADITIONAL = (
    "網路爬蟲是一種按照一定的規則，自動地抓取全球資訊網資訊的程式或者指令碼。聚焦爬蟲根據主題"
    "相關性選擇連結，優先存取與主題相關的網頁。強化學習可以幫助爬蟲預測連結的價值。"
)
FRENCH = (
    "Le robot d'indexation parcourt le Web de façon méthodique. Les pages déjà visitées sont "
    "mémorisées; l'évaluation des liens dépend du thème choisi. Où est le café? Très bien! "
)
SAMPLES = {  # name: (text, python codec used to write the page, codec expected back)
    "gbk": (ZH_SIMPLIFIED, "gbk", "gb18030"),
    "gb18030": (ZH_SIMPLIFIED + "𠀀", "gb18030", "gb18030"),  # 𠀀 needs 4-byte GB18030
    "big5": (ZH_TRADITIONAL, "big5", "big5hkscs"),
    "utf8": (ZH_SIMPLIFIED + FRENCH, "utf-8", "utf-8"),
    "latin1": (FRENCH, "latin-1", "cp1252"),
}
LABELS = {
    "gbk": "gbk",
    "gb18030": "gb18030",
    "big5": "big5",
    "utf8": "utf-8",
    "latin1": "iso-8859-1",
}


def page(text: str, meta: str = "", size: int = 2000) -> str:
    """An HTML page with about ``size`` bytes of ``text``, like the sandbox's /enc/ pages."""
    repeats = size // len(text.encode("utf-8")) + 1
    return f"<html><head>{meta}<title>t</title></head><body><p>{text * repeats}</p></body></html>"


@pytest.mark.parametrize("declared", ["header", "meta", "none"])
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_decodes_every_sample_encoding_however_declared(name: str, declared: str) -> None:
    text, write_codec, expected_codec = SAMPLES[name]
    label = LABELS[name]
    meta = f'<meta charset="{label}">' if declared == "meta" else ""
    source = page(text, meta)
    header = f"text/html; charset={label}" if declared == "header" else "text/html"
    decoded, codec = decode_html(source.encode(write_codec), header)
    assert decoded == source
    assert codec == expected_codec


def test_meta_http_equiv_declaration_is_read() -> None:
    source = page(
        ZH_SIMPLIFIED, '<meta http-equiv="Content-Type" content="text/html; charset=gb2312">'
    )
    assert decode_html(source.encode("gbk"), None) == (source, "gb18030")


def test_bom_wins_over_a_conflicting_header_and_is_stripped() -> None:
    body = codecs.BOM_UTF8 + "<p>café 爬虫</p>".encode()
    assert decode_html(body, "text/html; charset=iso-8859-1") == ("<p>café 爬虫</p>", "utf-8")


def test_utf16_bom_is_decoded() -> None:
    body = codecs.BOM_UTF16_LE + "<p>爬虫</p>".encode("utf-16-le")
    assert decode_html(body, "text/html") == ("<p>爬虫</p>", "utf-16-le")


def test_latin1_label_means_cp1252() -> None:
    text, codec = decode_html(b"<p>price \x80 5</p>", "text/html; charset=ISO-8859-1")
    assert (text, codec) == ("<p>price € 5</p>", "cp1252")


def test_wrong_declared_codec_falls_through_instead_of_mojibake() -> None:
    source = page(ZH_SIMPLIFIED)
    text, codec = decode_html(source.encode("gbk"), "text/html; charset=utf-8")
    assert (text, codec) == (source, "gb18030")


def test_mostly_valid_declared_codec_is_kept_with_replacements() -> None:
    body = page(ZH_SIMPLIFIED).encode("utf-8") + b"\xff"
    text, codec = decode_html(body, "text/html; charset=utf-8")
    assert codec == "utf-8"
    assert text.endswith("\ufffd") and ZH_SIMPLIFIED in text


@pytest.mark.parametrize("label", ["no-such-charset", "utf-7", "base64", "rot13", "undefined", ""])
def test_unknown_or_unsafe_labels_are_ignored(label: str) -> None:
    body = "<p>café</p>".encode()
    assert decode_html(body, f"text/html; charset={label}") == ("<p>café</p>", "utf-8")
    assert codec_name(label) is None


def test_undeclared_latin_text_falls_back_to_cp1252() -> None:
    source = page("Die Straße führt über die Brücke. Größere Städte, Müller und Schäfer. ")
    assert decode_html(source.encode("latin-1"), None) == (source, "cp1252")


def test_empty_body() -> None:
    assert decode_html(b"", None) == ("", "utf-8")


def test_looks_binary() -> None:
    assert looks_binary(os.urandom(4096))
    assert looks_binary(b"\x89PNG\r\n\x1a\n" + bytes(200))
    assert not looks_binary(page(ZH_SIMPLIFIED).encode("gbk"))
    assert not looks_binary(codecs.BOM_UTF16_LE + "<p>hello</p>".encode("utf-16-le"))
    assert not looks_binary(b"")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"<!DOCTYPE html><html></html>", True),
        (b"\n  <html lang=en>", True),
        (codecs.BOM_UTF8 + b"<HEAD><title>x</title>", True),
        (b"<!-- comment -->", True),
        (b"<p>para</p>", True),
        (b"%PDF-1.7", False),
        (b"plain text <html>", False),
        (b"<paragraph>", False),
        (b"", False),
    ],
)
def test_sniffs_as_html(body: bytes, expected: bool) -> None:
    assert sniffs_as_html(body) is expected


_LABEL = st.sampled_from(
    [
        "utf-8",
        "gbk",
        "big5",
        "latin-1",
        "utf-16",
        "utf-32",
        "shift_jis",
        "zlib",
        "hex",
        "idna",
        "x-user-defined",
        "utf-7",
        "\x00",
        "\ud800",
    ]
)


@settings(max_examples=150, deadline=None)
@given(body=st.binary(max_size=3000), header=st.one_of(st.none(), st.text(max_size=60)))
def test_fuzz_arbitrary_bytes_and_headers_never_raise(body: bytes, header: str | None) -> None:
    text, codec = decode_html(body, header)
    assert isinstance(text, str) and codec


@settings(max_examples=150, deadline=None)
@given(body=st.binary(max_size=2000), label=_LABEL, in_meta=st.booleans())
def test_fuzz_declared_labels_never_raise(body: bytes, label: str, in_meta: bool) -> None:
    if in_meta:
        body = f'<meta charset="{label}">'.encode("utf-8", "surrogatepass") + body
        header = "text/html"
    else:
        header = f"text/html; charset={label}"
    text, codec = decode_html(body, header)
    assert isinstance(text, str) and codecs.lookup(codec)
