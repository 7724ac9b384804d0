"""Choosing the next discovery operator: UCB1 (Auer, Cesa-Bianchi & Fischer, 2002), and a fixed
and a random chooser with the same interface for comparison.

A round's reward for an operator that returned k pages (:func:`round_reward`) is

    μ = (1/k) Σ_i (1 − pos_i/len) · I_i

with pos_i page i's position in the current combined ranking of all discovered pages (0 = best),
len the ranking's length and I_i = 0 for pages found before this round, else 1. UCB1 scores

    score_op = mean(μ_op) + sqrt(2 ln n / n_op)

with mean(μ_op) over the rounds op was chosen, n_op the pages op retrieved and n those of all
operators. An operator never tried scores +inf (tried first, in the order given).

A round that returns no pages has reward 0 and still counts as pages in n_op and n, so an
operator that never returns anything (a search engine without ``link:``) gets a finite,
shrinking bonus. How many pages it counts as is ``empty_round``: "mean" (the default) the mean
pages of the rounds that returned any, "one" a single page. With "one" the bonus shrinks far
too slowly, because the other operators' n_op grow by whole batches: in a simulation of 60
rounds, 4 operators, the others returning 20 pages of reward 0.3-0.5, the empty operator was
chosen 26 times with "one" and twice with "mean" (5 pages a round: 16 and 4 times).

UCB1 tries the searches first (``SEARCHES_FIRST``): each first try costs a whole round.

State is plain JSON (:meth:`Chooser.to_dict`, :func:`chooser_from_dict`) for ``--resume``.
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from jlse.settings import DISCOVERY_OPERATORS

# UCB1's first tries: the searches before the crawls. Each first try costs a whole round, and
# forward and backward crawl find few new sites (docs/algorithms.md §3.4).
SEARCHES_FIRST = ("keyword", "related")


def round_reward(positions: Sequence[float], already_found: Sequence[bool], length: int) -> float:
    """μ of one round (module docstring): ``positions`` of the k pages the operator returned in
    the ranking of ``length`` pages, ``already_found[i]`` True for pages known before the round.
    0.0 when k = 0."""
    if len(positions) != len(already_found):
        raise ValueError(f"round_reward: {len(positions)} positions, {len(already_found)} flags")
    if not positions:
        return 0.0
    if length <= 0:
        raise ValueError(f"round_reward: ranking length must be positive, got {length}")
    total = sum(1.0 - pos / length for pos, old in zip(positions, already_found, strict=True)
                if not old)
    return total / len(positions)


class Chooser(ABC):
    """What every chooser keeps: per operator the rounds chosen, the pages retrieved (n_op; a
    round with none counts as ``empty_round`` says) and the sum of round rewards. Subclasses
    decide :meth:`choose`; :meth:`scores` are UCB1's for all, to compare choosers."""

    kind = "chooser"

    def __init__(self, operators: Sequence[str], empty_round: str = "mean") -> None:
        if not operators or len(set(operators)) != len(operators):
            raise ValueError(f"{type(self).__name__}: operators must be distinct and not empty, "
                             f"got {list(operators)}")
        if empty_round not in ("mean", "one"):
            raise ValueError(f"{type(self).__name__}: empty_round must be 'mean' or 'one', "
                             f"got {empty_round!r}")
        self.operators = list(operators)
        self.empty_round = empty_round
        self.rounds = dict.fromkeys(self.operators, 0)
        self.pages = dict.fromkeys(self.operators, 0.0)  # n_op, empty rounds included
        self.reward_sum = dict.fromkeys(self.operators, 0.0)
        self.returned = [0, 0]  # pages, rounds: of the rounds that returned pages

    @abstractmethod
    def choose(self) -> str:
        """The operator of the next round."""

    def update(self, op: str, reward: float, n_pages: int) -> None:
        """Record a round of ``op`` that returned ``n_pages`` pages earning ``reward`` (in
        [0, 1]; taken as 0 when no pages came back)."""
        if op not in self.rounds:
            raise ValueError(f"{type(self).__name__}.update: unknown operator {op!r}")
        if n_pages < 0 or not 0.0 <= reward <= 1.0:
            raise ValueError(f"{type(self).__name__}.update: need n_pages >= 0 and reward in "
                             f"[0, 1], got {n_pages} and {reward}")
        self.rounds[op] += 1
        if n_pages > 0:
            self.pages[op] += n_pages
            self.reward_sum[op] += reward
            self.returned = [self.returned[0] + n_pages, self.returned[1] + 1]
        else:
            self.pages[op] += self.empty_round_pages()

    def empty_round_pages(self) -> float:
        """The pages a round that returned none counts as (``empty_round``), at least 1."""
        if self.empty_round == "one" or self.returned[1] == 0:
            return 1.0
        return max(1.0, self.returned[0] / self.returned[1])

    def mean_reward(self, op: str) -> float:
        """mean(μ_op) over the rounds ``op`` was chosen; 0.0 before its first."""
        return self.reward_sum[op] / self.rounds[op] if self.rounds[op] else 0.0

    def scores(self) -> dict[str, float]:
        """The UCB1 score of every operator (+inf if never tried), whatever the chooser."""
        n = sum(self.pages.values())
        return {op: self.mean_reward(op) + math.sqrt(2.0 * math.log(n) / self.pages[op])
                if self.rounds[op] else math.inf for op in self.operators}

    def to_dict(self) -> dict[str, Any]:
        """The state as JSON-ready data; :func:`chooser_from_dict` restores it."""
        return {"kind": self.kind, "operators": list(self.operators),
                "empty_round": self.empty_round, "rounds": dict(self.rounds),
                "pages": dict(self.pages), "reward_sum": dict(self.reward_sum),
                "returned": list(self.returned), **self._params()}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> Chooser:
        """The chooser :meth:`to_dict` described."""
        if state.get("kind") != cls.kind:
            raise ValueError(f"{cls.__name__}.from_dict: state of a {state.get('kind')!r} chooser")
        chooser = cls(state["operators"], empty_round=state["empty_round"],
                      **cls._restored_params(state))
        chooser.load_stats(state)
        return chooser

    def load_stats(self, state: dict[str, Any]) -> None:
        """Take the statistics of another chooser's :meth:`to_dict` (of the same operators)."""
        if list(state["operators"]) != self.operators:
            raise ValueError(f"{type(self).__name__}: saved operators {state['operators']} "
                             f"differ from {self.operators}")
        self.rounds = {op: int(state["rounds"][op]) for op in self.operators}
        self.pages = {op: float(state["pages"][op]) for op in self.operators}
        self.reward_sum = {op: float(state["reward_sum"][op]) for op in self.operators}
        self.returned = [int(state["returned"][0]), int(state["returned"][1])]

    def _params(self) -> dict[str, Any]:
        return {}

    @classmethod
    def _restored_params(cls, state: dict[str, Any]) -> dict[str, Any]:
        return {}


class UCB1(Chooser):
    """The untried operators first (those in ``try_first`` in that order, then the rest in the
    given order), then the highest UCB1 score; ties go to the operator listed first."""

    kind = "ucb1"

    def __init__(self, operators: Sequence[str], empty_round: str = "mean",
                 try_first: Sequence[str] = ()) -> None:
        super().__init__(operators, empty_round)
        self.try_first = [op for op in try_first if op in self.rounds]

    def choose(self) -> str:
        untried = [op for op in self.try_first + self.operators if not self.rounds[op]]
        if untried:
            return untried[0]
        scores = self.scores()
        return max(self.operators, key=lambda op: (scores[op], -self.operators.index(op)))

    def _params(self) -> dict[str, Any]:
        return {"try_first": list(self.try_first)}

    @classmethod
    def _restored_params(cls, state: dict[str, Any]) -> dict[str, Any]:
        return {"try_first": state.get("try_first", ())}


class FixedChooser(Chooser):
    """Always ``operator``."""

    kind = "fixed"

    def __init__(self, operators: Sequence[str], operator: str | None = None,
                 empty_round: str = "mean") -> None:
        super().__init__(operators, empty_round)
        self.operator = self.operators[0] if operator is None else operator
        if self.operator not in self.rounds:
            raise ValueError(f"FixedChooser: {self.operator!r} is not among {self.operators}")

    def choose(self) -> str:
        return self.operator

    def _params(self) -> dict[str, Any]:
        return {"operator": self.operator}

    @classmethod
    def _restored_params(cls, state: dict[str, Any]) -> dict[str, Any]:
        return {"operator": state["operator"]}


class RandomChooser(Chooser):
    """A uniformly random operator, reproducible from ``seed`` and the number of rounds so far
    (so a resumed run makes the same choices)."""

    kind = "random"

    def __init__(self, operators: Sequence[str], seed: int = 0,
                 empty_round: str = "mean") -> None:
        super().__init__(operators, empty_round)
        self.seed = seed

    def choose(self) -> str:
        done = sum(self.rounds.values())
        return random.Random(f"{self.seed}:{done}").choice(self.operators)

    def _params(self) -> dict[str, Any]:
        return {"seed": self.seed}

    @classmethod
    def _restored_params(cls, state: dict[str, Any]) -> dict[str, Any]:
        return {"seed": state["seed"]}


CHOOSERS: dict[str, type[Chooser]] = {c.kind: c for c in (UCB1, FixedChooser, RandomChooser)}


def chooser_from_dict(state: dict[str, Any]) -> Chooser:
    """Any chooser's :meth:`Chooser.to_dict` state back as that chooser."""
    kind = state.get("kind")
    if kind not in CHOOSERS:
        raise ValueError(f"chooser_from_dict: unknown chooser kind {kind!r}")
    return CHOOSERS[kind].from_dict(state)


def make_chooser(kind: str, state: dict[str, Any] | None = None,
                 operators: Sequence[str] = DISCOVERY_OPERATORS,
                 empty_round: str = "mean", try_first: Sequence[str] = SEARCHES_FIRST) -> Chooser:
    """The chooser ``kind`` names: "ucb1", "random" or an operator (always that one). A saved
    ``state`` (any chooser's :meth:`Chooser.to_dict`) gives its statistics, so a run resumed
    with another chooser keeps what the rounds so far have shown. UCB1 tries the operators in
    ``try_first`` first (the searches, by default)."""
    if kind == UCB1.kind:
        chooser: Chooser = UCB1(operators, empty_round, try_first)
    elif kind == RandomChooser.kind:
        chooser = RandomChooser(operators, (state or {}).get("seed", 0), empty_round)
    elif kind in operators:
        chooser = FixedChooser(operators, kind, empty_round)
    else:
        raise ValueError(f"make_chooser: 'ucb1', 'random' or one of {list(operators)}, "
                         f"got {kind!r}")
    if state:
        chooser.load_stats(state)
    return chooser
