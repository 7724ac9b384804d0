"""Topics given by keywords alone, crawled as a user would, against the same topic with samples.

For each topic, on the discovery web of the sandbox (its search API included), side by side:

- ``samples``         the topic directory with its 20 + 20 sample pages (the reference);
- ``keywords``        seeds and keywords only: the keywords' VSM judges pages;
- ``discover+crawl``  ``jlse discover --topic-out`` (keywords only), then a crawl of the topic
                      it wrote: its seeds and the discovered ones, the VSM;
- ``bootstrap``       the same with ``--bootstrap-samples``: an NB trained on discovery's best
                      pages and pages the VSM judged irrelevant;
- ``bfs``             breadth-first from the same seeds.

Prints the ground-truth harvest @N of each crawl and its share of the ``samples`` crawl's.

    .venv/bin/python benchmarks/bench_keyword_topics.py [--topics cameras,phones,laptops]
        [--budget 1000] [--discover-pages 500] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jlse.discovery.run import run_discovery  # noqa: E402
from jlse.eval import fetched_urls, harvest_curve, load_truth, sandbox_process  # noqa: E402
from jlse.run import run_crawl  # noqa: E402
from jlse.sandbox import build_web  # noqa: E402

CHECKPOINTS = (100, 300, 500, 1000)
SEED = 7


def crawl_harvest(topic_dir: Path, workdir: Path, overrides: dict, truth, topic: str) -> list:
    run_crawl(topic_dir, overrides, workdir=workdir, fresh=True, progress=False)
    curve = harvest_curve(fetched_urls(workdir / "crawl.db"), truth, topic)
    return [round(float(curve[n - 1]), 3) if len(curve) >= n else None for n in CHECKPOINTS]


def bench_topic(topic: str, web, truth, proxy: str, args, work: Path) -> dict[str, list]:
    crawl = {"proxy": proxy, "max_pages": args.budget, "politeness_delay": 0.0}
    samples = web.write_topic_dir(topic, work / "samples")
    keywords = web.write_topic_dir(topic, work / "keywords", keywords_only=True)
    found = {}
    for name, bootstrap in (("discover+crawl", False), ("bootstrap", True)):
        started = time.monotonic()
        run_discovery(keywords, proxy, {"proxy": proxy, "max_pages": args.discover_pages,
                                        "politeness_delay": 0.05},
                      workdir=work / f"discover-{name}", progress=False,
                      topic_out=work / f"found-{name}", bootstrap_samples=bootstrap)
        found[name] = work / f"found-{name}"
        print(f"  {topic}: discovery for {name} took {time.monotonic() - started:.0f} s",
              flush=True)
    runs = {"samples": (samples, {}), "keywords": (keywords, {}),
            "discover+crawl": (found["discover+crawl"], {}),
            "bootstrap": (found["bootstrap"], {}), "bfs": (keywords, {"strategy": "bfs"})}
    return {label: crawl_harvest(folder, work / f"crawl-{label}", {**crawl, **extra}, truth,
                                 topic)
            for label, (folder, extra) in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", default="cameras,phones,laptops")
    parser.add_argument("--budget", type=int, default=1000, help="pages per crawl")
    parser.add_argument("--discover-pages", type=int, default=500)
    parser.add_argument("--quick", action="store_true",
                        help="cameras only, 500-page crawls, 200-page discovery")
    args = parser.parse_args()
    if args.quick:
        args.topics, args.budget, args.discover_pages = "cameras", 500, 200
    web = build_web(seed=SEED, discovery=True)
    with tempfile.TemporaryDirectory() as tmp, sandbox_process(SEED, discovery=True) as proxy:
        truth = load_truth(web.write_truth(Path(tmp) / "truth.jsonl"))
        print(f"harvest @{', @'.join(map(str, CHECKPOINTS))} (ground truth); share = harvest "
              f"@{args.budget} / the samples crawl's")
        for topic in args.topics.split(","):
            results = bench_topic(topic, web, truth, proxy, args, Path(tmp) / topic)
            reference = results["samples"][-1] or 0.0
            for label, curve in results.items():
                share = f"{curve[-1] / reference:.2f}" if reference and curve[-1] else "-"
                print(f"{topic:8} {label:15} {curve}  share {share}", flush=True)


if __name__ == "__main__":
    main()
