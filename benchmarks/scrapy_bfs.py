"""A breadth-first Scrapy crawl of the sandbox web: the baseline of ``bench_crawl.py``.

Runs in the benchmark's own venv (``benchmarks/.venv``, Scrapy installed there only)::

    benchmarks/.venv/bin/python benchmarks/scrapy_bfs.py --seeds seeds.txt --max-pages 2000 \
        --concurrency 16 --proxy http://127.0.0.1:18899 --out scrapy.json

It counts pages the way ``jlse crawl`` does, so both crawls spend the same budget:

- every page request counts once, whatever its status (4xx/5xx reach the callback), and a
  redirect is a fetched page whose target is queued as a new URL (jlse re-checks every hop);
  retries of one URL count once, robots.txt fetches never count;
- the budget is enforced where requests leave for the downloader, and the spider closes when
  every budgeted request has come back. ``CLOSESPIDER_PAGECOUNT`` is not used: it also counts
  robots.txt responses and lets requests already scheduled through.

Writes JSON: pages, elapsed and pages_per_second (spider_opened to spider_closed), the count per
HTTP status, and per fetched page (in fetch order) its URL, time since opening and depth.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import scrapy
from scrapy import signals
from scrapy.crawler import CrawlerProcess
from scrapy.exceptions import CloseSpider, IgnoreRequest
from scrapy.http import TextResponse

log = logging.getLogger("scrapy_bfs")

BUDGET_META = "bench_budgeted"
# Scrapy's default RETRY_EXCEPTIONS less DownloadTimeoutError.
RETRY_EXCEPTIONS = [
    "scrapy.exceptions.CannotResolveHostError",
    "scrapy.exceptions.DownloadConnectionRefusedError",
    "scrapy.exceptions.DownloadFailedError",
    "scrapy.exceptions.ResponseDataLossError",
    "twisted.internet.error.ConnectionDone",
    "twisted.internet.error.ConnectError",
    "twisted.internet.error.ConnectionLost",
    OSError,
    "scrapy.core.downloader.handlers.http11.TunnelError",
]


class PageBudget:
    """Downloader middleware: lets at most ``max_pages`` page requests through.

    Placed last before the downloader, after the robots.txt check (a disallowed URL costs
    nothing, as in jlse). Retries carry ``retry_times`` and were already counted.
    """

    def __init__(self, max_pages: int) -> None:
        self.max_pages = max_pages
        self.issued = 0

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.settings.getint("BENCH_MAX_PAGES"))

    def process_request(self, request, spider=None):
        if request.meta.get("dont_obey_robotstxt") or request.meta.get("retry_times"):
            return None
        if self.issued >= self.max_pages:
            raise IgnoreRequest("page budget spent")
        self.issued += 1
        request.meta[BUDGET_META] = True
        return None


class BfsSpider(scrapy.Spider):
    name = "bfs"

    def __init__(self, seeds: list[str], max_pages: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.seeds = seeds
        self.max_pages = max_pages
        self.urls: list[str] = []
        self.times: list[float] = []  # seconds since the spider opened
        self.depths: list[int] = []
        self.statuses: dict[str, int] = {}
        self.opened_at = self.closed_at = 0.0

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.on_opened, signal=signals.spider_opened)
        crawler.signals.connect(spider.on_closed, signal=signals.spider_closed)
        return spider

    def on_opened(self, spider) -> None:
        self.opened_at = time.monotonic()

    def on_closed(self, spider, reason) -> None:
        self.closed_at = time.monotonic()

    async def start(self):
        for url in self.seeds:
            yield scrapy.Request(url, callback=self.parse, errback=self.failed)

    def parse(self, response):
        self._count(response.request, str(response.status))
        if 300 <= response.status < 400:
            location = response.headers.get("Location")
            if location:
                yield response.follow(location.decode("latin-1"), callback=self.parse,
                                      errback=self.failed)
        elif response.status == 200 and isinstance(response, TextResponse):
            yield from response.follow_all(css="a::attr(href)", callback=self.parse,
                                           errback=self.failed)
        self._close_when_done()

    def failed(self, failure):
        request = failure.request
        if request.meta.get(BUDGET_META):  # reached the network: timeouts, resets, size cap
            self._count(request, type(failure.value).__name__)
        self._close_when_done()

    def _count(self, request: scrapy.Request, status: str) -> None:
        self.urls.append(request.url)
        self.times.append(round(time.monotonic() - self.opened_at, 4))
        self.depths.append(request.meta.get("depth", 0))
        self.statuses[status] = self.statuses.get(status, 0) + 1

    def _close_when_done(self) -> None:
        if len(self.urls) >= self.max_pages:
            raise CloseSpider("page budget reached")

    def summary(self) -> dict:
        elapsed = max(self.closed_at - self.opened_at, 1e-9)
        pages = len(self.urls)
        return {"pages": pages, "elapsed": round(elapsed, 3),
                "pages_per_second": round(pages / elapsed, 2),
                "statuses": self.statuses, "urls": self.urls, "times": self.times,
                "depths": self.depths}


def crawl_settings(args: argparse.Namespace) -> dict:
    return {
        "ROBOTSTXT_OBEY": True,
        "USER_AGENT": args.user_agent,
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,  # jlse keeps one request in flight per host
        # breadth-first: lowest depth first, FIFO within a depth. The disk queue is only used
        # with a JOBDIR, which this crawl never sets, so nothing is pickled.
        "DEPTH_PRIORITY": 1,
        "SCHEDULER_DISK_QUEUE": "scrapy.squeues.PickleFifoDiskQueue",
        "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
        "REDIRECT_ENABLED": False,  # the callback follows Location itself (jlse's accounting)
        "METAREFRESH_ENABLED": False,  # jlse does not follow <meta http-equiv=refresh>
        # The spider yields only requests: handling them one at a time (not 100 asyncio tasks
        # per response) cuts Scrapy's CPU per page by a third here. The baseline gets its best.
        "CONCURRENT_ITEMS": 1,
        "HTTPERROR_ALLOW_ALL": True,
        "RETRY_TIMES": args.retries,
        # jlse retries 5xx and connection errors, never a timeout
        "RETRY_HTTP_CODES": list(range(500, 600)),
        "RETRY_EXCEPTIONS": RETRY_EXCEPTIONS,
        "DOWNLOAD_MAXSIZE": args.max_bytes,
        "DOWNLOAD_WARNSIZE": 0,
        "DOWNLOAD_TIMEOUT": args.timeout,
        "DOWNLOADER_MIDDLEWARES": {PageBudget: 990},
        "BENCH_MAX_PAGES": args.max_pages,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "WARNING",
    }


def read_seeds(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=Path, required=True, help="one URL per line")
    parser.add_argument("--max-pages", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--proxy", default="", help="HTTP proxy for every request")
    parser.add_argument("--out", type=Path, required=True, help="JSON summary")
    parser.add_argument("--user-agent", default="jlse/0.1",
                        help="the same agent as jlse, so the same robots.txt rules apply")
    # bench_crawl.py passes jlse's own settings (max_retries, max_bytes, read_timeout)
    parser.add_argument("--retries", type=int, default=2)
    parser.add_argument("--max-bytes", type=int, default=2 * 1024 * 1024)
    parser.add_argument("--timeout", type=float, default=10.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seeds = read_seeds(args.seeds)
    if not seeds:
        log.error("no seed URLs in %s", args.seeds)
        return 2
    if args.proxy:  # HttpProxyMiddleware reads these once; robots.txt requests use them too
        os.environ["http_proxy"] = os.environ["HTTP_PROXY"] = args.proxy
    process = CrawlerProcess(crawl_settings(args))
    crawler = process.create_crawler(BfsSpider)
    process.crawl(crawler, seeds=seeds, max_pages=args.max_pages)
    process.start()
    args.out.write_text(json.dumps(crawler.spider.summary()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
