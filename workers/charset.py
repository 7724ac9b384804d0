"""Turn an HTML body into text: find its character encoding, and sniff what the bytes are.

Sources are tried in order: byte-order mark → HTTP ``charset`` → ``<meta charset>`` /
``<meta http-equiv>`` / XML declaration in the first 4 KB → strict UTF-8 → statistical
detection (charset-normalizer; trusted for multi-byte and non-Latin codecs only) → cp1252.
The BOM comes first, as in the WHATWG Encoding Standard: a body that starts with a BOM is in
that encoding whatever the header claims. Labels are mapped the WHATWG way (latin-1/ascii →
cp1252, gbk/gb2312 → gb18030, big5 → big5hkscs) by ``w3lib.encoding.resolve_encoding``. A
declared codec that fails on much of the body is skipped rather than producing mojibake.
"""

from __future__ import annotations

import codecs
import logging
import re

from charset_normalizer import from_bytes
from w3lib.encoding import (
    html_body_declared_encoding,
    http_content_type_encoding,
    read_bom,
    resolve_encoding,
)

log = logging.getLogger(__name__)

FALLBACK_CODEC = "cp1252"
# A declared codec is rejected when more than this share of the non-ASCII bytes fail to decode.
MAX_BAD_SHARE = 0.2
DETECTION_SAMPLE = 64 * 1024  # bytes handed to charset detection (it is slow on big bodies)
BINARY_SAMPLE = 8 * 1024
MAX_CONTROL_SHARE = 0.03  # control bytes in a text body are rare; random bytes have ~10 %
# Python codecs that are not character encodings a web page can be written in.
_UNSAFE_CODECS = {"idna", "punycode", "raw-unicode-escape", "unicode-escape", "undefined"}
# Detection is trusted for multi-byte and non-Latin codecs only: for Latin text it cannot tell
# cp1252 from cp1250/cp1257/... reliably, and cp1252 (the WHATWG default) is the best guess.
_TRUSTED_DETECTIONS = frozenset(
    """
    utf-8 utf-16 utf-16-le utf-16-be utf-32 utf-32-le utf-32-be gb18030 big5hkscs cp950 cp932
    shift-jis euc-jp euc-jis-2004 cp949 euc-kr iso2022-jp iso2022-kr hz johab cp1251 koi8-r
    koi8-u cp866 iso8859-5 mac-cyrillic cp1253 iso8859-7 cp1255 iso8859-8 cp1256 iso8859-6 cp874
    """.split()
)
_CONTROL_BYTES = bytes([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20)])
_NON_ASCII_BYTES = bytes(range(0x80, 0x100))
_HTML_START = re.compile(
    rb"\s*<(?:!doctype\s+html|html|head|script|iframe|h1|div|font|table|a|style|title|b|body"
    rb"|br|p|!--)[\s>]",
    re.IGNORECASE,
)


def decode_html(body: bytes, content_type_header: str | None) -> tuple[str, str]:
    """Decode ``body`` to text; return ``(text, codec name)``. Never raises."""
    bom_codec, bom = read_bom(body)
    if bom_codec is not None and bom is not None:
        text = _decode_mostly(body[len(bom) :], bom_codec)
        if text is not None:
            return text, bom_codec
    for codec in (_header_codec(content_type_header), _meta_codec(body)):
        text = _decode_mostly(body, codec) if codec else None
        if text is not None:
            return text, codec
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    codec = _detected_codec(body)
    text = _decode_mostly(body, codec) if codec else None
    if text is not None:
        return text, codec
    return body.decode(FALLBACK_CODEC, errors="replace"), FALLBACK_CODEC


def looks_binary(body: bytes) -> bool:
    """True if ``body`` is binary data rather than text (control bytes, NULs)."""
    bom_codec, _ = read_bom(body)
    if bom_codec is not None and bom_codec.startswith("utf-"):
        return False  # UTF-16/32 text is full of NULs but is still text
    sample = body[:BINARY_SAMPLE]
    if not sample:
        return False
    n_control = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    return n_control > MAX_CONTROL_SHARE * len(sample)


def sniffs_as_html(body: bytes) -> bool:
    """True if a body served without a content type starts like an HTML document."""
    _, bom = read_bom(body)
    start = body[len(bom or b"") :][:1024]
    return _HTML_START.match(start) is not None


def codec_name(label: str | None) -> str | None:
    """The Python codec for an encoding label, WHATWG-mapped; None if unknown or unsafe."""
    if not label:
        return None
    try:
        name = resolve_encoding(label)
        info = codecs.lookup(name) if name else None
    except (LookupError, ValueError, TypeError):
        return None
    if info is None or not getattr(info, "_is_text_encoding", True):
        return None
    if info.name.replace("_", "-") in _UNSAFE_CODECS:
        return None
    return info.name


def _header_codec(content_type_header: str | None) -> str | None:
    try:
        return codec_name(http_content_type_encoding(content_type_header))
    except Exception:  # a malformed header is just "no declaration"
        log.debug("unreadable content-type header %r", content_type_header)
        return None


def _meta_codec(body: bytes) -> str | None:
    try:
        return codec_name(html_body_declared_encoding(body[:4096]))
    except Exception:  # a malformed document is just "no declaration"
        log.debug("unreadable <meta> charset declaration")
        return None


def _detected_codec(body: bytes) -> str | None:
    try:
        best = from_bytes(body[:DETECTION_SAMPLE]).best()
    except Exception:  # detection is a heuristic; any failure means "unknown"
        log.debug("charset detection failed", exc_info=True)
        return None
    codec = codec_name(best.encoding) if best is not None else None
    if codec is None or codec.replace("_", "-") not in _TRUSTED_DETECTIONS:
        return None  # falls back to cp1252
    return codec


def _decode_mostly(body: bytes, codec: str) -> str | None:
    """``body`` decoded with ``codec`` if that works for nearly all of it, else None."""
    try:
        return body.decode(codec)
    except UnicodeDecodeError:
        pass
    except (LookupError, ValueError, TypeError):
        return None
    try:
        text = body.decode(codec, errors="replace")
    except (LookupError, ValueError, TypeError):
        return None
    n_bad = text.count("\ufffd")
    n_non_ascii = len(body) - len(body.translate(None, _NON_ASCII_BYTES))
    if n_bad > MAX_BAD_SHARE * max(n_non_ascii, 1):
        return None
    return text
