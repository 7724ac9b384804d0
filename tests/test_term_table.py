"""A field's vocabulary as mapped arrays (``models/term_table.py``): a batch of tokens gets
exactly the ids a dictionary of the terms gives, whatever the hashes do, and a malformed table
is refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jlse.models import term_table
from jlse.models.bm25 import PackedTerms
from jlse.models.term_table import TermTable

TERMS = ["w1", "w2", "phone", "phones", "smartphone-x", "a" * 8, "b" * 16, "c" * 17, "手机",
         "téléphone", "e\u0301", "x" * 400, "12345678", "1234567"]
QUERIES = [*TERMS, "w3", "phon", "phonesx", "a" * 7, "a" * 9, "b" * 15, "c" * 16, "手", "手机们",
           "telephone", "é", "x" * 399, "", "a\udc80", "w1"]


def table_of(terms: list[str], key: int = 12345) -> TermTable:
    return TermTable.build(PackedTerms.pack(terms).chars, np.array([key], dtype=np.uint64))


def look_up(table: TermTable, tokens: list[str]) -> list[int]:
    strings = term_table.encode(tokens)
    return table.ids_of(strings, term_table.hash_strings(strings, table.key)).tolist()


def test_ids_are_a_dictionarys():
    table = table_of(TERMS)
    vocabulary = {term: i for i, term in enumerate(TERMS)}
    assert look_up(table, QUERIES) == [vocabulary.get(token, -1) for token in QUERIES]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)),
                        max_size=20), unique=True, max_size=40),
       st.lists(st.text(max_size=20), max_size=40))
def test_any_terms_and_tokens_get_a_dictionarys_ids(terms, others):
    table = table_of(terms)
    vocabulary = {term: i for i, term in enumerate(terms)}
    tokens = [*others, *terms[::2]]
    assert look_up(table, tokens) == [vocabulary.get(token, -1) for token in tokens]


def test_colliding_hashes_still_give_exact_ids():
    """Every term and token of one hash: each hit is checked against the term's bytes, and
    the look-up walks on past terms of the same hash."""
    built = table_of(TERMS)
    same = TermTable(built.key_array, np.zeros(len(TERMS), dtype=np.uint64), built.ids,
                     built.chars, built.ends)
    strings = term_table.encode(QUERIES)
    ids = same.ids_of(strings, np.zeros(len(QUERIES), dtype=np.uint64)).tolist()
    vocabulary = {term: i for i, term in enumerate(TERMS)}
    assert ids == [vocabulary.get(token, -1) for token in QUERIES]


def test_the_hash_depends_on_the_bytes_and_the_key_not_the_place():
    key = np.uint64(7)
    encoded = term_table.hash_strings(term_table.encode(["ab", "phones", "b" * 16]), key)
    packed = PackedTerms.pack(["phones", "xx", "b" * 16, "ab"])
    starts = packed.ends - np.diff(packed.ends, prepend=0)
    gathered = term_table.gather(packed.chars, starts[[3, 0, 2]],
                                 np.diff(packed.ends, prepend=0)[[3, 0, 2]] - 1)
    np.testing.assert_array_equal(term_table.hash_strings(gathered, key), encoded)
    assert len(set(encoded.tolist())) == 3
    other = term_table.hash_strings(term_table.encode(["ab", "phones", "b" * 16]), np.uint64(8))
    assert not np.any(other == encoded)


def test_an_empty_table_knows_nothing():
    assert look_up(table_of([]), ["a", ""]) == [-1, -1]


def saved(table: TermTable) -> dict[str, np.ndarray]:
    return {"key": table.key_array.copy(), **{name: array.copy()
                                              for name, array in table.arrays().items()},
            "chars": table.chars.copy()}


def first_term_start(arrays: dict[str, np.ndarray]) -> int:
    """Where the term of the lowest hash starts (the check recomputes that one's hash)."""
    term = int(arrays["ids"][0])
    return int(arrays["ends"][term - 1]) if term else 0


@pytest.mark.parametrize("damage, message", [
    (lambda a: a.update(hashes=a["hashes"][::-1].copy()), "unsorted"),
    (lambda a: a["ids"].__setitem__(0, a["ids"][1]), "permutation"),
    (lambda a: a["ids"].__setitem__(0, 10**6), "permutation"),
    (lambda a: a.update(ends=a["ends"][:-1].copy()), "wrong types or shapes"),
    (lambda a: a["ends"].__setitem__(2, a["ends"][2] - 1), "ends do not fit"),
    (lambda a: a.update(ids=a["ids"].astype(np.float64)), "wrong types or shapes"),
    (lambda a: a["key"].__setitem__(0, 99), "do not match their terms"),
    (lambda a: a["chars"].__setitem__(first_term_start(a), ord("z")), "do not match their terms"),
])
def test_a_malformed_table_is_refused(damage, message):
    arrays = saved(table_of([f"t{i}" for i in range(200)]))
    TermTable.from_arrays(arrays["key"], arrays["hashes"], arrays["ids"], arrays["chars"],
                          arrays["ends"])  # whole, it is accepted
    damage(arrays)
    with pytest.raises(ValueError, match=message):
        TermTable.from_arrays(arrays["key"], arrays["hashes"], arrays["ids"], arrays["chars"],
                              arrays["ends"])
