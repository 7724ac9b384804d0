"""QLAWLG: vectorised Q-learning over G_w against hand values and a plain Python reference."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jlse.models.qlearning import q_learning


def graph(n: int, edges: list[tuple[int, int]], leaves: list[int]):
    src = np.array([u for u, _ in edges], dtype=np.int64)
    dst = np.array([v for _, v in edges], dtype=np.int64)
    is_leaf = np.zeros(n, dtype=bool)
    is_leaf[leaves] = True
    return n, src, dst, is_leaf


def reference_q(n: int, edges: list[tuple[int, int]], leaves: set[int], gamma: float,
                reward: float) -> list[float]:
    """The Bellman iteration of docs/algorithms.md §1.7, one state and one action at a time."""
    q = [0.0] * n
    changed = True
    while changed:
        changed = False
        new = list(q)
        for u in range(n):
            if u in leaves:
                continue
            actions = [reward if v in leaves else gamma * q[v] for w, v in edges if w == u]
            new[u] = max(actions, default=0.0)
            changed |= new[u] != q[u]
        q = new
    return [reward if u in leaves else q[u] for u in range(n)]


def test_a_chain_gives_powers_of_gamma() -> None:
    # seed 0 -> a 1 -> b 2 -> leaf 3
    q, sweeps = q_learning(*graph(4, [(0, 1), (1, 2), (2, 3)], [3]), gamma=0.9)
    np.testing.assert_allclose(q, [0.9**2, 0.9, 1.0, 1.0])
    assert sweeps == 4  # three sweeps change a value, the fourth finds nothing to change


def test_a_branch_takes_the_better_action() -> None:
    # 0 -> 1 -> leaf 2 (two steps), 0 -> 3 -> 4 -> leaf 5 (three steps)
    q, _ = q_learning(*graph(6, [(0, 3), (3, 4), (4, 5), (0, 1), (1, 2)], [2, 5]), gamma=0.8)
    np.testing.assert_allclose(q, [0.8, 1.0, 1.0, 0.8, 1.0, 1.0])


def test_cycles_self_loops_and_duplicates_converge() -> None:
    edges = [(0, 1), (1, 0), (1, 2), (1, 2), (3, 3), (3, 4), (4, 3), (5, 0)]
    q, sweeps = q_learning(*graph(6, edges, [2]), gamma=0.5)
    np.testing.assert_allclose(q, [0.5, 1.0, 1.0, 0.0, 0.0, 0.25])
    assert sweeps == 4


def test_vertices_without_edges_and_terminal_leaves() -> None:
    # Leaf 1 has an out-edge to 2, which leads to leaf 3: a leaf is terminal, its value is reward.
    q, _ = q_learning(*graph(5, [(0, 1), (1, 2), (2, 3)], [1, 3]), gamma=0.9, reward=2.0)
    np.testing.assert_allclose(q, [2.0, 2.0, 2.0, 2.0, 0.0])


def test_no_edges_and_no_vertices() -> None:
    q, sweeps = q_learning(*graph(3, [], [1]))
    np.testing.assert_array_equal(q, [0.0, 1.0, 0.0])
    assert sweeps == 1
    q, _ = q_learning(*graph(0, [], []))
    assert q.shape == (0,)


def test_tolerance_and_max_iter_stop_early(caplog: pytest.LogCaptureFixture) -> None:
    chain = graph(6, [(i, i + 1) for i in range(5)], [5])
    exact, sweeps = q_learning(*chain, gamma=0.9)
    assert sweeps == 6
    with caplog.at_level(logging.WARNING, logger="jlse.models.qlearning"):
        partial, sweeps = q_learning(*chain, gamma=0.9, max_iter=2)
    assert sweeps == 2 and "not converged" in caplog.text
    np.testing.assert_allclose(partial, [0, 0, 0, 0.9, 1, 1])
    loose, sweeps = q_learning(*chain, gamma=0.9, tol=0.95)
    assert sweeps == 2 and np.all(loose <= exact)


@pytest.mark.parametrize("kwargs, message", [
    (dict(src=np.array([0, 1]), dst=np.array([1])), "destinations"),
    (dict(src=np.array([0]), dst=np.array([3])), "dst must hold"),
    (dict(src=np.array([-1]), dst=np.array([1])), "src must hold"),
    (dict(src=np.array([0.5]), dst=np.array([1])), "src must hold"),
    (dict(is_leaf=np.zeros(2, dtype=bool)), "is_leaf"),
    (dict(gamma=1.5), "gamma"),
    (dict(reward=-1.0), "reward"),
    (dict(max_iter=0), "max_iter"),
])
def test_bad_input_is_a_clear_value_error(kwargs: dict, message: str) -> None:
    args = dict(n_vertices=3, src=np.array([0]), dst=np.array([1]), is_leaf=np.array([0, 1, 0]))
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        q_learning(**args)


@st.composite
def random_graphs(draw):
    n = draw(st.integers(1, 12))
    vertex = st.integers(0, n - 1)
    edges = draw(st.lists(st.tuples(vertex, vertex), max_size=30))
    leaves = draw(st.sets(vertex, max_size=n))
    return n, edges, leaves


@settings(max_examples=200, deadline=None)
@given(graph_=random_graphs(), gamma=st.floats(0.0, 0.99), reward=st.floats(0.1, 5.0))
def test_matches_the_reference_and_stays_in_range(graph_, gamma: float, reward: float) -> None:
    n, edges, leaves = graph_
    q, _ = q_learning(*graph(n, edges, sorted(leaves)), gamma=gamma, reward=reward)
    assert np.all(q >= 0) and np.all(q <= reward)
    np.testing.assert_allclose(q, reference_q(n, edges, leaves, gamma, reward), rtol=1e-12)
