"""Address guard: keep the crawler away from loopback, private and other internal addresses.

Every check sees the host in canonical form (``scheduler.urls.canonical_host``: %-escapes
decoded, IDNA, lower case, ``2130706433`` / ``0x7f.1`` / ``0177.0.0.1`` read as ``127.0.0.1``),
and the request is sent to that same form (``AddressGuard.vet``), so what was checked is what
is fetched. Then, because a proxy changes who resolves names:

* Through a proxy, the proxy resolves the name: the guard refuses forbidden literal addresses,
  loopback names, and names internal by convention (single labels like ``redis``, ``*.internal``,
  ``*.local`` and ``*.cluster.local``, ``*.svc`` (Kubernetes), ``*.localdomain``,
  ``*.home.arpa``, ``metadata.google.internal``, ``instance-data``...).
* Direct connections go through ``GuardedAdapter``: it resolves the name itself, drops the
  forbidden addresses and connects only to a checked one (no connection is ever opened to a
  forbidden address; DNS rebinding cannot slip in between check and use). TLS still sends the
  name (SNI, certificate check, ``Host``). Connections to a proxy are not checked: requests
  routes them through its separate ``ProxyManager``, not through our pools.

``allow_private`` lifts every rule; ``allowed_networks`` lets chosen address ranges through.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from requests.adapters import HTTPAdapter
from requests.utils import select_proxy
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util import connection as urllib3_connection

from jlse.scheduler.urls import canonical_netloc, hostname_of

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Addresses Python does not classify as non-global but that must never be crawled.
_EXTRA_FORBIDDEN = [
    ipaddress.ip_network("100.64.0.0/10"),  # carrier-grade NAT (shared address space)
    ipaddress.ip_network("fd00:ec2::254/128"),  # AWS IPv6 metadata endpoint
]
# Names that only mean something inside a network: refused when a proxy resolves them
# ("svc": Kubernetes services, kubernetes.default.svc; ".cluster.local" ends in "local").
INTERNAL_SUFFIXES = ("localhost", "internal", "local", "localdomain", "home.arpa", "lan",
                     "intranet", "corp", "home", "private", "svc")
METADATA_NAMES = frozenset({"metadata.google.internal", "metadata.goog", "metadata",
                            "instance-data", "instance-data.ec2.internal"})


class AddressRefused(Exception):
    """A request to a forbidden host or address was refused."""


class AddressGuard:
    """Decides whether a host or an IP address may be crawled."""

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

    def vet(self, url: str, proxies: Mapping[str, str]) -> str:
        """The URL to request for ``url``: the same URL with its host in canonical form (the
        form every check saw; user info dropped). Raises AddressRefused for a forbidden host,
        ValueError for a URL without a valid http(s) host. ``proxies``: as requests takes
        them; the URL is "proxied" (the proxy resolves its name) if one of them applies."""
        return self._vet(url, bool(select_proxy(url, dict(proxies))))

    def _vet(self, url: str, proxied: bool) -> str:
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise ValueError(f"malformed URL: {exc}") from None
        netloc = canonical_netloc(parts.netloc, parts.scheme)
        if netloc is None:
            raise ValueError(f"invalid host {parts.netloc.rpartition('@')[2]!r}")
        refusal = self.host_refusal(hostname_of(netloc), proxied)
        if refusal:
            raise AddressRefused(refusal)
        return parts._replace(netloc=netloc).geturl()

    def check_url_host(self, url: str, proxied: bool = False) -> str | None:
        """Reason to refuse ``url`` from its host alone, or None (also for an invalid URL,
        which the fetcher reports as such)."""
        try:
            self._vet(url, proxied)
        except AddressRefused as exc:
            return str(exc)
        except ValueError:
            return None
        return None

    def host_refusal(self, host: str, proxied: bool) -> str | None:
        """Reason to refuse a canonical host name or address literal, or None."""
        if self.allow_private:
            return None
        ip = _literal_ip(host)
        if ip is not None:
            return None if self.is_allowed_ip(ip) else f"host {host!r} is a forbidden address"
        if _is_loopback_name(host):
            return f"host {host!r} is a loopback name"
        if proxied and is_internal_name(host):
            return f"host {host!r} is an internal name (refused when a proxy resolves it)"
        return None

    def allowed_addresses(self, host: str, port: int) -> list[str]:
        """The addresses ``host`` resolves to that may be connected to, in resolver order.
        Raises AddressRefused if there are none, socket.gaierror if it does not resolve."""
        infos = socket.getaddrinfo(host, port, urllib3_connection.allowed_gai_family(),
                                   socket.SOCK_STREAM)
        addresses = list(dict.fromkeys(info[4][0] for info in infos))
        allowed = [address for address in addresses if self.is_allowed_ip(address)]
        if not allowed:
            shown = addresses[0] if addresses else "nothing"
            raise AddressRefused(f"{host} resolved to the forbidden address {shown}")
        if len(allowed) < len(addresses):
            log.info("%s: connecting to %s only (forbidden: %s)", host, ", ".join(allowed),
                     ", ".join(a for a in addresses if a not in allowed))
        return allowed

    def _in_allowed_networks(self, address: IPAddress) -> bool:
        return any(
            address.version == network.version and address in network
            for network in self.allowed_networks
        )


def is_internal_name(host: str) -> bool:
    """True for a name that only means something inside a network (see INTERNAL_SUFFIXES)."""
    if "." not in host or host in METADATA_NAMES:
        return True
    return any(host.endswith("." + suffix) for suffix in INTERNAL_SUFFIXES)


def _is_loopback_name(host: str) -> bool:
    return host == "localhost" or host.endswith(".localhost")


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
    """A canonical host as an IP address string if it is one (IPv6 in brackets)."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def _guarded_connection(base: type[HTTPConnection], guard: AddressGuard) -> type[HTTPConnection]:
    """A subclass of ``base`` that resolves its host, drops forbidden addresses and connects
    only to an allowed one. ``self.host`` stays the name (SNI, certificate, Host header)."""

    def _new_conn(self: HTTPConnection) -> socket.socket:
        try:
            addresses = guard.allowed_addresses(self._dns_host, self.port)
        except socket.gaierror as exc:
            raise NameResolutionError(self.host, self, exc) from exc
        error: Exception | None = None
        for address in addresses:
            try:
                return urllib3_connection.create_connection(
                    (address, self.port), self.timeout, source_address=self.source_address,
                    socket_options=self.socket_options)
            except TimeoutError as exc:
                error = ConnectTimeoutError(
                    self, f"Connection to {self.host} timed out. (connect timeout={self.timeout})")
                error.__cause__ = exc
            except OSError as exc:
                error = NewConnectionError(self, f"Failed to establish a new connection: {exc}")
                error.__cause__ = exc
        assert error is not None  # allowed_addresses never returns an empty list
        raise error

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
