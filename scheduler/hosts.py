"""Host names as browsers and resolvers read them: the one canonical form every check sees.

``canonical_host`` decodes %-escapes, applies IDNA (UTS #46, non-transitional, as browsers:
``faß.de`` is ``xn--fa-hia.de``, where IDNA 2003 made it ``fass.de``), lower-cases, drops one
trailing dot, and reads a name that ends in a number as an IPv4 address with the WHATWG URL
parser (``2130706433``, ``0x7f.1``, ``0177.0.0.1`` and ``127.1`` are all ``127.0.0.1``), as
resolvers and proxies do. A check made on the host as written could be passed by
``http://%31%32%37.0.0.1/`` or ``http://loc%61lhost/`` and still reach loopback.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from urllib.parse import unquote_to_bytes

import idna

MAX_HOST_LENGTH = 253
_HOST_NAME = re.compile(r"(?:[a-z0-9_-]{1,63}\.)*[a-z0-9_-]{1,63}")
_NUMBER_LABEL = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]*")


@functools.lru_cache(maxsize=4096)
def canonical_host(text: str) -> str | None:
    """A host name as browsers resolve it, or None if it is not a valid one: %-escapes decoded,
    IDNA (UTS #46, non-transitional) for non-ASCII names, lower case, one trailing dot removed,
    and a name ending in a number read as an IPv4 address the way browsers and resolvers read
    it (``2130706433``, ``0x7f.1``, ``0177.0.0.1`` are all ``127.0.0.1``). Every check of a
    host (scope, the address guard) must see this form, never the host as written."""
    host = text
    if "%" in host:
        host = _percent_decoded(host)
        if host is None:
            return None
    if not host.isascii():
        host = _idna(host)
        if host is None:
            return None
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    if not host or len(host) > MAX_HOST_LENGTH:
        return None
    if _ends_in_number(host):
        return _ipv4_number(host)
    if not _HOST_NAME.fullmatch(host):
        return None
    return host


def _percent_decoded(host: str) -> str | None:
    try:
        return unquote_to_bytes(host).decode("utf-8")
    except UnicodeDecodeError:
        return None


def _idna(host: str) -> str | None:
    """``host`` in ASCII: UTS #46 mapping, then each non-ASCII label as punycode."""
    try:
        mapped = idna.uts46_remap(host, std3_rules=False, transitional=False)
        labels = [label if label.isascii() else idna.alabel(label).decode("ascii")
                  for label in mapped.split(".")]
    except (idna.IDNAError, UnicodeError, ValueError):
        return None
    return ".".join(labels)


def _ends_in_number(host: str) -> bool:
    """WHATWG URL "ends in a number": the last label is digits or ``0x`` + hex digits."""
    return _NUMBER_LABEL.fullmatch(host.rpartition(".")[2]) is not None


def _ipv4_number(host: str) -> str | None:
    """The WHATWG IPv4 parser: 1 to 4 parts, each decimal, octal (leading 0) or hex (0x);
    the last part fills the remaining bytes. None if it is not a valid address."""
    parts = host.split(".")
    if len(parts) > 4:
        return None
    numbers = []
    for part in parts:
        number = _ipv4_part(part)
        if number is None:
            return None
        numbers.append(number)
    *head, last = numbers
    if any(number > 255 for number in head) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, number in enumerate(head):
        value += number << (8 * (3 - index))
    return str(ipaddress.IPv4Address(value))


def _ipv4_part(part: str) -> int | None:
    if not part:
        return None
    base = 10
    if part[:2].lower() == "0x":
        part, base = part[2:], 16
        if not part:
            return 0
    elif len(part) > 1 and part[0] == "0":
        part, base = part[1:], 8
    try:
        return int(part, base)
    except ValueError:
        return None
