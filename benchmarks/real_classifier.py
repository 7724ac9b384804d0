"""How much of `jlse`'s gap to the oracle on the real-text web is the page classifier's.

    .venv/bin/python benchmarks/real_classifier.py confusion [--negatives random|stratified]
    .venv/bin/python benchmarks/real_classifier.py ceiling [EVAL ARGS...]

``confusion``: each topic's page classifier (trained from its topic directory, as a crawl
trains it) over every page of the real-text web; prints, per topic, the share of each true
topic's pages it judges relevant (the diagonal is recall, the rest what the crawl will harvest
by mistake), and among the pages it judges relevant the median P of its right ones and of its
mistakes and the AUC of P between them. About 1 minute.

``ceiling``: ``jlse eval --web real`` (the arguments after ``ceiling``, e.g. ``--strategies
jlse --budget 1000 --checkpoints 250,500,1000 --out runs/ceiling``) with every topic model's
page relevance replaced by the ground truth (1 for a page of the topic, 0 otherwise, matched
by the page's text): the efficiency the link ranking reaches when the classifier makes no
mistake. Pages whose text is not the real web's (none on this web) keep the model's score.

``replay OUT``: the pages each ``jlse`` crawl of a ``jlse eval --web real|newswire --out OUT``
fetched, judged again in fetch order by a fresh topic model with self-training, as the crawl
judged them (seconds, not a crawl): per topic the precision and recall of the judgements
against the labels, the AUC of the self-trained classifier's log-odds and its cost in ms per
page judged, on the web (seed, fraction) the eval's report.json names. A bench for the
classifier alone: change it, replay, compare. ``--passes N``
judges the pages N times over, as a crawl N times as long would meet them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from jlse.eval import GroundTruth, fetched_urls, load_truth
from jlse.models.self_training import SelfTrainedRelevance
from jlse.models.topic_model import TopicModel
from jlse.sandbox import REAL_WEBS
from jlse.sandbox.realweb.web import RealWeb, build_real_web
from jlse.scheduler.urls import host_of
from jlse.topic import build_topic_model, load_topic
from jlse.workers.charset import decode_html
from jlse.workers.parser import parse_html
from jlse.workers.pipeline import page_text


def text_topics(web: RealWeb) -> dict[str, str]:
    """The classifier's text of every served page -> its true topic ("hub" for the rest)."""
    topics = {}
    for truth in web.iter_truth():
        body = web.page_bytes(truth.url)
        if body is None:
            continue
        text, _ = decode_html(body, None)
        topics[page_text(parse_html(text, truth.url))] = truth.topic
    return topics


def confusion(negatives: str) -> None:
    web = build_real_web()
    web.negatives = negatives
    by_text = text_topics(web)
    texts, true_topics = list(by_text), np.array(list(by_text.values()))
    names = sorted(set(true_topics) - {"hub"})
    print(f"share of each true topic's pages judged relevant ({negatives} negatives)")
    print("model      " + " ".join(f"{name[:8]:>8}" for name in names))
    with tempfile.TemporaryDirectory() as folder:
        for topic in web.topics:
            web.write_topic_dir(topic, Path(folder) / topic)
            model = build_topic_model(load_topic(Path(folder) / topic))
            scores = model.relevance_texts(texts)
            judged = scores >= model.relevance_threshold
            cells = [judged[true_topics == name].mean() for name in names]
            print(f"{topic:10s} " + " ".join(f"{cell:8.2f}" for cell in cells)
                  + sureness(scores, judged, true_topics, topic), flush=True)


def sureness(scores: np.ndarray, judged: np.ndarray, true_topics: np.ndarray, topic: str) -> str:
    """Among the pages judged relevant: the median P of the topic's own pages and of the
    others' (the mistakes), and the AUC of P between them (what ``relevance_exponent`` uses)."""
    right = judged & (true_topics == topic)
    wrong = judged & (true_topics != topic) & (true_topics != "hub")
    if not right.any() or not wrong.any():
        return ""
    labels = np.r_[np.ones(right.sum()), np.zeros(wrong.sum())]
    auc = roc_auc_score(labels, np.r_[scores[right], scores[wrong]])
    return (f"   judged relevant: median P {np.median(scores[right]):.3f} right, "
            f"{np.median(scores[wrong]):.3f} wrong, AUC {auc:.2f}")


def ceiling(eval_args: list[str]) -> int:
    by_text = text_topics(build_real_web())
    model_topic: dict[int, str] = {}
    scored = TopicModel.relevance_texts

    def truthful(self: TopicModel, texts):  # noqa: ANN001, ANN202
        scores = np.asarray(scored(self, texts), dtype=float)
        topic = model_topic.get(id(self))
        known = [by_text.get(text) for text in texts]
        return np.array([score if true is None or topic is None else float(true == topic)
                         for score, true in zip(scores, known, strict=True)])

    import jlse.run as run  # the crawl builds its topic model through this name
    built = run.build_topic_model

    def labelled_model(topic):  # noqa: ANN001, ANN202
        model = built(topic)
        if model is not None:
            model_topic[id(model)] = topic.name
        return model

    TopicModel.relevance_texts = truthful
    run.build_topic_model = labelled_model
    from jlse.cli import main
    return main(["eval", "--web", "real", *eval_args])


def replay(out: Path, strategy: str, passes: int = 1) -> None:
    if not (out / "truth.jsonl").is_file():
        sys.exit(f"{out}: not the --out directory of a jlse eval (no truth.jsonl)")
    truth = load_truth(out / "truth.jsonl")
    web_of = _report_web(out)
    crawls = sorted(path for path in out.iterdir() if (path / strategy / "crawl.db").is_file())
    if not crawls:
        sys.exit(f"{out}: no {strategy} crawl (expected TOPIC/{strategy}/crawl.db)")
    name = web_of.get("name") or (  # a report of before it named its web
        "newswire" if host_of(next(iter(truth.topic_of))).endswith(".wire") else "real")
    web = REAL_WEBS[name](web_of.get("seed", 7), web_of.get("fraction", 1.0))
    print(f"{'topic':12s} {'pages':>5s} {'precision':>9s} {'recall':>6s} {'AUC':>5s} {'ms/page':>7s}")
    for crawl in crawls:
        model = build_topic_model(load_topic(out / "topics" / crawl.name))
        judge = SelfTrainedRelevance.of(model)
        if judge is None:
            print(f"{crawl.name:12s} no self-training (no keywords or not an NB)")
            continue
        texts, labels = _crawled_pages(web, truth, crawl / strategy / "crawl.db", crawl.name)
        started = time.perf_counter()
        scores = [judge.relevance(text) for _ in range(passes) for text in texts]
        per_page = (time.perf_counter() - started) * 1000 / max(1, len(scores))
        print(_judgement_line(crawl.name, np.array(scores, dtype=float),
                              np.array(labels * passes, dtype=bool), model)
              + f" {per_page:7.3f}")


def _report_web(out: Path) -> dict:
    """The name, seed and fraction of the eval's web, from its report.json (an eval that did
    not record them was of the default seed and fraction)."""
    try:
        return json.loads((out / "report.json").read_text(encoding="utf-8")).get("web", {})
    except (OSError, ValueError):
        return {}


def _crawled_pages(web: RealWeb, truth: GroundTruth, crawl_db: Path, topic: str
                   ) -> tuple[list[str], list[bool]]:
    """The text of each page the crawl fetched, in fetch order, and whether it is relevant."""
    texts, labels = [], []
    for url in fetched_urls(crawl_db):
        body = web.page_bytes(url)
        if body is None:
            continue  # a redirect or an error: no page judged
        html, _ = decode_html(body, None)
        texts.append(page_text(parse_html(html, url)))
        labels.append(truth.is_relevant(url, topic))
    return texts, labels


def _judgement_line(topic: str, scores: np.ndarray, labels: np.ndarray,
                    model: TopicModel) -> str:
    judged = scores >= model.relevance_threshold
    precision = (judged & labels).sum() / max(1, judged.sum())
    recall = (judged & labels).sum() / max(1, labels.sum())
    clipped = np.clip(scores, 1e-15, 1 - 1e-15)
    auc = (roc_auc_score(labels, np.log(clipped) - np.log1p(-clipped))
           if 0 < labels.mean() < 1 else float("nan"))
    return f"{topic:12s} {len(scores):5d} {precision:9.3f} {recall:6.3f} {auc:5.3f}"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    matrix = sub.add_parser("confusion", help="each topic's classifier over the whole web")
    matrix.add_argument("--negatives", choices=("random", "stratified"), default="random")
    sub.add_parser("ceiling", help="jlse eval --web real with a classifier that knows the labels")
    again = sub.add_parser("replay", help="a jlse eval's crawls' pages judged again, offline")
    again.add_argument("out", type=Path, help="the --out directory of a jlse eval")
    again.add_argument("--strategy", default="jlse", help="whose crawls (default: jlse)")
    again.add_argument("--passes", type=int, default=1,
                       help="judge the pages this many times over, as a longer crawl would "
                            "(default: 1)")
    known, rest = parser.parse_known_args(argv)
    known.eval_args = rest
    return known


if __name__ == "__main__":
    args = parse_args(sys.argv[1:])
    if args.command == "confusion":
        confusion(args.negatives)
        sys.exit(0)
    if args.command == "replay":
        replay(args.out, args.strategy, args.passes)
        sys.exit(0)
    sys.exit(ceiling(args.eval_args))
