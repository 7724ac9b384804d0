"""What discovery hands on: the ranked websites, the ranked pages, and a seeds.txt for the crawl.

``sites.jsonl``  one site a line, best first: site (host), rank (1 = best), score (mean rank
                 position of its best pages, lower is better), pages seen, pages judged
                 relevant, the operator that found it, evidence URLs, seed (a seed's site)
``pages.jsonl``  one page a line, best first: url, site, rank, relevance, operator, round, title
``seeds.txt``    the best sites' best pages and home pages: ``jlse crawl`` takes it as it is
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from jlse.scheduler.urls import home_page_url, host_of

EVIDENCE_URLS = 3


@dataclass
class SiteRow:
    site: str
    rank: int
    score: float
    pages: int
    relevant_pages: int
    operator: str
    evidence: list[str]
    seed: bool


@dataclass
class PageRow:
    url: str
    site: str
    rank: int
    relevance: float | None  # the topic model's P(relevant | page)
    operator: str
    round: int
    title: str


@dataclass
class DiscoveryReport:
    sites: list[SiteRow]
    pages: list[PageRow]


def judged(page, threshold: float) -> bool:  # noqa: ANN001 - a fetching.Page
    """Whether the topic model (the crawl's page classifier) judged the page relevant."""
    return page.relevance is not None and page.relevance >= threshold


def build_report(discovery, seeds: list[str], settings) -> DiscoveryReport:  # noqa: ANN001
    """Sites and pages of a finished run, best first."""
    pages = discovery.corpus.pages
    ranking = discovery.ranking
    if ranking is None or not pages:
        return DiscoveryReport([], [])
    seed_hosts = {host_of(url) for url in seeds}
    first_operator: dict[str, str] = {}
    for page in sorted(pages, key=lambda page: page.round):
        first_operator.setdefault(page.host, page.operator)
    sites = []
    for site in discovery.ranked_sites():
        members = [index for index, page in enumerate(pages) if page.host == site.host]
        sites.append(SiteRow(
            site=site.host, rank=site.rank + 1, score=round(float(site.score), 3),
            pages=site.n_pages,
            relevant_pages=sum(judged(pages[index], settings.relevance_threshold)
                               for index in members),
            operator=first_operator.get(site.host, ""),
            evidence=[pages[index].url for index in site.best_pages[:EVIDENCE_URLS]],
            seed=site.host in seed_hosts))
    rows = [PageRow(url=pages[index].url, site=pages[index].host, rank=rank + 1,
                    relevance=None if pages[index].relevance is None
                    else round(pages[index].relevance, 4),
                    operator=pages[index].operator, round=pages[index].round,
                    title=pages[index].title[:200])
            for rank, index in enumerate(ranking.order.tolist())]
    return DiscoveryReport(sites, rows)


def write_outputs(report: DiscoveryReport, folder: Path, out: Path | str | None,
                  seeds_out: Path | str | None, n_seed_sites: int) -> dict[str, str]:
    """sites.jsonl and pages.jsonl in ``folder`` (copied to ``out`` and next to it), and the
    seeds file; the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"sites": folder / "sites.jsonl", "pages": folder / "ranked-pages.jsonl"}
    _write_jsonl(paths["sites"], [asdict(row) for row in report.sites])
    _write_jsonl(paths["pages"], [asdict(row) for row in report.pages])
    if out:
        out = Path(out)
        pages_copy = out.with_name(f"{out.stem}.pages{out.suffix or '.jsonl'}")
        shutil.copyfile(paths["sites"], out)
        shutil.copyfile(paths["pages"], pages_copy)
        paths = {"sites": out, "pages": pages_copy}
    if seeds_out:
        paths["seeds"] = Path(seeds_out)
        paths["seeds"].write_text("".join(f"{url}\n" for url in seed_urls(report, n_seed_sites)),
                                  encoding="utf-8")
    return {name: str(path) for name, path in paths.items()}


def seed_urls(report: DiscoveryReport, n_sites: int) -> list[str]:
    """For each of the ``n_sites`` best sites with a page judged relevant: its best pages and
    its home page."""
    urls: list[str] = []
    chosen = [site for site in report.sites if site.relevant_pages > 0][:n_sites]
    for site in chosen:
        urls += site.evidence
        home = home_page_url(site.evidence[0])
        if home is not None:
            urls.append(home)
    return list(dict.fromkeys(urls))


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    temp = path.with_suffix(".tmp")
    with temp.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    temp.replace(path)
