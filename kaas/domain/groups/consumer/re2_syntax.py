"""The RE2/J syntax of topic regexes (``kaas.domain.groups.consumer.topic_regex``): ``parse`` reads a pattern
into an expression tree of code-point sets, empty-width assertions, concatenations,
alternations and counted repetitions, refusing with ``InvalidRegex`` exactly what RE2/J
refuses (the list is ``topic_regex``'s docstring). Character classes, case folding and
flags are resolved here, so the tree has one meaning whatever consumes it: the Python
translation (``topic_regex``) or the NFA (``re2_nfa``).

Invariant: ``parse`` raises ``InvalidRegex`` (or ``RecursionError`` on absurd nesting) and
nothing else.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache

__all__ = ["MAX_REPEAT", "MAX_RUNE", "Alt", "Assert", "Cat", "CharSet", "InvalidRegex", "Node", "Parser", "Ranges",
           "Repeat", "parse", "size"]

MAX_RUNE = 0x10FFFF
MAX_REPEAT = 1000

_FOLD = 1  # (?i)
_MULTILINE = 2  # (?m): ^ and $ at line breaks too
_DOT_NL = 4  # (?s)
_NON_GREEDY = 8  # (?U): parsed, irrelevant to a whole match

Ranges = tuple[tuple[int, int], ...]

_DIGIT: Ranges = ((0x30, 0x39),)
_SPACE: Ranges = ((0x09, 0x0A), (0x0C, 0x0D), (0x20, 0x20))
_WORD: Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_PERL = {"d": _DIGIT, "s": _SPACE, "w": _WORD}
_POSIX: dict[str, Ranges] = {
    "alnum": ((0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)),
    "alpha": ((0x41, 0x5A), (0x61, 0x7A)),
    "ascii": ((0x00, 0x7F),),
    "blank": ((0x09, 0x09), (0x20, 0x20)),
    "cntrl": ((0x00, 0x1F), (0x7F, 0x7F)),
    "digit": _DIGIT,
    "graph": ((0x21, 0x7E),),
    "lower": ((0x61, 0x7A),),
    "print": ((0x20, 0x7E),),
    "punct": ((0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E)),
    "space": ((0x09, 0x0D), (0x20, 0x20)),
    "upper": ((0x41, 0x5A),),
    "word": _WORD,
    "xdigit": ((0x30, 0x39), (0x41, 0x46), (0x61, 0x66)),
}
_CATEGORIES = frozenset(
    "C Cc Cf Co Cs L Ll Lm Lo Lt Lu M Mc Me Mn N Nd Nl No P Pc Pd Pe Pf Pi Po Ps "
    "S Sc Sk Sm So Z Zl Zp Zs".split()
)
_SCRIPTS = frozenset(
    "Arabic Armenian Avestan Balinese Bamum Batak Bengali Bopomofo Brahmi Braille Buginese "
    "Buhid Canadian_Aboriginal Carian Cham Cherokee Common Coptic Cuneiform Cypriot Cyrillic "
    "Deseret Devanagari Egyptian_Hieroglyphs Ethiopic Georgian Glagolitic Gothic Greek "
    "Gujarati Gurmukhi Han Hangul Hanunoo Hebrew Hiragana Imperial_Aramaic Inherited "
    "Inscriptional_Pahlavi Inscriptional_Parthian Javanese Kaithi Kannada Katakana Kayah_Li "
    "Kharoshthi Khmer Lao Latin Lepcha Limbu Linear_B Lisu Lycian Lydian Malayalam Mandaic "
    "Meetei_Mayek Mongolian Myanmar New_Tai_Lue Nko Ogham Ol_Chiki Old_Italic Old_Persian "
    "Old_South_Arabian Old_Turkic Oriya Osmanya Phags_Pa Phoenician Rejang Runic Samaritan "
    "Saurashtra Shavian Sinhala Sundanese Syloti_Nagri Syriac Tagalog Tagbanwa Tai_Le "
    "Tai_Tham Tai_Viet Tamil Telugu Thaana Thai Tibetan Tifinagh Ugaritic Unknown Vai Yi".split()
)
_ESCAPES = {"a": 7, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}
_MIN_FOLD, _MAX_FOLD = 0x41, 0x1E943


class InvalidRegex(ValueError):
    """The pattern is not a valid RE2/J expression (INVALID_REGULAR_EXPRESSION)."""


# -- the expression tree ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CharSet:
    ranges: Ranges  # sorted, disjoint, non-adjacent


@dataclass(frozen=True, slots=True)
class Assert:
    kind: str  # begin_text end_text begin_line end_line word not_word


@dataclass(frozen=True, slots=True)
class Cat:
    subs: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Alt:
    subs: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Repeat:
    sub: Node
    min: int
    max: int  # -1: unbounded


Node = CharSet | Assert | Cat | Alt | Repeat


# -- code point sets --------------------------------------------------------------------------


def _clean(ranges: list[tuple[int, int]]) -> Ranges:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def _negate(ranges: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_RUNE:
        out.append((nxt, MAX_RUNE))
    return tuple(out)


@cache
def _fold_orbits() -> dict[int, tuple[int, ...]]:
    """Code point -> the code points it matches case-insensitively, itself included.

    Simple case folding: two characters are equivalent when their one-character case folds
    agree (``casefold``, or ``lower`` where the full fold is longer, as for U+1E9E).
    """
    keys: dict[str, list[int]] = {}
    for c in range(_MIN_FOLD, _MAX_FOLD + 1):
        ch = chr(c)
        folded, lower = ch.casefold(), ch.lower()
        key = folded if len(folded) == 1 else (lower if len(lower) == 1 else ch)
        keys.setdefault(key, []).append(c)
    return {c: tuple(orbit) for orbit in keys.values() if len(orbit) > 1 for c in orbit}


def _fold(ranges: Ranges) -> Ranges:
    orbits = _fold_orbits()
    extra: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if lo <= _MIN_FOLD and hi >= _MAX_FOLD:
            continue
        for c in range(max(lo, _MIN_FOLD), min(hi, _MAX_FOLD) + 1):
            extra.extend((o, o) for o in orbits.get(c, ()))
    return _clean([*ranges, *extra])


def _group(ranges: Ranges, negated: bool, flags: int) -> Ranges:
    """A Perl or POSIX group: folded first (when ``i``), then negated, as RE2/J does."""
    if flags & _FOLD:
        ranges = _fold(ranges)
    return _negate(ranges) if negated else ranges


@cache
def _unicode_class(name: str) -> Ranges:
    if name == "Any":
        return ((0, MAX_RUNE),)
    if name in _SCRIPTS:
        letters = _POSIX["alpha"]
        if name == "Latin":
            return letters
        return _negate(letters + ((0x80, MAX_RUNE),)) if name == "Common" else ()
    return _clean([(c, c) for c in range(0x80) if unicodedata.category(chr(c)).startswith(name)])


# -- the parser -------------------------------------------------------------------------------


class Parser:
    def __init__(self, pattern: str) -> None:
        self.s = pattern
        self.i = 0
        self.flags = 0
        self.names: set[str] = set()

    def error(self, what: str) -> InvalidRegex:
        return InvalidRegex(f"{what} at position {self.i} of {self.s!r}")

    def more(self) -> bool:
        return self.i < len(self.s)

    def peek(self) -> str:
        return self.s[self.i]

    def looking_at(self, prefix: str) -> bool:
        return self.s.startswith(prefix, self.i)

    def parse(self) -> Node:
        # A frame: (alternatives so far, current concatenation, flags to restore at ')').
        frames: list[tuple[list[Node], list[Node], int]] = [([], [], 0)]
        last_was_repeat = False
        while self.more():
            alts, cat, _ = frames[-1]
            c = self.peek()
            repeat = False
            if c == "(":
                if self.looking_at("(?"):
                    opened = self.perl_flags()
                    if opened is not None:
                        frames.append(([], [], opened))
                else:
                    self.i += 1
                    frames.append(([], [], self.flags))
            elif c == "|":
                self.i += 1
                alts.append(_concat(cat))
                cat.clear()
            elif c == ")":
                if len(frames) == 1:
                    raise self.error("unexpected )")
                self.i += 1
                alts, cat, restore = frames.pop()
                frames[-1][1].append(_alternate([*alts, _concat(cat)]))
                self.flags = restore
            elif c == "^":
                self.i += 1
                cat.append(Assert("begin_line" if self.flags & _MULTILINE else "begin_text"))
            elif c == "$":
                self.i += 1
                cat.append(Assert("end_line" if self.flags & _MULTILINE else "end_text"))
            elif c == ".":
                self.i += 1
                nl = ((0, MAX_RUNE),) if self.flags & _DOT_NL else ((0, 9), (11, MAX_RUNE))
                cat.append(CharSet(nl))
            elif c == "[":
                cat.append(CharSet(self.parse_class()))
            elif c in "*+?":
                start = self.i
                self.i += 1
                lo, hi = {"*": (0, -1), "+": (1, -1), "?": (0, 1)}[c]
                self.repeat(cat, lo, hi, last_was_repeat, start)
                repeat = True
            elif c == "{":
                start = self.i
                counts = self.parse_counts()
                if counts is None:
                    self.i = start + 1
                    cat.append(self.literal(ord("{")))
                else:
                    self.repeat(cat, counts[0], counts[1], last_was_repeat, start)
                    repeat = True
            elif c == "\\":
                self.backslash(cat)
            else:
                self.i += 1
                cat.append(self.literal(ord(c)))
            last_was_repeat = repeat
        if len(frames) != 1:
            raise self.error("missing closing )")
        alts, cat, _ = frames[0]
        return _alternate([*alts, _concat(cat)])

    def literal(self, rune: int) -> CharSet:
        ranges: Ranges = ((rune, rune),)
        return CharSet(_fold(ranges) if self.flags & _FOLD else ranges)

    def repeat(self, cat: list[Node], lo: int, hi: int, stacked: bool, start: int) -> None:
        if self.more() and self.peek() == "?":
            self.i += 1  # lazy: same whole-match answer
        if stacked:
            raise InvalidRegex(f"invalid nested repetition operator: {self.s[start:self.i]!r}")
        if not cat:
            raise InvalidRegex(f"missing argument to repetition operator: {self.s[start:self.i]!r}")
        cat[-1] = Repeat(cat[-1], lo, hi)

    def parse_counts(self) -> tuple[int, int] | None:
        """``{n}``, ``{n,}`` or ``{n,m}`` at the cursor, or None (then ``{`` is a literal)."""
        m = re.compile(r"\{([0-9]+)(,([0-9]*))?\}").match(self.s, self.i)
        if m is None:
            return None
        texts = [m.group(1)] + ([m.group(3)] if m.group(3) else [])
        if any(len(t) > 1 and t[0] == "0" for t in texts):
            return None  # RE2/J: a leading zero is not a count
        if any(len(t) > 8 for t in texts):
            raise InvalidRegex(f"invalid repeat count: {m.group(0)!r}")
        lo = int(m.group(1))
        hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else -1)
        if lo > MAX_REPEAT or hi > MAX_REPEAT or (hi >= 0 and lo > hi):
            raise InvalidRegex(f"invalid repeat count: {m.group(0)!r}")
        self.i = m.end()
        return lo, hi

    def perl_flags(self) -> int | None:
        """``(?...`` at the cursor: a group (returns the flags to restore) or a flag change."""
        rest = self.s[self.i :]
        if rest.startswith(("(?P<", "(?<")) and not rest.startswith(("(?<=", "(?<!")):
            begin = 4 if rest[2] == "P" else 3
            end = rest.find(">", begin)
            if end < 0:
                raise InvalidRegex(f"invalid named capture: {rest!r}")
            name = rest[begin:end]
            if not name or not all(ch == "_" or (ch.isascii() and ch.isalnum()) for ch in name):
                raise InvalidRegex(f"invalid named capture: {rest[: end + 1]!r}")
            if name in self.names:
                raise InvalidRegex(f"duplicate capture group name: {name!r}")
            self.names.add(name)
            self.i += end + 1
            return self.flags
        start = self.i
        self.i += 2
        flags = self.flags
        negate = False
        saw_flag = False
        bits = {"i": _FOLD, "s": _DOT_NL, "U": _NON_GREEDY}
        while self.more():
            c = self.s[self.i]
            self.i += 1
            if c in bits or c == "m":
                on = not negate
                bit = _MULTILINE if c == "m" else bits[c]
                flags = flags | bit if on else flags & ~bit
                saw_flag = True
            elif c == "-" and not negate:
                negate = True
                saw_flag = False
            elif c in ":)" and not (negate and not saw_flag):
                restore = self.flags
                self.flags = flags
                return restore if c == ":" else None
            else:
                break
        raise InvalidRegex(f"invalid or unsupported Perl syntax: {self.s[start : self.i]!r}")

    def backslash(self, cat: list[Node]) -> None:
        if self.i + 1 < len(self.s):
            c = self.s[self.i + 1]
            anchors = {"A": "begin_text", "z": "end_text", "b": "word", "B": "not_word"}
            if c in anchors:
                self.i += 2
                cat.append(Assert(anchors[c]))
                return
            if c == "C":
                raise InvalidRegex("invalid escape sequence: '\\\\C'")
            if c == "Q":
                end = self.s.find("\\E", self.i + 2)
                text = self.s[self.i + 2 :] if end < 0 else self.s[self.i + 2 : end]
                self.i = len(self.s) if end < 0 else end + 2
                cat.extend(self.literal(ord(ch)) for ch in text)
                return
        ranges = self.class_escape()
        if ranges is not None:
            cat.append(CharSet(ranges))
            return
        cat.append(self.literal(self.escape()))

    def class_escape(self) -> Ranges | None:
        """``\\pN``, ``\\p{Name}``, ``\\P...``, ``\\d``, ``\\D``, ... at the cursor, or None."""
        if self.looking_at("\\p") or self.looking_at("\\P"):
            start = self.i
            negated = self.s[self.i + 1] == "P"
            self.i += 2
            if not self.more():
                raise InvalidRegex(f"invalid character class range: {self.s[start:]!r}")
            if self.peek() == "{":
                end = self.s.find("}", self.i)
                if end < 0:
                    raise InvalidRegex(f"invalid character class range: {self.s[start:]!r}")
                name = self.s[self.i + 1 : end]
                self.i = end + 1
            else:
                name = self.peek()
                self.i += 1
            if name.startswith("^"):
                negated, name = not negated, name[1:]
            if name != "Any" and name not in _CATEGORIES and name not in _SCRIPTS:
                raise InvalidRegex(f"invalid character class range: {self.s[start : self.i]!r}")
            ranges = _unicode_class(name)
            if self.flags & _FOLD:
                ranges = _fold(ranges)
            return _negate(ranges) if negated else ranges
        if self.i + 1 < len(self.s) and self.s[self.i + 1].lower() in _PERL:
            c = self.s[self.i + 1]
            self.i += 2
            return _group(_PERL[c.lower()], c.isupper(), self.flags)
        return None

    def escape(self) -> int:
        """A single-character escape at the cursor (after ``\\``): its code point."""
        start = self.i
        self.i += 1
        if not self.more():
            raise InvalidRegex("trailing backslash at end of expression")
        c = self.s[self.i]
        self.i += 1
        if not (c.isascii() and c.isalnum()):
            return ord(c)
        if c in "01234567":
            digits = c
            if c != "0" and not (self.more() and self.peek() in "01234567"):
                raise InvalidRegex(f"invalid escape sequence: {self.s[start : self.i]!r}")
            while len(digits) < 3 and self.more() and self.peek() in "01234567":
                digits += self.peek()
                self.i += 1
            return int(digits, 8)
        if c == "x":
            m = re.compile(r"\{([0-9A-Fa-f]+)\}|[0-9A-Fa-f]{2}").match(self.s, self.i)
            if m is not None:
                value = int(m.group(1) or m.group(0), 16)
                if value <= MAX_RUNE:
                    self.i = m.end()
                    return value
        elif c in _ESCAPES:
            return _ESCAPES[c]
        raise InvalidRegex(f"invalid escape sequence: {self.s[start : self.i + 1]!r}")

    def parse_class(self) -> Ranges:
        start = self.i
        self.i += 1
        negated = self.more() and self.peek() == "^"
        if negated:
            self.i += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while not self.more() or self.peek() != "]" or first:
            first = False
            if self.looking_at("[:"):
                end = self.s.find(":]", self.i)
                if end >= 0:
                    name = self.s[self.i + 2 : end]
                    self.i = end + 2
                    neg = name.startswith("^")
                    group = _POSIX.get(name[1:] if neg else name)
                    if group is None:
                        raise InvalidRegex(f"invalid character class range: '[:{name}:]'")
                    ranges.extend(_group(group, neg, self.flags))
                    continue
            found = self.class_escape() if self.looking_at("\\") else None
            if found is not None:
                ranges.extend(found)
                continue
            lo = self.class_char(start)
            hi = lo
            if self.more() and self.peek() == "-" and not self.looking_at("-]"):
                self.i += 1
                hi = self.class_char(start)
                if hi < lo:
                    raise InvalidRegex(f"invalid character class range: {chr(lo)}-{chr(hi)}")
            piece: Ranges = ((lo, hi),)
            ranges.extend(_fold(piece) if self.flags & _FOLD else piece)
        self.i += 1
        cleaned = _clean(ranges)
        return _negate(cleaned) if negated else cleaned

    def class_char(self, start: int) -> int:
        if not self.more():
            raise InvalidRegex(f"missing closing ]: {self.s[start:]!r}")
        if self.peek() == "\\":
            return self.escape()
        self.i += 1
        return ord(self.s[self.i - 1])


def _concat(nodes: list[Node]) -> Node:
    return nodes[0] if len(nodes) == 1 else Cat(tuple(nodes))


def _alternate(nodes: list[Node]) -> Node:
    return nodes[0] if len(nodes) == 1 else Alt(tuple(nodes))


def size(node: Node) -> int:
    """Nodes of the expression with counted repetitions unrolled (RE2/J's program grows so)."""
    if isinstance(node, CharSet | Assert):
        return 1
    if isinstance(node, Cat | Alt):
        return 1 + sum(size(s) for s in node.subs)
    return 1 + size(node.sub) * max(1, node.min, node.max)


def parse(pattern: str) -> Node:
    """The expression tree of an RE2/J ``pattern``.

    Raises:
        InvalidRegex: RE2/J refuses the pattern.
    """
    return Parser(pattern).parse()
