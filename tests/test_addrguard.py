"""Address guard: the IP table, URL-host checks, and refusal at connect time against loopback."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from jlse.records import Outcome
from jlse.settings import Settings
from jlse.workers.addrguard import AddressGuard, AddressRefused, GuardedAdapter
from jlse.workers.fetcher import Fetcher

FORBIDDEN = [
    "127.0.0.1",
    "127.8.9.10",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",  # loopback, RFC 1918
    "169.254.169.254",
    "169.254.0.1",  # link-local, cloud metadata
    "100.64.0.1",
    "100.127.255.254",  # CGNAT
    "0.0.0.0",
    "224.0.0.1",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    "::1",
    "::",
    "fe80::1",
    "fe80::1%eth0",
    "fc00::1",
    "fd12:3456::1",
    "fd00:ec2::254",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "2002:7f00:1::1",  # 6to4 wrapping 127.0.0.1
    "not-an-ip",
    "",
    "999.1.1.1",
]
ALLOWED = [
    "8.8.8.8",
    "93.184.216.34",
    "1.1.1.1",
    "2001:4860:4860::8888",
    "::ffff:8.8.8.8",
    "2002:0808:0808::1",
]


@pytest.mark.parametrize("ip", FORBIDDEN)
def test_forbidden_addresses(ip: str) -> None:
    assert not AddressGuard().is_allowed_ip(ip)


@pytest.mark.parametrize("ip", ALLOWED)
def test_public_addresses(ip: str) -> None:
    assert AddressGuard().is_allowed_ip(ip)


def test_allow_private_allows_every_valid_address() -> None:
    guard = AddressGuard(allow_private=True)
    assert all(
        guard.is_allowed_ip(ip) for ip in ["127.0.0.1", "::1", "10.0.0.1", "169.254.169.254"]
    )
    assert not guard.is_allowed_ip("not-an-ip")


@pytest.mark.parametrize(
    ("networks", "ip", "allowed"),
    [
        (["10.0.0.0/8"], "10.9.8.7", True),
        (["10.0.0.0/8"], "192.168.0.1", False),
        (["10.0.0.0/8"], "::ffff:10.9.8.7", True),  # mapped addresses follow their IPv4 rule
        (["127.0.0.0/8"], "127.0.0.1", True),
        (["192.168.1.0/24"], "192.168.2.1", False),
        (["fd00::/8"], "fd12::1", True),
        (["fd00::/8"], "fc00::1", False),
        (["169.254.169.254/32", "10.0.0.0/8"], "169.254.169.254", True),
        (["10.0.0.0/8"], "8.8.8.8", True),
    ],
)
def test_allowed_networks(networks: list[str], ip: str, allowed: bool) -> None:
    assert AddressGuard(allowed_networks=networks).is_allowed_ip(ip) is allowed


def test_invalid_cidr_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not-a-net"):
        AddressGuard(allowed_networks=["not-a-net"])


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("http://localhost/", True),
        ("http://LOCALHOST.:8080/x", True),
        ("http://api.localhost/", True),
        ("http://127.0.0.1:9/x", True),
        ("http://[::1]/", True),
        ("http://[::ffff:127.0.0.1]/", True),
        ("http://169.254.169.254/latest/meta-data/", True),
        ("http://2130706433/", True),  # 127.0.0.1 as one decimal number
        ("http://0x7f.1/", True),
        ("http://0177.0.0.1/", True),
        ("http://10.0.0.1/", True),
        ("http://example.com/", False),
        ("http://faults.test/ok.html", False),
        ("http://8.8.8.8/", False),
        ("http://[2001:4860:4860::8888]/", False),
        ("http://1.2.3.4.5/", False),  # not an address: a (bad) name, left to the resolver
        ("not a url", False),
    ],
)
def test_check_url_host(url: str, refused: bool) -> None:
    reason = AddressGuard().check_url_host(url)
    assert (reason is not None) is refused
    assert AddressGuard(allow_private=True).check_url_host(url) is None


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        body = b"<html><head><title>loopback</title></head><body>hi</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def loopback_port() -> Iterator[int]:
    """A tiny HTTP server on 127.0.0.1: the internal target the guard must refuse."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture()
def no_env_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture()
def rebinding_dns(monkeypatch: pytest.MonkeyPatch) -> str:
    """Make the name ``rebind.test`` resolve to 127.0.0.1, as a DNS-rebinding attacker would."""
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host == "rebind.test":
            host = "127.0.0.1"
        return real_getaddrinfo(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return "rebind.test"


def _session(guard: AddressGuard) -> requests.Session:
    session = requests.Session()
    session.trust_env = False
    session.mount("http://", GuardedAdapter(guard, pool_maxsize=2))
    return session


def test_adapter_refuses_a_loopback_peer_before_sending(loopback_port: int) -> None:
    with pytest.raises(AddressRefused, match="127.0.0.1"):
        _session(AddressGuard()).get(f"http://127.0.0.1:{loopback_port}/", timeout=3)


@pytest.mark.parametrize(
    "guard", [AddressGuard(allow_private=True), AddressGuard(allowed_networks=["127.0.0.0/8"])]
)
def test_adapter_allows_loopback_when_configured(loopback_port: int, guard: AddressGuard) -> None:
    response = _session(guard).get(f"http://127.0.0.1:{loopback_port}/", timeout=3)
    assert response.status_code == 200


def test_fetcher_refuses_literal_loopback(loopback_port: int, no_env_proxy: None) -> None:
    fetcher = Fetcher(Settings(read_timeout=2, fetch_deadline=3))
    result = fetcher.fetch(f"http://127.0.0.1:{loopback_port}/")
    assert result.outcome is Outcome.ADDRESS_REFUSED
    assert "127.0.0.1" in result.error and result.n_bytes == 0


@pytest.mark.parametrize("scheme", ["http", "https"])  # https: refused before the TLS handshake
def test_fetcher_refuses_a_name_that_resolves_to_loopback(
    loopback_port: int, no_env_proxy: None, rebinding_dns: str, scheme: str
) -> None:
    fetcher = Fetcher(Settings(read_timeout=2, fetch_deadline=3))
    result = fetcher.fetch(f"{scheme}://{rebinding_dns}:{loopback_port}/")
    assert result.outcome is Outcome.ADDRESS_REFUSED
    assert "resolved to the forbidden address 127.0.0.1" in result.error


def test_fetcher_allows_loopback_with_allow_private(
    loopback_port: int, no_env_proxy: None, rebinding_dns: str
) -> None:
    fetcher = Fetcher(Settings(read_timeout=2, fetch_deadline=3, allow_private=True))
    for host in ("127.0.0.1", rebinding_dns):
        result = fetcher.fetch(f"http://{host}:{loopback_port}/")
        assert result.outcome is Outcome.OK, result.error
        assert "<title>loopback</title>" in (result.text or "")


def test_fetcher_refuses_the_metadata_address_without_connecting(no_env_proxy: None) -> None:
    fetcher = Fetcher(Settings(read_timeout=2, fetch_deadline=3))
    result = fetcher.fetch("http://169.254.169.254/latest/meta-data/")
    assert result.outcome is Outcome.ADDRESS_REFUSED
    assert result.elapsed < 1.0
