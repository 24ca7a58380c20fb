"""Two-level factorial designs of an ablation plan's deviation switches (``design`` in a plan,
repro/plans.py): which switches each arm turns on, and which effects share a column.

The switches are the groups ``repro.ablation`` makes from ``repro diff BASE ABLATE`` (the ablate
setting's ``[[setting.deviations]]``); they take the letters A, B, C, ... in declared order (I is
skipped, as in the tables below, since it names the identity of the defining relation). A design is
the full 2^k factorial or a 2^(k-p) fraction: a full factorial of the k - p basic letters, each
generated letter the product of the basic letters on the right of its generator (``E=BCD``: in the
-1/+1 coding E = B*C*D, so E is on where an even number of B, C, D are off). Coded -1 is a switch
off (the base setting's values), +1 on (the ablate setting's).

Both endpoints are design points of every design this module builds: all switches off is the base
arm, all on is the ablate setting (every differing key at its value). The all-on point is in every
fraction with positive generators; the all-off point only where every word of the defining relation
has even length, i.e. every generator has an odd number of letters on its right. A generator with an
even number (E=AB) is refused: the fraction could not hold both endpoints, whose difference is the
question an ablation answers.

``resolution = R`` picks the smallest standard minimum-aberration fraction of resolution R or more
that holds both endpoints, from the table of Montgomery, *Design and Analysis of Experiments* (8th
ed., 2013), Table 8.14, as Minitab lists it ("Design generators for 2-level designs", Minitab 19
help), for 3 to 8 switches; the NIST/SEMATECH e-Handbook of Statistical Methods, 5.3.3.4.7, gives
the same designs. More switches need explicit ``generators`` (or the full factorial). Resolution R:
no effect of order i is aliased with one of order less than R - i; III keeps main effects apart,
IV keeps them clear of two-factor interactions. A fraction holding both endpoints has no word of odd
length, hence none of length 3: its resolution is IV or more, and ``resolution = 3`` gets a IV.
"""

from __future__ import annotations

import functools
import itertools
import operator
import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from algorithms.configs import ConfigError

LETTERS = "ABCDEFGHJKLMNOPQRSTUVWXYZ"
DESIGNS = ("factorial", "fractional")
# More arms than this is a typo or a design no one runs (a 2^8 full factorial is 256 arms).
MAX_ARMS = 256
# (switches) -> [(arms, resolution, generators)], Montgomery (2013) Table 8.14 / Minitab (module doc).
STANDARD: dict[int, list[tuple[int, int, tuple[str, ...]]]] = {
    3: [(4, 3, ("C=AB",))],
    4: [(8, 4, ("D=ABC",))],
    5: [(8, 3, ("D=AB", "E=AC")), (16, 5, ("E=ABCD",))],
    6: [(8, 3, ("D=AB", "E=AC", "F=BC")), (16, 4, ("E=ABC", "F=BCD")), (32, 6, ("F=ABCDE",))],
    7: [
        (8, 3, ("D=AB", "E=AC", "F=BC", "G=ABC")),
        (16, 4, ("E=ABC", "F=BCD", "G=ACD")),
        (32, 4, ("F=ABCD", "G=ABDE")),
        (64, 7, ("G=ABCDEF",)),
    ],
    8: [
        (16, 4, ("E=BCD", "F=ACD", "G=ABC", "H=ABD")),
        (32, 4, ("F=ABC", "G=ABD", "H=BCDE")),
        (64, 5, ("G=ABCD", "H=ABEF")),
        (128, 8, ("H=ABCDEFG",)),
    ],
}
_GENERATOR = re.compile(r"^\s*([A-Z])\s*=\s*([A-Z]+)\s*$")


def letters_of(switches: int) -> str:
    if switches > len(LETTERS):
        raise ConfigError(f"{switches} switches: a design names at most {len(LETTERS)} (letters {LETTERS})")
    return LETTERS[:switches]


@dataclass(frozen=True)
class Design:
    """A two-level design of ``switches`` (names, in letter order): ``generators`` empty for the full
    factorial. ``matrix``: ``[arms, switches]`` of -1 (off) and +1 (on), arms in standard order of the
    basic letters (the first basic letter alternating fastest)."""

    kind: str
    switches: tuple[str, ...]
    generators: tuple[str, ...] = ()

    @cached_property
    def letters(self) -> str:
        return letters_of(len(self.switches))

    @cached_property
    def parsed(self) -> dict[str, str]:
        """Generated letter -> the basic letters whose product it is (checked by ``check_design``)."""
        return {m.group(1): m.group(2) for m in map(_GENERATOR.match, self.generators) if m}

    @cached_property
    def matrix(self) -> np.ndarray:
        basic = [c for c in self.letters if c not in self.parsed]
        rows = np.array(list(itertools.product((-1, 1), repeat=len(basic))))[:, ::-1]
        columns = dict(zip(basic, rows.T))
        for letter, word in self.parsed.items():
            columns[letter] = np.prod([columns[c] for c in word], axis=0)
        return np.stack([columns[c] for c in self.letters], axis=1).astype(int)

    @cached_property
    def words(self) -> list[str]:
        """The defining relation's words (I = word), shortest first: every product of generator words."""
        found = set()
        gens = [frozenset(word + letter) for letter, word in self.parsed.items()]
        for n in range(1, len(gens) + 1):
            for subset in itertools.combinations(gens, n):
                word = functools.reduce(operator.xor, subset)
                found.add("".join(sorted(word, key=self.letters.index)))
        return sorted(found, key=lambda w: (len(w), w))

    @property
    def resolution(self) -> int | None:
        """The shortest word's length; None for the full factorial (no word)."""
        return len(self.words[0]) if self.words else None

    def column(self, effect: str) -> np.ndarray:
        """The +/-1 column of an effect (``"A"``, ``"AB"``): the product of its letters' columns."""
        return np.prod(self.matrix[:, [self.letters.index(c) for c in effect]], axis=1)

    @cached_property
    def alias_groups(self) -> list[tuple[str, ...]]:
        """Main effects and two-factor interactions grouped by the column they share, in letter order;
        a group with a main effect lists it first. The full factorial's groups have one effect each."""
        effects = list(self.letters) + ["".join(p) for p in itertools.combinations(self.letters, 2)]
        groups: dict[bytes, list[str]] = {}
        for effect in effects:
            groups.setdefault(self.column(effect).tobytes(), []).append(effect)
        return [tuple(g) for g in groups.values()]

    def arm_letters(self, row: np.ndarray) -> str:
        """The switches on in a design row, as lower-case letters (Yates's treatment-combination
        notation: ``abe``; the all-off row is ``""``)."""
        return "".join(c.lower() for c, x in zip(self.letters, row) if x > 0)


def check_design(design: Design, where: str, resolution: int | None = None) -> Design:
    """``design`` if it is one this module runs (module doc), else a ``ConfigError`` naming ``where``."""
    letters = design.letters
    generated: set[str] = set()
    for text in design.generators:
        found = _GENERATOR.match(text)
        if not found:
            raise ConfigError(f"{where}: generator {text!r}: expected LETTER=LETTERS (E=BCD)")
        letter, word = found.groups()
        for c in letter + word:
            if c not in letters:
                raise ConfigError(
                    f"{where}: generator {text!r} names {c!r}; the {len(letters)} switches are {letters}"
                )
        if letter in generated or letter in word or len(set(word)) != len(word):
            raise ConfigError(f"{where}: generator {text!r}: {letter} is generated twice or repeats a letter")
        generated.add(letter)
        if len(word) < 2:
            raise ConfigError(f"{where}: generator {text!r} aliases main effects {letter} and {word}")
        if len(word) % 2 == 0:
            raise ConfigError(
                f"{where}: generator {text!r} has an even number of letters on its right: the fraction "
                "would lack the all-off arm (the base); give it an odd number (E=ABC)"
            )
    for text in design.generators:
        inside = set(_GENERATOR.match(text).group(2)) & generated
        if inside:
            raise ConfigError(
                f"{where}: generator {text!r} uses generated letter {sorted(inside)[0]}; "
                "write it in basic letters"
            )
    if design.generators and design.resolution < 3:
        word = design.words[0]
        raise ConfigError(f"{where}: generators alias main effects {word[0]} and {word[1]} (I={word})")
    if resolution is not None and design.generators and design.resolution < resolution:
        raise ConfigError(
            f"{where}: the generators give resolution {design.resolution} (I={design.words[0]}), "
            f"below the resolution {resolution} asked for"
        )
    arms = 2 ** (len(letters) - len(design.generators))
    if arms > MAX_ARMS:
        raise ConfigError(f"{where}: the design has {arms} arms; at most {MAX_ARMS}")
    return design


def standard_generators(switches: int, resolution: int, where: str) -> tuple[str, ...]:
    """The generators of the smallest standard fraction (``STANDARD``) of ``resolution`` or more for
    ``switches`` that holds both endpoints (module doc); a ``ConfigError`` naming ``where`` when no
    fraction of the table fits."""
    if resolution < 3:
        raise ConfigError(f"{where}: resolution {resolution}: below III main effects are aliased (3 or more)")
    fits = [(arms, r, gens) for arms, r, gens in STANDARD.get(switches, []) if r >= resolution]
    for _, _, gens in fits:
        if all(len(g.split("=")[1]) % 2 for g in gens):
            return gens
    known = ", ".join(f"{arms} arms: resolution {r} ({', '.join(gens)})" for arms, r, gens in fits)
    why = (
        f"the standard fractions ({known}) lack the all-off arm (the base)"
        if fits
        else f"the standard table (3 to 8 switches) has no fraction of resolution {resolution} or more"
    )
    raise ConfigError(
        f"{where}: no fraction of resolution {resolution} for {switches} switches: {why}; give generators "
        'with an odd number of letters on the right (E=ABC), or design = "factorial"'
    )
