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

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jlse.models.persist import HEADER_FILE, load_topic_model, read_model_header
from jlse.models.strategy_catalog import available_strategies
from jlse.models.topic_model import TopicModel, TopicSamples
from jlse.models.vsm import PositionVSM
from jlse.scheduler.urls import canonicalize
from jlse.settings import Settings, SettingsError, load_settings
from jlse.workers.charset import decode_html
from jlse.workers.parser import ParsedPage, parse_html
from jlse.workers.pipeline import page_text

log = logging.getLogger(__name__)

SAMPLE_KINDS = ("relevant", "irrelevant", "target", "nontarget")
SAMPLE_SUFFIXES = (".html", ".htm", ".xhtml")
MODEL_DIR = "model"  # saved model files (jlse train) inside the topic directory
PAGE_CV_KEYS = {"page_nb": "nb", "page_kde_nb": "kde-nb", "vsm": "vsm"}  # model source -> CV key
BOOTSTRAP_FILE = "bootstrap.json"  # in samples/: written by jlse discover --topic-out
CHANCE_MARGIN = 0.05  # a page classifier within this of the majority class's share is "at chance"
BAD_SEEDS_SHOWN = 5  # bad lines of a seeds file named in its error (then a count)
_BOMS = ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))


class TopicError(ValueError):
    """The topic directory is missing something or holds something unreadable."""


@dataclass
class Topic:
    path: Path
    name: str
    seeds: list[str]
    settings: Settings
    samples: TopicSamples
    model_origin: str = ""  # where build_topic_model got the model: loaded, trained, none

    @property
    def has_samples(self) -> bool:
        s = self.samples
        return bool(s.relevant or s.irrelevant or s.target or s.nontarget or s.anchors or s.keywords)


def load_topic(path: Path | str, cli_overrides: dict[str, Any] | None = None,
               require_seeds: bool = True) -> Topic:
    """The topic directory at ``path``; without ``require_seeds`` (discovery from keywords) a
    missing seeds.txt gives no seeds."""
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
    seeds_file = path / "seeds.txt"
    seeds = read_seeds(seeds_file) if require_seeds or seeds_file.exists() else []
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


def read_text(path: Path) -> str:
    """A text file of the topic: UTF-8, or UTF-8/UTF-16 with a byte-order mark; anything else
    is a TopicError naming the file."""
    data = path.read_bytes()
    encoding = next((name for bom, name in _BOMS if data.startswith(bom)), "utf-8")
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise TopicError(f"{path}: not UTF-8 text (byte {data[exc.start]:#04x} at offset "
                         f"{exc.start}); save it as UTF-8") from None


def read_seeds(path: Path) -> list[str]:
    if not path.exists():
        raise TopicError(f"{path}: missing - a topic needs seed URLs, one per line")
    seeds: list[str] = []
    bad: list[tuple[int, str]] = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        url = canonicalize(line)
        if url is None:
            bad.append((number, line))
        elif url not in seeds:
            seeds.append(url)
    if bad:
        raise TopicError(_bad_seed_lines(path, bad))
    if not seeds:
        raise TopicError(f"{path}: no seed URLs")
    return seeds


def _bad_seed_lines(path: Path, bad: list[tuple[int, str]]) -> str:
    """Every bad line of a seeds file, up to ``BAD_SEEDS_SHOWN`` of them, in one message."""
    if len(bad) == 1:
        number, line = bad[0]
        return f"{path}:{number}: not an http(s) URL: {line!r}"
    shown = "; ".join(f"line {number}: {line[:80]!r}" for number, line in bad[:BAD_SEEDS_SHOWN])
    more = f"; and {len(bad) - BAD_SEEDS_SHOWN} more" if len(bad) > BAD_SEEDS_SHOWN else ""
    return f"{path}: {len(bad)} lines are not http(s) URLs: {shown}{more}"


def parse_sample(file: Path) -> ParsedPage | None:
    """Parse one sample page; a file that cannot be read or is not a page (empty, binary, no
    text) is skipped with a warning naming it."""
    try:
        body = file.read_bytes()
    except OSError as exc:
        log.warning("sample %s skipped: unreadable: %s", file, exc)
        return None
    problem = _not_a_page(body)
    if problem is None:
        text, _ = decode_html(body, None)
        page = parse_html(text, file.resolve().as_uri().replace("file://", "http://sample"))
        if page_text(page).strip():
            return page
        problem = "no text in it"
    log.warning("sample %s skipped: not a page (%s)", file, problem)
    return None


def _not_a_page(body: bytes) -> str | None:
    """Why ``body`` cannot be an HTML page (empty, binary), or None."""
    if not body.strip():
        return "empty"
    if any(body.startswith(bom) for bom, _ in _BOMS[1:]):  # UTF-16: NUL bytes are expected
        return None
    head = body[:8192]
    controls = sum(byte < 32 and byte not in (9, 10, 12, 13) for byte in head)
    if b"\x00" in head or controls > len(head) // 100:
        return "binary data"
    return None


def _read_pages(folder: Path) -> list[ParsedPage]:
    if not folder.is_dir():
        return []
    files = sorted(p for p in folder.iterdir() if p.is_file())
    for file in files:
        if file.suffix.lower() not in SAMPLE_SUFFIXES:
            log.warning("sample %s ignored: a sample page is named *.html, *.htm or *.xhtml", file)
    pages = (parse_sample(p) for p in files if p.suffix.lower() in SAMPLE_SUFFIXES)
    return [page for page in pages if page is not None]


def read_anchors(path: Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    anchors: list[tuple[str, int]] = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
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


def new_topic_model(settings: Settings) -> TopicModel:
    """An unfitted topic model as ``settings`` configure it (the crawl's and ``jlse train``'s)."""
    return TopicModel(relevance_threshold=settings.relevance_threshold,
                      anchor_floor=settings.anchor_floor, page_classifier=settings.page_classifier,
                      balance_scripts=settings.balance_scripts)


def build_topic_model(topic: Topic) -> TopicModel | None:
    """The saved model of ``topic/model/`` when it loads and fits the topic as it is now, else
    a model fitted from the samples; None when the topic has no samples or keywords."""
    if not topic.has_samples:
        log.warning("topic %s has no samples or keywords: pages will not be classified", topic.name)
        topic.model_origin = "none: the topic has no samples or keywords"
        return None
    saved = saved_topic_model(topic)
    if saved is not None:
        topic.model_origin = (f"loaded from {topic.path / MODEL_DIR} (jlse train): "
                              f"{relevance_reason(topic, saved.sources_['relevance'])}")
        return saved
    model = new_topic_model(topic.settings)
    try:
        model.fit(topic.samples)
    except ValueError as exc:
        raise TopicError(f"{topic.path / 'samples'}: cannot train the topic model: {exc}") from None
    samples = topic.samples
    topic.model_origin = (f"trained on the fly: "
                          f"{relevance_reason(topic, model.sources_['relevance'])}")
    if samples.relevant and samples.irrelevant:
        warn_if_at_chance(topic, model.cross_validate(samples)["relevance"], "the model trained "
                          "on the fly")
    return model


def chance_level(samples: TopicSamples) -> float:
    """The accuracy of always answering the larger class of the page samples."""
    total = len(samples.relevant) + len(samples.irrelevant)
    return max(len(samples.relevant), len(samples.irrelevant)) / total if total else 1.0


def warn_if_at_chance(topic: Topic, accuracy: float, what: str) -> bool:
    """Warn when the page classifier's cross-validated accuracy is no better than guessing;
    True when it warned."""
    chance = chance_level(topic.samples)
    if accuracy != accuracy or accuracy > chance + CHANCE_MARGIN:  # nan: not cross-validated
        return False
    log.warning("topic %s: %s tells relevant from irrelevant pages no better than chance "
                "(cross-validated accuracy %.2f, chance %.2f): check the sample pages in %s",
                topic.name, what, accuracy, chance, topic.path / "samples")
    return True


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
    cv_page = (read_model_header(directory).get("cv_report") or {}).get(
        PAGE_CV_KEYS.get(model.sources_.get("relevance", ""), ""), {})
    if cv_page.get("accuracy") is not None:
        warn_if_at_chance(topic, cv_page["accuracy"], f"the saved model in {directory}")
    return model


def read_bootstrap(topic_dir: Path) -> dict | None:
    """What ``jlse discover --topic-out`` bootstrapped in ``topic_dir`` (None: nothing)."""
    try:
        return json.loads((Path(topic_dir) / "samples" / BOOTSTRAP_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return None


def relevance_reason(topic: Topic, source: str) -> str:
    """Why the topic's pages are judged by the model ``source`` (TopicModel.sources_)."""
    samples = topic.samples
    if source in ("page_nb", "page_kde_nb"):
        kind = "multinomial NB" if source == "page_nb" else "kernel-density NB"
        why = (f"{kind} trained on {len(samples.relevant)} relevant and "
               f"{len(samples.irrelevant)} irrelevant sample pages")
        bootstrap = read_bootstrap(topic.path)
        if bootstrap:
            origins = "; ".join(f"{kind}: {bootstrap[kind]['from']}"
                                for kind in ("relevant", "irrelevant") if kind in bootstrap)
            why += f" (bootstrapped by jlse discover - {origins})"
        return why
    if source == "vsm" and not (samples.relevant and samples.irrelevant):
        return (f"the position-weighted VSM of the {len(samples.keywords)} keywords "
                "(docs/algorithms.md §4): " + _how_to_train(topic))
    if source == "vsm":
        return (f"the position-weighted VSM of the {len(samples.keywords)} keywords "
                f"(page_classifier = vsm), idf from the {len(samples.relevant) + len(samples.irrelevant)} "
                "sample pages")
    if source == "keywords":
        return "keyword overlap: the VSM found no usable keyword"
    if source == "anchor_nb":
        return "NB over the labelled anchor texts: no sample pages nor keywords"
    return source


def _how_to_train(topic: Topic) -> str:
    """What a topic without both classes of samples needs for a trained classifier; not the
    bootstrap command again on a topic that command made (it would make the same samples)."""
    samples = topic.samples
    bootstrap = read_bootstrap(topic.path)
    if bootstrap is None:
        return ("a keyword-only topic has no sample pages to train a classifier on. To train "
                f"one, bootstrap samples: jlse discover --topic {topic.path} --search URL "
                "--topic-out NEW_DIR --bootstrap-samples")
    lacking = "relevant" if not samples.relevant else "irrelevant"
    return (f"the samples bootstrapped by jlse discover have {len(samples.relevant)} relevant "
            f"and {len(samples.irrelevant)} irrelevant pages, and a classifier needs both. Add "
            f"{lacking} pages to {topic.path / 'samples' / lacking}/ (saved HTML), or bootstrap "
            "again from a longer discovery run (--max-pages) of the source topic "
            f"{bootstrap.get('source_topic', '')}")


def _stale_reason(model: TopicModel, topic: Topic) -> str:
    """Why ``model`` does not fit ``topic`` as it is now ("" when it does)."""
    if model.fingerprint_ != topic.samples.fingerprint():
        return "the samples or keywords changed since it was trained"
    settings = topic.settings
    for name in ("page_classifier", "relevance_threshold", "anchor_floor", "balance_scripts"):
        if getattr(model, name) != getattr(settings, name):
            return f"{name} is {getattr(settings, name)!r}, the model has {getattr(model, name)!r}"
    if settings.self_training and _lacks_self_training(model, topic.samples.keywords):
        return "it was trained before self-training (docs/settings.md, self_training)"
    return ""


def _lacks_self_training(model: TopicModel, keywords: list[str]) -> bool:
    """Whether a page NB was saved without what self-training needs (its word counts, and
    the keywords' VSM when the topic has usable keywords)."""
    if model.sources_.get("relevance") != "page_nb":
        return False
    if getattr(model.relevance_model_, "class_counts_", None) is None:
        return True
    return model.keyword_view_ is None and PositionVSM(keywords).usable
