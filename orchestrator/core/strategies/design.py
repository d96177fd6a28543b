"""Regular two-level fractional factorial designs: which runs, their resolution, their aliases.

A 2^(k-p) fraction runs every combination of k-p *basic* two-level factors; each of the p other
factors is set by a generator, the product of some basic factors (``e = abcd``: in 0/1 coding,
``e`` is the XOR of ``a b c d``). The defining relation is every product of the generator words
(``I = ABCDE``); an effect is aliased with its product with each word, and the resolution is the
length of the shortest word. At resolution V main effects and two-factor interactions are aliased
only with interactions of three or more factors, which are assumed negligible.

The generators are not searched for here: they are the minimum-aberration designs tabulated in
D. C. Montgomery, *Design and Analysis of Experiments* (Wiley), "Selected 2^(k-p) Fractional
Factorial Designs" (Table 8.14 in recent editions), for 4 to 11 two-level factors and up to 128
runs, plus the half fraction (the last factor the product of all others). pyDOE3 1.6.2 was
considered: its ``fracfact_by_res`` refuses 2^(5-1)_V and returns resolution-IV designs for
7-10 factors when asked for V, and ``fracfact_opt`` is an exhaustive search. The resolution of
every design below is recomputed from its words (``Design.resolution``), and the tests check it.

Factors with more than two levels are crossed in full with the fraction of the two-level ones:
they enter no word, so the fraction's resolution holds for the whole design.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

SOURCE = "Montgomery, Design and Analysis of Experiments: Selected 2^(k-p) Fractional " \
    "Factorial Designs (Table 8.14)"
MAX_FACTORS = 11  # two-level factors the table covers (experiments/campaign_checks.py agrees)
MIN_RESOLUTION = 4  # at III, main effects are aliased with two-factor interactions: the culprits

# k -> the tabulated fractions of resolution IV or more, as generator words over the basic
# factors a, b, c, ... (the generated factors follow the basic ones). The 1/2 fraction of k
# factors (generator: all k-1 basic factors) is added by `_candidates`.
_TABLE: dict[int, tuple[tuple[str, ...], ...]] = {
    6: (("abc", "bcd"),),
    7: (("abcd", "abde"), ("abc", "bcd", "acd")),
    8: (("abcd", "abef"), ("abc", "abd", "bcde"), ("bcd", "acd", "abc", "abd")),
    9: (("acdfg", "bcefg"), ("abcd", "acef", "cdef"), ("bcde", "acde", "abde", "abce")),
    10: (("abcg", "bcde", "acdf"), ("bcdf", "acdf", "abde", "abce"),
         ("abcd", "abce", "abde", "acde", "bcde")),
    11: (("abcg", "bcde", "acdf", "abcdefg"), ("cde", "abcd", "abf", "bdef", "adef"),
         ("abc", "bcd", "cde", "acd", "ade", "bde")),
}

ROMAN = {4: "IV", 5: "V", 6: "VI", 7: "VII", 8: "VIII", 9: "IX", 10: "X", 11: "XI"}


class DesignError(ValueError):
    """No design matches what was asked (too many two-level factors for the table)."""


Word = frozenset[str]


def gray_order(factors: Mapping[str, Sequence[str]]) -> list[dict[str, str]]:
    """Every variant, ordered so that neighbours differ in exactly one factor.

    A reflected mixed-radix Gray code: consecutive trials restart as few services as possible.
    """
    names = list(factors)
    if not names:
        return [{}]
    first, rest = names[0], {name: factors[name] for name in names[1:]}
    tail = gray_order(rest)
    order: list[dict[str, str]] = []
    for index, level in enumerate(factors[first]):
        block = tail if index % 2 == 0 else list(reversed(tail))
        order.extend({first: level, **variant} for variant in block)
    return order


def effect_name(effect: Iterable[str]) -> str:
    return "×".join(sorted(effect))


@dataclass(frozen=True)
class Design:
    """The variants to run: a regular fraction of the two-level factors, crossed in full with the
    factors of more levels. With no generators it is the full factorial."""

    factors: Mapping[str, tuple[str, ...]]
    generators: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # factor -> basic
    anchor: Mapping[str, str] = field(default_factory=dict)  # a variant the fraction contains

    @classmethod
    def full(cls, factors: Mapping[str, Sequence[str]]) -> Design:
        return cls({name: tuple(levels) for name, levels in factors.items()})

    @property
    def fractional(self) -> bool:
        return bool(self.generators)

    @property
    def two_level(self) -> list[str]:
        return [name for name, levels in self.factors.items() if len(levels) == 2]

    @property
    def basic(self) -> list[str]:
        return [name for name in self.two_level if name not in self.generators]

    @property
    def crossed(self) -> list[str]:
        return [name for name, levels in self.factors.items() if len(levels) != 2]

    @property
    def words(self) -> list[Word]:
        """The defining relation: every product of generator words (I itself left out)."""
        generator_words = [frozenset((name, *basic)) for name, basic in self.generators.items()]
        words: set[Word] = set()
        for size in range(1, len(generator_words) + 1):
            for chosen in itertools.combinations(generator_words, size):
                words.add(reduce(lambda x, y: x ^ y, chosen))
        return sorted(words, key=lambda w: (len(w), sorted(w)))

    @property
    def resolution(self) -> int | None:
        """The length of the shortest word; None for a full factorial (nothing is aliased)."""
        words = self.words
        return min(len(w) for w in words) if words else None

    @property
    def full_runs(self) -> int:
        return reduce(lambda n, levels: n * len(levels), self.factors.values(), 1)

    def aliases(self, effect: Iterable[str]) -> list[Word]:
        """The effects estimated together with ``effect`` (two-level factors only)."""
        mine = frozenset(effect)
        return sorted((mine ^ w for w in self.words), key=lambda a: (len(a), sorted(a)))

    def confusions(self, condition: Iterable[str]) -> list[tuple[Word, Word]]:
        """Why a culprit over these factors is not resolved: each effect its conjunction contains
        (the factors' main effects and their interactions) with an alias of order at most
        max(2, its size), the effects that cannot be told apart from it. Empty: resolved."""
        names = set(condition) & set(self.two_level)
        order = max(2, len(set(condition)))
        found = []
        for size in range(len(names), 0, -1):  # the conjunction's own interaction first
            for subset in itertools.combinations(sorted(names), size):
                effect = frozenset(subset)
                found += [(effect, a) for a in self.aliases(effect) if len(a) <= order]
        return found

    def runs(self) -> list[dict[str, str]]:
        """One pass over the design, ordered so that consecutive runs change few factors: the
        reflected Gray code of the basic and multi-level factors, each generated factor following
        its basic ones. Basic factors that drive the most generators change least often."""
        usage = {name: sum(name in basic for basic in self.generators.values())
                 for name in self.basic}
        outer_first = sorted(self.basic, key=lambda name: -usage[name]) + self.crossed
        flips = {
            name: int(self.anchor[name] != self.factors[name][0]) if name in self.anchor else 0
            for name in self.two_level
        }
        runs = []
        for variant in gray_order({name: self.factors[name] for name in outer_first}):
            bits = {name: int(variant[name] != self.factors[name][0]) for name in self.basic}
            for name, basic in self.generators.items():
                # The anchor's sign of each word, so the anchor variant is one of the runs.
                shift = flips[name] ^ reduce(lambda x, y: x ^ y, (flips[b] for b in basic), 0)
                bit = reduce(lambda x, y: x ^ y, (bits[b] for b in basic), 0) ^ shift
                variant[name] = self.factors[name][bit]
            runs.append({name: variant[name] for name in self.factors})
        return runs

    def clear_effects(self) -> str:
        resolution = self.resolution
        if resolution is None:
            return "every effect (full factorial)"
        if resolution >= 5:
            return "main effects and two-factor interactions"
        return "main effects"

    def describe(self) -> str:
        if not self.fractional:
            return "full factorial"
        k, p = len(self.two_level), len(self.generators)
        crossed = f" crossed with {', '.join(self.crossed)}" if self.crossed else ""
        resolution = self.resolution or 0
        return (f"2^({k}-{p}) fraction of resolution {ROMAN.get(resolution, resolution)}"
                f"{crossed}, {len(self.runs())} of {self.full_runs} variants")

    def to_json(self) -> dict[str, Any]:
        two_level = self.two_level
        effects = [frozenset(c) for size in (1, 2) for c in itertools.combinations(two_level, size)]
        return {
            "kind": "fractional" if self.fractional else "full",
            "description": self.describe(),
            "variants": len(self.runs()),
            "full_variants": self.full_runs,
            "resolution": self.resolution,
            "clear": self.clear_effects(),
            "generators": {name: list(basic) for name, basic in self.generators.items()},
            "defining_relation": [sorted(w) for w in self.words],
            "crossed": self.crossed,
            # Main effects and two-factor interactions with their aliases up to three factors.
            "aliases": {
                effect_name(e): [effect_name(a) for a in self.aliases(e) if len(a) <= 3]
                for e in effects if self.fractional
            },
            "source": SOURCE if self.fractional else None,
        }


def _candidates(k: int) -> list[tuple[str, ...]]:
    """Generator words for k two-level factors, fewest runs first; () is the full factorial."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    tabulated = sorted(_TABLE.get(k, ()), key=len, reverse=True)
    half = (letters[: k - 1],) if k >= 3 else ()
    return [*tabulated, *([half] if half else []), ()]


def fraction(
    factors: Mapping[str, Sequence[str]],
    resolution: int = 5,
    anchor: Mapping[str, str] | None = None,
) -> Design:
    """The smallest tabulated design of at least ``resolution`` (the full factorial when no
    fraction reaches it); ``anchor`` (e.g. the known-bad variant) is one of its runs."""
    if resolution < MIN_RESOLUTION:
        raise DesignError(f"resolution {resolution} is below {MIN_RESOLUTION}: main effects "
                          "would be aliased with two-factor interactions")
    levels = {name: tuple(values) for name, values in factors.items()}
    two_level = [name for name, values in levels.items() if len(values) == 2]
    k = len(two_level)
    if k > MAX_FACTORS:
        raise DesignError(f"{k} two-level factors: fractional designs are tabulated for up to "
                          f"{MAX_FACTORS}")
    letters = "abcdefghijklmnopqrstuvwxyz"
    by_letter = dict(zip(letters, two_level, strict=False))
    known = {name: level for name, level in (anchor or {}).items()
             if name in levels and level in levels[name]}
    for words in _candidates(k):
        generators = {
            two_level[k - len(words) + index]: tuple(by_letter[letter] for letter in word)
            for index, word in enumerate(words)
        }
        design = Design(levels, generators, known)
        if design.resolution is None or design.resolution >= resolution:
            return design
    raise AssertionError("the full factorial always qualifies")  # pragma: no cover
