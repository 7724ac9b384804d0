"""Address guard: keep the crawler away from loopback, private and other internal addresses.

Two checks, because a proxy changes who resolves names:

* ``AddressGuard.check_url_host`` looks at the URL alone (a literal IP or ``localhost``). It is
  all we can check when a proxy resolves the name for us.
* ``GuardedAdapter`` checks the *connected peer address* right after the TCP connect and before
  the request is sent. That covers every name the crawler resolves itself and defeats DNS
  rebinding (the address checked is the address used). Connections to a proxy are not checked:
  requests routes them through its separate ``ProxyManager``, not through our pools.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Addresses Python does not classify as non-global but that must never be crawled.
_EXTRA_FORBIDDEN = [
    ipaddress.ip_network("100.64.0.0/10"),  # carrier-grade NAT (shared address space)
    ipaddress.ip_network("fd00:ec2::254/128"),  # AWS IPv6 metadata endpoint
]
# Legacy IPv4 spellings that resolvers accept: 2130706433, 0x7f.1, 0177.0.0.1 ...
_LEGACY_IPV4 = re.compile(r"[0-9a-fA-FxX.]+")


class AddressRefused(Exception):
    """A connection to a forbidden address was refused (raised by the guarded adapter)."""


class AddressGuard:
    """Decides whether an IP address may be crawled."""

    def __init__(self, allow_private: bool = False, allowed_networks: Sequence[str] = ()) -> None:
        self.allow_private = allow_private
        self.allowed_networks = [_parse_network(cidr) for cidr in allowed_networks]

    def is_allowed_ip(self, ip: str) -> bool:
        """True if ``ip`` is public, or private but allowed by the settings."""
        try:
            address = ipaddress.ip_address(ip.split("%", 1)[0])  # drop an IPv6 zone id
        except ValueError:
            return False
        if self.allow_private:
            return True
        candidates = _addresses_to_check(address)
        if any(self._in_allowed_networks(candidate) for candidate in candidates):
            return True
        return not any(_is_forbidden(candidate) for candidate in candidates)

    def check_url_host(self, url: str) -> str | None:
        """Reason to refuse ``url`` from its host alone (literal forbidden IP or localhost)."""
        try:
            host = (urlsplit(url).hostname or "").rstrip(".").lower()
        except ValueError:
            return None  # not a URL at all; the fetcher reports it as invalid
        if not host or self.allow_private:
            return None
        if host == "localhost" or host.endswith(".localhost"):
            return f"host {host!r} is a loopback name"
        ip = _literal_ip(host)
        if ip is not None and not self.is_allowed_ip(ip):
            return f"host {host!r} is the forbidden address {ip}"
        return None

    def check_peer(self, sock: socket.socket, host: str) -> None:
        """Raise AddressRefused if the connected peer of ``sock`` is forbidden."""
        peer = sock.getpeername()[0]
        if not self.is_allowed_ip(peer):
            raise AddressRefused(f"{host} resolved to the forbidden address {peer}")

    def _in_allowed_networks(self, address: IPAddress) -> bool:
        return any(
            address.version == network.version and address in network
            for network in self.allowed_networks
        )


def _parse_network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError:
        raise ValueError(f"allowed_networks: {cidr!r} is not a CIDR network") from None


def _is_forbidden(address: IPAddress) -> bool:
    if not address.is_global or address.is_multicast or address.is_reserved:
        return True
    return any(address.version == net.version and address in net for net in _EXTRA_FORBIDDEN)


def _addresses_to_check(address: IPAddress) -> list[IPAddress]:
    """``address`` and the IPv4 address it carries: an IPv4-mapped address (``::ffff:a.b.c.d``)
    is judged as its IPv4 address, a 6to4 address (``2002:AABB:CCDD::``) as both."""
    if address.version != 6:
        return [address]
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address.sixtofour is not None:
        return [address, address.sixtofour]
    return [address]


def _literal_ip(host: str) -> str | None:
    """``host`` as an IP address string if it is one (including legacy IPv4 forms)."""
    try:
        return str(ipaddress.ip_address(host.strip("[]").split("%", 1)[0]))
    except ValueError:
        pass
    if _LEGACY_IPV4.fullmatch(host) and host[0].isdigit():
        try:
            return socket.inet_ntoa(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _guarded_connection(base: type[HTTPConnection], guard: AddressGuard) -> type[HTTPConnection]:
    """A subclass of ``base`` whose new sockets are checked by ``guard`` before any byte is sent."""

    def _new_conn(self: HTTPConnection) -> socket.socket:
        sock = base._new_conn(self)
        try:
            guard.check_peer(sock, self.host)
        except AddressRefused:
            sock.close()
            raise
        return sock

    return type(f"Guarded{base.__name__}", (base,), {"_new_conn": _new_conn})


class GuardedAdapter(HTTPAdapter):
    """An HTTPAdapter whose direct (non-proxied) connections go through an AddressGuard."""

    def __init__(self, guard: AddressGuard, pool_maxsize: int, **kwargs: Any) -> None:
        self.guard = guard
        super().__init__(pool_connections=pool_maxsize, pool_maxsize=pool_maxsize, **kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        http_conn = _guarded_connection(HTTPConnection, self.guard)
        https_conn = _guarded_connection(HTTPSConnection, self.guard)
        self.poolmanager.pool_classes_by_scheme = {
            "http": type("GuardedHTTPPool", (HTTPConnectionPool,), {"ConnectionCls": http_conn}),
            "https": type(
                "GuardedHTTPSPool", (HTTPSConnectionPool,), {"ConnectionCls": https_conn}
            ),
        }
