"""HTML building blocks shared by every renderer, and a site's encoding/charset declaration."""

from __future__ import annotations

from html import escape

from jlse.sandbox.sites import SiteSpec

UTF8_META = '<meta charset="utf-8">'


def esc(text: str) -> str:
    return escape(text, quote=True)


def a(href: str, text: str, cls: str = "") -> str:
    cls_attr = f' class="{cls}"' if cls else ""
    return f'<a href="{esc(href)}"{cls_attr}>{esc(text)}</a>'


def img_a(href: str, src: str, alt: str) -> str:
    """An image link: its only text is the alt text (crawlers use it as the anchor)."""
    return f'<a href="{esc(href)}"><img src="{esc(src)}" alt="{esc(alt)}" width="120"></a>'


def ul(items: list[str], cls: str = "") -> str:
    cls_attr = f' class="{cls}"' if cls else ""
    return f"<ul{cls_attr}>" + "".join(f"<li>{item}</li>" for item in items) + "</ul>"


def paras(texts: list[str]) -> str:
    return "".join(f"<p>{esc(text)}</p>" for text in texts)


def declared_meta(spec: SiteSpec) -> str:
    """The ``<meta>`` charset declaration a site's pages carry (may be empty)."""
    if spec.declare in ("meta", "both"):
        return f'<meta charset="{spec.encoding}">'
    if spec.declare == "http-equiv":
        return (f'<meta http-equiv="Content-Type" '
                f'content="text/html; charset={spec.encoding}">')
    return ""


def content_type(spec: SiteSpec) -> str:
    """The Content-Type header of a site's pages: charset only when declared in the header."""
    if spec.declare in ("header", "both"):
        return f"text/html; charset={spec.encoding}"
    return "text/html"


def document(lang: str, title: str, head_meta: str, body: str, description: str = "",
             keywords: str = "") -> str:
    head = [head_meta, f"<title>{esc(title)}</title>"]
    if description:
        head.append(f'<meta name="description" content="{esc(description)}">')
    if keywords:
        head.append(f'<meta name="keywords" content="{esc(keywords)}">')
    head.append('<meta name="viewport" content="width=device-width, initial-scale=1">')
    return (f'<!DOCTYPE html>\n<html lang="{lang}">\n<head>\n' + "\n".join(h for h in head if h)
            + f"\n</head>\n<body>\n{body}\n</body>\n</html>\n")


def encode(spec: SiteSpec, html: str) -> bytes:
    """The page's bytes in the site's encoding; characters it lacks become numeric references."""
    return html.encode(spec.encoding, errors="xmlcharrefreplace")
