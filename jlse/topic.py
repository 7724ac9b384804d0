"""A topic directory: seeds, settings and samples - one reusable crawl configuration.

```
seeds.txt              one URL per line ('#' comments and blank lines ignored)
topic.toml             optional: name, keywords, any setting override
samples/relevant/*.html      samples/irrelevant/*.html    (page classifier)
samples/target/*.html        samples/nontarget/*.html     (result-page classifier)
samples/anchors.tsv          label<TAB>anchor text, label in {relevant, irrelevant}
```
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jlse.models.persist import HEADER_FILE, load_topic_model
from jlse.models.strategy_catalog import available_strategies
from jlse.models.topic_model import TopicModel, TopicSamples
from jlse.scheduler.urls import canonicalize
from jlse.settings import Settings, SettingsError, load_settings
from jlse.workers.charset import decode_html
from jlse.workers.parser import ParsedPage, parse_html
from jlse.workers.pipeline import page_text

log = logging.getLogger(__name__)

SAMPLE_KINDS = ("relevant", "irrelevant", "target", "nontarget")
MODEL_DIR = "model"  # saved model files (jlse train) inside the topic directory


class TopicError(ValueError):
    """The topic directory is missing something or holds something unreadable."""


@dataclass
class Topic:
    path: Path
    name: str
    seeds: list[str]
    settings: Settings
    samples: TopicSamples

    @property
    def has_samples(self) -> bool:
        s = self.samples
        return bool(s.relevant or s.irrelevant or s.target or s.nontarget or s.anchors or s.keywords)


def load_topic(path: Path | str, cli_overrides: dict[str, Any] | None = None) -> Topic:
    path = Path(path)
    if not path.is_dir():
        raise TopicError(f"{path}: topic directory not found")
    try:
        settings = load_settings(path / "topic.toml", cli_overrides)
        if settings.strategy not in available_strategies():
            raise SettingsError(f"strategy: unknown strategy {settings.strategy!r}; choose one "
                                f"of {', '.join(available_strategies())}")
    except SettingsError as exc:
        raise TopicError(str(exc)) from None
    seeds = read_seeds(path / "seeds.txt")
    too_long = [url for url in seeds if len(url) > settings.max_url_length]
    if too_long:
        raise TopicError(f"seed longer than max_url_length ({settings.max_url_length}): "
                         f"{too_long[0][:80]}...")
    samples = read_samples(path / "samples", settings.keywords)
    name = settings.name or path.resolve().name
    topic = Topic(path=path, name=name, seeds=seeds, settings=settings, samples=samples)
    if settings.strategy == "auto":  # the focused crawl when there is a topic to focus on
        topic.settings = replace(settings, strategy="jlse" if topic.has_samples else "bfs")
    return topic


def read_seeds(path: Path) -> list[str]:
    if not path.exists():
        raise TopicError(f"{path}: missing - a topic needs seed URLs, one per line")
    seeds: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        url = canonicalize(line)
        if url is None:
            raise TopicError(f"{path}:{number}: not an http(s) URL: {line!r}")
        if url not in seeds:
            seeds.append(url)
    if not seeds:
        raise TopicError(f"{path}: no seed URLs")
    return seeds


def parse_sample(file: Path) -> ParsedPage | None:
    """Parse one sample page; an unreadable file is logged and skipped."""
    try:
        body = file.read_bytes()
        text, _ = decode_html(body, None)
        return parse_html(text, file.resolve().as_uri().replace("file://", "http://sample"))
    except OSError as exc:
        log.warning("sample %s unreadable: %s", file, exc)
        return None


def _read_pages(folder: Path) -> list[ParsedPage]:
    if not folder.is_dir():
        return []
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".html", ".htm", ".xhtml"))
    return [page for page in map(parse_sample, files) if page is not None]


def read_anchors(path: Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    anchors: list[tuple[str, int]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        label, sep, text = line.partition("\t")
        if not sep or label.strip() not in ("relevant", "irrelevant"):
            raise TopicError(f"{path}:{number}: expected 'relevant|irrelevant<TAB>anchor text'")
        anchors.append((text.strip(), 1 if label.strip() == "relevant" else 0))
    return anchors


def read_samples(folder: Path, keywords: list[str]) -> TopicSamples:
    pages = {kind: _read_pages(folder / kind) for kind in SAMPLE_KINDS}
    return TopicSamples(
        relevant=[page_text(p) for p in pages["relevant"]],
        irrelevant=[page_text(p) for p in pages["irrelevant"]],
        target=[p.stats for p in pages["target"]],
        nontarget=[p.stats for p in pages["nontarget"]],
        anchors=read_anchors(folder / "anchors.tsv"),
        keywords=list(keywords),
    )


def build_topic_model(topic: Topic) -> TopicModel | None:
    """The saved model of ``topic/model/`` when it loads and fits the topic as it is now, else
    a model fitted from the samples; None when the topic has no samples or keywords."""
    if not topic.has_samples:
        log.warning("topic %s has no samples or keywords: pages will not be classified", topic.name)
        return None
    saved = saved_topic_model(topic)
    if saved is not None:
        return saved
    model = TopicModel(
        relevance_threshold=topic.settings.relevance_threshold,
        anchor_floor=topic.settings.anchor_floor,
        page_classifier=topic.settings.page_classifier,
    )
    try:
        return model.fit(topic.samples)
    except ValueError as exc:
        raise TopicError(f"{topic.path / 'samples'}: cannot train the topic model: {exc}") from None


def saved_topic_model(topic: Topic) -> TopicModel | None:
    """The model saved in ``topic/model/``; None (with a warning) when there is none, or it is
    incompatible or stale (other samples or model settings than the topic's)."""
    directory = topic.path / MODEL_DIR
    if not (directory / HEADER_FILE).exists():
        return None
    try:
        model = load_topic_model(directory)
    except ValueError as exc:  # ModelVersionError, ModelFileError
        log.warning("topic %s: saved model not used, training on the fly: %s", topic.name, exc)
        return None
    stale = _stale_reason(model, topic)
    if stale:
        log.warning("topic %s: saved model in %s is stale (%s); training on the fly "
                    "(run jlse train to refresh it)", topic.name, directory, stale)
        return None
    log.info("topic %s: using the saved model in %s", topic.name, directory)
    return model


def _stale_reason(model: TopicModel, topic: Topic) -> str:
    """Why ``model`` does not fit ``topic`` as it is now ("" when it does)."""
    if model.fingerprint_ != topic.samples.fingerprint():
        return "the samples or keywords changed since it was trained"
    settings = topic.settings
    for name in ("page_classifier", "relevance_threshold", "anchor_floor"):
        if getattr(model, name) != getattr(settings, name):
            return f"{name} is {getattr(settings, name)!r}, the model has {getattr(model, name)!r}"
    return ""
