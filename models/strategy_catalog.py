"""Strategies by name: the one list of what ``--strategy`` accepts, and how each is built
(the table of what each does is in ``jlse.models.strategies``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jlse.models.context_graph import ContextGraphStrategy, PageLog
from jlse.models.holder import ModelHolder
from jlse.models.jlse_evaluator import JLSEEvaluator
from jlse.models.opic import CashSplit
from jlse.models.qtable import QTable
from jlse.models.strategies import (
    AnchorTextAnalysis,
    BayesContext,
    BestFirst,
    BreadthFirst,
    JointLinkSimilarity,
    JointLinkSimilarityProduct,
    KeywordVSM,
    LearnedTunnelling,
    Strategy,
)
from jlse.models.tokenizer import tokenize
from jlse.models.topic_model import TopicModel
from jlse.settings import Settings


class UnknownStrategy(ValueError):
    pass


class StrategyError(ValueError):
    """The strategy cannot run with this topic (e.g. it needs a topic model or keywords)."""


QTableSource = Callable[[], QTable | None]
_Builder = Callable[[Settings, TopicModel | None, QTableSource, dict[str, Any]], Strategy]


def _require_model(name: str, model: TopicModel | None) -> TopicModel:
    if model is None:
        raise StrategyError(f"strategy {name!r} needs a topic model: give the topic sample "
                            "pages, labelled anchors or keywords")
    return model


def _build_ata(settings, model, qtable, base) -> Strategy:
    return AnchorTextAnalysis(_require_model("ata", model).anchor_similarity, **base)


def _build_jlse(cls: type[JointLinkSimilarity]) -> _Builder:
    def build(settings, model, qtable, base) -> Strategy:
        anchor_similarity = _require_model(cls.name, model).anchor_similarity
        evaluator = JLSEEvaluator(anchor_similarity, qtable, product=cls.product)
        if cls is LearnedTunnelling:
            return cls(evaluator, tunnel_weight=settings.tunnel_weight,
                       section_links=settings.section_links,
                       link_text_relevance=model.link_text_relevance,
                       link_text_weight=settings.link_text_weight,
                       relevance_exponent=settings.relevance_exponent,
                       site_optimism=(None if settings.site_optimism < 0
                                      else settings.site_optimism),
                       redirect_waste=settings.redirect_waste,
                       shape_harvest=settings.shape_harvest,
                       site_entries=settings.site_entries,
                       tunnel_entries=settings.tunnel_entries,
                       site_discovery=settings.site_discovery,
                       prospect_share=(settings.low_priority_share
                                       if settings.site_prospects else 0.0),
                       link_outcomes=settings.link_outcomes,
                       known_titles=settings.known_titles,
                       tunnel_share=(settings.low_priority_share
                                     if settings.tunnel_off_site else 0.0), **base)
        return cls(evaluator, **base)

    return build


def _build_opic(settings, model, qtable, base) -> Strategy:
    weight = settings.opic_relevance_weight
    anchor_similarity = None if model is None else model.anchor_similarity
    return CashSplit(anchor_similarity, relevance_weight=weight, **base)


def _build_bayes(settings, model, qtable, base) -> Strategy:
    return BayesContext(_require_model("bayes", model).link_text_relevance, **base)


def _build_cfc(settings, model, qtable, base) -> Strategy:
    _require_model("cfc", model)
    return ContextGraphStrategy(ModelHolder(), PageLog(settings.cfc_page_log),
                                n_layers=settings.cfc_layers, **base)


def _build_vsm(settings, model, qtable, base) -> Strategy:
    if not any(tokenize(keyword) for keyword in settings.keywords):
        raise StrategyError("strategy 'vsm' needs topic keywords (keywords = [...] in topic.toml)")
    return KeywordVSM(settings.keywords, **base)


_BUILDERS: dict[str, _Builder] = {
    "bfs": lambda settings, model, qtable, base: BreadthFirst(**base),
    "best-first": lambda settings, model, qtable, base: BestFirst(**base),
    "ata": _build_ata,
    "jlse": _build_jlse(LearnedTunnelling),
    "jlse-paper": _build_jlse(JointLinkSimilarity),
    "jlse-product": _build_jlse(JointLinkSimilarityProduct),
    "opic": _build_opic,
    "bayes": _build_bayes,
    "vsm": _build_vsm,
    "cfc": _build_cfc,
}


_CLASSES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (BreadthFirst, BestFirst, AnchorTextAnalysis, LearnedTunnelling,
                              JointLinkSimilarity, JointLinkSimilarityProduct, CashSplit,
                              BayesContext, KeywordVSM, ContextGraphStrategy)
}


def available_strategies() -> list[str]:
    return sorted([*_BUILDERS, "auto"])


def strategy_class(name: str) -> type[Strategy] | None:
    """The class behind a strategy name (its capabilities: ``learns``, ``embedded_only``);
    None for "auto" or an unknown name."""
    return _CLASSES.get(name)


def make_strategy(name: str, settings: Settings, model: TopicModel | None = None,
                  qtable: Callable[[], QTable | None] = lambda: None) -> Strategy:
    """The strategy ``name`` for a crawl with ``settings``, its topic model and Q-table source.

    ``qtable`` returns the current Q-table (None before the learner first ran); only the
    ``jlse`` strategies read it. Raises ``UnknownStrategy`` or ``StrategyError`` (ValueErrors).
    """
    if name == "auto":  # as jlse.topic resolves it: focused when there is a topic model
        name = "bfs" if model is None else "jlse"
    try:
        build = _BUILDERS[name]
    except KeyError:
        raise UnknownStrategy(
            f"strategy {name!r} is not available in this version; available: "
            f"{', '.join(available_strategies())}"
        ) from None
    base = {"relevance_threshold": settings.relevance_threshold,
            "expand_targets": settings.expand_targets, "hard_focus": settings.hard_focus}
    return build(settings, model, qtable, base)
