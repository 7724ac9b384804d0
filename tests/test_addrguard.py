"""Address guard: the IP table, URL-host checks, and refusal at connect time against loopback."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

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


# --- every check sees the canonical host (issue 15: SSRF through a proxy) -------------------

ENCODED_INTERNAL = [
    "http://%31%32%37.0.0.1/robots.txt",  # 127.0.0.1, %-encoded
    "http://loc%61lhost:5432/",  # localhost, %-encoded
    "http://LOC%41LHOST:6379/",
    "http://%6c%6f%63%61%6c%68%6f%73%74./",
    "http://2130706433/latest/meta-data/",  # 127.0.0.1 as one number
    "http://0xa9.0xfe.0xa9.0xfe/latest/meta-data/",  # 169.254.169.254 in hex
    "http://0251.0376.0251.0376/",  # 169.254.169.254 in octal
    "http://%31%36%39.254.169.254/latest/meta-data/",
    "http://127.1/",
]


@pytest.mark.parametrize("url", ENCODED_INTERNAL)
@pytest.mark.parametrize("proxied", [False, True])
def test_encoded_and_numeric_hosts_are_refused(url: str, proxied: bool) -> None:
    proxies = {"http": "http://proxy.example:3128"} if proxied else {}
    assert AddressGuard().check_url_host(url, proxied=proxied)
    with pytest.raises(AddressRefused):
        AddressGuard().vet(url, proxies)
    assert AddressGuard(allow_private=True).vet(url, proxies).startswith("http://")


@pytest.mark.parametrize(
    "host",
    ["redis", "postgres", "metadata", "instance-data", "metadata.google.internal",
     "db.internal", "printer.local", "box.localdomain", "nas.home.arpa", "router.lan",
     "kubernetes.default.svc", "KUBERNETES.Default.SVC.", "api.ns.svc.cluster.local",
     "%72%65%64%69%73"],  # "redis", %-encoded
)
def test_internal_names_are_refused_through_a_proxy_only(host: str) -> None:
    url = f"http://{host}:6379/"
    assert "internal name" in (AddressGuard().check_url_host(url, proxied=True) or "")
    assert AddressGuard().check_url_host(url, proxied=False) is None  # checked at connect
    assert AddressGuard(allow_private=True).check_url_host(url, proxied=True) is None


@pytest.mark.parametrize("host", ["example.com", "faults.test", "xn--fa-hia.de", "a.b.c.io"])
def test_public_names_pass_through_a_proxy(host: str) -> None:
    assert AddressGuard().check_url_host(f"http://{host}/", proxied=True) is None


def test_vet_sends_the_host_that_was_checked() -> None:
    guard = AddressGuard()
    proxies = {"http": "http://proxy.example:3128", "no": "localhost"}
    assert guard.vet("http://user:pw@EXAMPLE.com:80/a%41?q=1", proxies) == \
        "http://example.com/a%41?q=1"
    assert guard.vet("http://faß.de/x", proxies) == "http://xn--fa-hia.de/x"
    with pytest.raises(ValueError, match="invalid host"):
        guard.vet("http://1.2.3.4.5/", proxies)
    with pytest.raises(AddressRefused, match="internal name"):
        guard.vet("http://redis:6379/", proxies)
    assert guard.vet("http://redis:6379/", {"https": "http://proxy.example:3128", "no": "x"}) \
        == "http://redis:6379/"  # no proxy for http: the name is checked when resolved


class _RecordingProxy(BaseHTTPRequestHandler):
    """An HTTP proxy that records every request line and answers each robots.txt with a
    redirect to an internal host written in a disguise (``server.redirects``)."""

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        self.server.requests.append(self.path)
        target = self.server.redirects.get(self.path)
        self.send_response(302 if target else 404)
        if target:
            self.send_header("Location", target)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def recording_proxy() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RecordingProxy)
    server.requests, server.redirects = [], {}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("target", [*ENCODED_INTERNAL, "http://metadata.google.internal/x",
                                    "http://instance-data/latest/", "http://redis:6379/",
                                    "http://kubernetes.default.svc/robots.txt",
                                    "https://kubernetes.default.svc.cluster.local/api",
                                    "http://printer.local/robots.txt"])
def test_robots_redirect_to_a_disguised_internal_host_never_reaches_the_proxy(
    recording_proxy: ThreadingHTTPServer, target: str
) -> None:
    start = "http://hostile.example/robots.txt"
    recording_proxy.redirects[start] = target
    proxy = f"http://127.0.0.1:{recording_proxy.server_address[1]}"
    result = Fetcher(Settings(proxy=proxy, read_timeout=2, fetch_deadline=3)).fetch_robots(start)
    assert result.outcome is Outcome.ADDRESS_REFUSED, result.error
    assert recording_proxy.requests == [start]  # the redirect's target never went out


def test_robots_redirect_to_an_internal_name_reaches_the_proxy_with_allow_private(
    recording_proxy: ThreadingHTTPServer,
) -> None:
    """The topic's allow_private switch lifts the rule: the crawl of an internal web goes on."""
    start, target = "http://hostile.example/robots.txt", "http://kubernetes.default.svc/robots.txt"
    recording_proxy.redirects[start] = target
    proxy = f"http://127.0.0.1:{recording_proxy.server_address[1]}"
    settings = Settings(proxy=proxy, read_timeout=2, fetch_deadline=3, allow_private=True)
    result = Fetcher(settings).fetch_robots(start)
    assert result.outcome is Outcome.HTTP_ERROR and result.status_code == 404, result.error
    assert recording_proxy.requests == [start, target]


def test_page_redirect_target_is_refused_when_fetched_through_a_proxy(
    recording_proxy: ThreadingHTTPServer,
) -> None:
    proxy = f"http://127.0.0.1:{recording_proxy.server_address[1]}"
    fetcher = Fetcher(Settings(proxy=proxy, read_timeout=2, fetch_deadline=3))
    for url in ENCODED_INTERNAL:
        assert fetcher.fetch(url).outcome is Outcome.ADDRESS_REFUSED
    assert recording_proxy.requests == []


@pytest.fixture()
def counting_listener() -> Iterator[tuple[int, list[int]]]:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1], accepted
    listener.close()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_no_connection_is_opened_to_a_forbidden_resolved_address(
    counting_listener: tuple[int, list[int]], no_env_proxy: None, rebinding_dns: str,
    scheme: str,
) -> None:
    port, accepted = counting_listener
    fetcher = Fetcher(Settings(read_timeout=2, fetch_deadline=3))
    for _ in range(10):
        result = fetcher.fetch(f"{scheme}://{rebinding_dns}:{port}/")
        assert result.outcome is Outcome.ADDRESS_REFUSED
    time.sleep(0.2)  # an accept in flight would land by now
    assert accepted == []  # checked before connecting, not after


def test_a_name_with_public_and_private_addresses_connects_to_the_allowed_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80)),
               (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 80))]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: answers)
    assert AddressGuard().allowed_addresses("mixed.test", 80) == ["93.184.216.34"]
    assert AddressGuard(allow_private=True).allowed_addresses("mixed.test", 80) == \
        ["127.0.0.1", "93.184.216.34"]


def test_bad_location_is_a_logged_outcome(sandbox, caplog: pytest.LogCaptureFixture) -> None:
    fetcher = Fetcher(Settings(proxy=sandbox.proxy_url, read_timeout=2, fetch_deadline=3))
    with caplog.at_level(logging.INFO, logger="jlse.workers.fetcher"):
        result = fetcher.fetch("http://faults.test/redirect-bad-location")
    assert result.outcome is Outcome.BAD_REDIRECT
    assert "http://[::1" in result.error
    lines = [record for record in caplog.records if "redirect-bad-location" in record.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None  # one line, no traceback


def test_a_crawl_goes_on_past_bad_and_disguised_redirects(sandbox, tmp_path: Path) -> None:
    from jlse.run import run_crawl

    topic = tmp_path / "topic"
    topic.mkdir()
    seeds = ["http://faults.test/redirect-bad-location", "http://faults.test/redirect-encoded-host",
             "http://faults.test/redirect-encoded-name", "http://faults.test/redirect-number-host",
             "http://faults.test/ok.html"]
    (topic / "seeds.txt").write_text("\n".join(seeds) + "\n")
    (topic / "topic.toml").write_text('name = "hostile"\n')
    sandbox.clear_log()
    summary = run_crawl(topic, {"strategy": "bfs", "max_pages": 20, "proxy": sandbox.proxy_url,
                                "politeness_delay": 0.0, "page_processes": 0},
                        workdir=tmp_path / "w", progress=False)
    assert summary.outcomes.get("bad_redirect") == 1
    assert summary.outcomes.get("address_refused") == 3  # 127.0.0.1 / localhost, disguised
    assert summary.outcomes.get("ok", 0) >= 1  # the crawl went on
    assert [e for e in sandbox.log if e.host.split(":")[0] in ("127.0.0.1", "localhost")] == []
    log = (tmp_path / "w" / "crawl.log").read_text()
    assert "Traceback" not in log and "invalid Location 'http://[::1'" in log


class _HostEcho(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        body = f"<html><head><title>{self.headers['Host']}</title></head></html>".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_https_to_a_checked_address_keeps_the_name_for_sni_and_certificate(
    tmp_path: Path, no_env_proxy: None, rebinding_dns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard connects to the address it checked, but TLS still sends and verifies the name."""
    import ssl
    import subprocess

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", f"/CN={rebinding_dns}", "-addext",
                    f"subjectAltName=DNS:{rebinding_dns}", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    names: list[str | None] = []
    context.sni_callback = lambda sock, name, ctx: names.append(name)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HostEcho)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
        port = server.server_address[1]
        fetcher = Fetcher(Settings(read_timeout=3, fetch_deadline=5,
                                   allowed_networks=["127.0.0.0/8"]))
        result = fetcher.fetch(f"https://{rebinding_dns}:{port}/")
        assert result.outcome is Outcome.OK, result.error
        assert names == [rebinding_dns]  # SNI: the name, not the address
        assert f"<title>{rebinding_dns}:{port}</title>" in (result.text or "")  # Host header
    finally:
        server.shutdown()
        server.server_close()
