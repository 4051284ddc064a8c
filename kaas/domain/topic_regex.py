"""Topic regular expressions of the consumer group protocol (``SubscribedTopicRegex``, KIP-848).

Apache Kafka 4 compiles a member's regex with RE2/J (``com.google.re2j.Pattern.compile``, Perl
flags) and answers INVALID_REGULAR_EXPRESSION when it does not compile; a topic is subscribed
when the regex matches its *whole* name (``matcher.matches()``). ``compile_regex`` parses the
RE2/J syntax itself, refuses exactly what RE2/J refuses, and translates the expression into an
equivalent Python ``re`` pattern; ``matches`` is the whole-name test.

What RE2/J (1.8) accepts, and how it reads here:

- literals; ``.`` (any character but ``\\n``; with ``s`` any); ``[...]``/``[^...]`` classes with
  ranges, ``[:alpha:]``/``[:^alpha:]`` POSIX classes, ``\\d \\s \\w`` and their negations
  (ASCII, as RE2: ``\\s`` is ``[\\t\\n\\f\\r ]``), ``\\pL``/``\\p{Greek}``/``\\PL``/``\\p{^L}``;
- ``* + ? {n} {n,} {n,m}`` (counts up to 1000), each optionally lazy (``*?``); a ``{`` that does
  not open a valid count is a literal ``{`` (``a{,3}`` is five literals, unlike Python);
- ``(...)``, ``(?:...)``, named groups ``(?P<name>...)`` and ``(?<name>...)`` (names
  ``[A-Za-z0-9_]+``, unique); flags ``(?imsU-imsU)`` and ``(?flags:...)``, scoped to the
  enclosing group, anywhere in the pattern (Python only allows global flags at the start);
- ``^ $`` (start and end of text; of a line with ``m``), ``\\A``, ``\\z``, ``\\b``, ``\\B``
  (ASCII word characters);
- escapes ``\\a \\f \\n \\r \\t \\v``, octal ``\\0``, ``\\012``, ``\\123`` (a lone ``\\1``-``\\7`` is
  a backreference: refused), ``\\x7F``, ``\\x{10FFFF}``, ``\\Q...\\E`` (literal text), and a
  backslash before any ASCII punctuation or non-ASCII character.

Refused, as RE2/J refuses them: backreferences, lookahead/lookbehind (``(?=`` ``(?!`` ``(?<=``
``(?<!``), atomic groups ``(?>...)``, conditionals, possessive and stacked quantifiers
(``a*+``, ``a**``, ``a{2}{3}``), a quantifier with nothing to repeat, ``\\Z``, ``\\C``, ``\\G``,
``\\e``, ``\\u1234``, ``[\\b]``, unknown escapes, classes and class names, reversed ranges,
counts above 1000, unbalanced parentheses or brackets, a trailing backslash.

Where Python ``re`` differs, the translation spells the RE2/J meaning out: classes and
case-insensitive literals become explicit code point sets (folded by simple case folding), ``$``
becomes ``\\Z``, ``^``/``$`` under ``m`` become ``(?m:^)``/``(?m:$)``, ``\\b``/``\\B`` become ASCII
lookarounds, groups become non-capturing (only the match matters). Laziness (``*?``, ``U``)
does not change whether a whole name matches, so it is parsed and dropped.

Two deliberate limits, both outside what a topic name can show:

- Unicode classes (``\\p``) are resolved on ASCII, the alphabet of topic names
  (``[a-zA-Z0-9._-]``): an ASCII character is in a general category as ``unicodedata`` says,
  in script ``Latin`` if a letter and in ``Common`` otherwise; a non-ASCII character is in no
  category or script (so ``\\PL`` matches it). Names RE2/J does not know are refused.
- An expression whose expanded size (repetitions unrolled) exceeds ``MAX_PROGRAM`` nodes is
  refused (``expression too large``); RE2/J has no limit and would exhaust the broker's memory.

An empty pattern compiles and matches no topic (Kafka takes an empty regex as an empty
subscription). Kafka sets no length limit on the pattern; neither does kaas beyond
``MAX_PROGRAM``.

Invariants:
    - ``compile_regex`` raises ``InvalidRegex`` exactly for the patterns RE2/J refuses
      (and the oversized ones above); it never raises anything else;
    - ``matches(compile_regex(p), t)`` is RE2/J's ``Pattern.compile(p).matcher(t).matches()``
      for every topic name ``t``.
"""

from __future__ import annotations

import re
import unicodedata
import weakref
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, partial

MAX_RUNE = 0x10FFFF
MAX_REPEAT = 1000
MAX_PROGRAM = 10_000
"""Largest expanded expression (nodes after unrolling counted repetitions) accepted."""

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
class _Set:
    ranges: Ranges  # sorted, disjoint, non-adjacent


@dataclass(frozen=True, slots=True)
class _Assert:
    kind: str  # begin_text end_text begin_line end_line word not_word


@dataclass(frozen=True, slots=True)
class _Cat:
    subs: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Alt:
    subs: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Repeat:
    sub: _Node
    min: int
    max: int  # -1: unbounded


_Node = _Set | _Assert | _Cat | _Alt | _Repeat


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


class _Parser:
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

    def parse(self) -> _Node:
        # A frame: (alternatives so far, current concatenation, flags to restore at ')').
        frames: list[tuple[list[_Node], list[_Node], int]] = [([], [], 0)]
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
                cat.append(_Assert("begin_line" if self.flags & _MULTILINE else "begin_text"))
            elif c == "$":
                self.i += 1
                cat.append(_Assert("end_line" if self.flags & _MULTILINE else "end_text"))
            elif c == ".":
                self.i += 1
                nl = ((0, MAX_RUNE),) if self.flags & _DOT_NL else ((0, 9), (11, MAX_RUNE))
                cat.append(_Set(nl))
            elif c == "[":
                cat.append(_Set(self.parse_class()))
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

    def literal(self, rune: int) -> _Set:
        ranges: Ranges = ((rune, rune),)
        return _Set(_fold(ranges) if self.flags & _FOLD else ranges)

    def repeat(self, cat: list[_Node], lo: int, hi: int, stacked: bool, start: int) -> None:
        if self.more() and self.peek() == "?":
            self.i += 1  # lazy: same whole-match answer
        if stacked:
            raise InvalidRegex(f"invalid nested repetition operator: {self.s[start:self.i]!r}")
        if not cat:
            raise InvalidRegex(f"missing argument to repetition operator: {self.s[start:self.i]!r}")
        cat[-1] = _Repeat(cat[-1], lo, hi)

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

    def backslash(self, cat: list[_Node]) -> None:
        if self.i + 1 < len(self.s):
            c = self.s[self.i + 1]
            anchors = {"A": "begin_text", "z": "end_text", "b": "word", "B": "not_word"}
            if c in anchors:
                self.i += 2
                cat.append(_Assert(anchors[c]))
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
            cat.append(_Set(ranges))
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


def _concat(nodes: list[_Node]) -> _Node:
    return nodes[0] if len(nodes) == 1 else _Cat(tuple(nodes))


def _alternate(nodes: list[_Node]) -> _Node:
    return nodes[0] if len(nodes) == 1 else _Alt(tuple(nodes))


def _size(node: _Node) -> int:
    """Nodes of the expression with counted repetitions unrolled (RE2/J's program grows so)."""
    if isinstance(node, _Set | _Assert):
        return 1
    if isinstance(node, _Cat | _Alt):
        return 1 + sum(_size(s) for s in node.subs)
    return 1 + _size(node.sub) * max(1, node.min, node.max)


# -- Python translation -----------------------------------------------------------------------

_W = "[0-9A-Za-z_]"
_ASSERTIONS = {
    "begin_text": r"\A",
    "end_text": r"\Z",
    "begin_line": "(?m:^)",
    "end_line": "(?m:$)",
    "word": f"(?:(?<={_W})(?!{_W})|(?<!{_W})(?={_W}))",
    "not_word": f"(?:(?<={_W})(?={_W})|(?<!{_W})(?!{_W}))",
}


def _char(c: int) -> str:
    ch = chr(c)
    if ch.isascii() and ch.isalnum():
        return ch
    return f"\\x{c:02x}" if c < 0x100 else (f"\\u{c:04x}" if c < 0x10000 else f"\\U{c:08x}")


def _emit(node: _Node) -> str:
    if isinstance(node, _Set):
        if not node.ranges:
            return "[^\\x00-\\U0010ffff]"
        if len(node.ranges) == 1 and node.ranges[0][0] == node.ranges[0][1]:
            return _char(node.ranges[0][0])
        body = "".join(_char(lo) if lo == hi else f"{_char(lo)}-{_char(hi)}" for lo, hi in node.ranges)
        return f"[{body}]"
    if isinstance(node, _Assert):
        return _ASSERTIONS[node.kind]
    if isinstance(node, _Cat):
        return "".join(_emit(s) for s in node.subs)
    if isinstance(node, _Alt):
        return "(?:" + "|".join(_emit(s) for s in node.subs) + ")"
    sub = _emit(node.sub)
    if node.max == -1:
        count = {0: "*", 1: "+"}.get(node.min, f"{{{node.min},}}")
    elif (node.min, node.max) == (0, 1):
        count = "?"
    else:
        count = f"{{{node.min}}}" if node.min == node.max else f"{{{node.min},{node.max}}}"
    return f"(?:{sub}){count}"


# -- the whole-name matcher: a lazily built DFA over a Thompson NFA ---------------------------
#
# Python's backtracking ``re`` takes exponential time on patterns such as ``(a|a)*b`` (26
# characters of ``a`` take seconds), and a member may send any pattern; RE2/J is linear.
# So ``matches`` does not run the Python pattern: it simulates the expression's NFA, caching
# the DFA states it meets, in time linear in the topic name (bounded by ``MAX_PROGRAM``).

_SET, _SPLIT, _ASSERT_OP, _NOP, _MATCH = range(5)
_Frag = tuple[int, list[tuple[int, int]]]  # an NFA fragment: its start and its dangling exits
_CACHE_LIMIT = 10_000


@dataclass(slots=True)
class _Inst:
    op: int
    bounds: tuple[int, ...] = ()  # a SET's ranges, flattened: lo, hi, lo, hi, ...
    kind: str = ""  # an ASSERT's kind
    out: int = -1
    out1: int = -1


class _Program:
    """The NFA of one expression and the DFA states and transitions met so far."""

    def __init__(self, tree: _Node) -> None:
        self.insts: list[_Inst] = []
        start, holes = self._build(tree)
        match = self._emit(_Inst(_MATCH))
        self._patch(holes, match)
        self.start = frozenset({start})
        self._closures: dict[tuple[frozenset[int], int], tuple[frozenset[int], bool]] = {}
        self._steps: dict[tuple[frozenset[int], str], frozenset[int]] = {}

    def _emit(self, inst: _Inst) -> int:
        self.insts.append(inst)
        return len(self.insts) - 1

    def _patch(self, holes: list[tuple[int, int]], target: int) -> None:
        for pc, slot in holes:
            if slot == 0:
                self.insts[pc].out = target
            else:
                self.insts[pc].out1 = target

    def _build(self, node: _Node) -> _Frag:
        if isinstance(node, _Set):
            pc = self._emit(_Inst(_SET, bounds=tuple(x for r in node.ranges for x in r)))
            return pc, [(pc, 0)]
        if isinstance(node, _Assert):
            pc = self._emit(_Inst(_ASSERT_OP, kind=node.kind))
            return pc, [(pc, 0)]
        if isinstance(node, _Alt):
            pieces = [self._build(sub) for sub in node.subs]
            start, holes = pieces[-1]
            for sub_start, sub_holes in reversed(pieces[:-1]):
                start = self._emit(_Inst(_SPLIT, out=sub_start, out1=start))
                holes = sub_holes + holes
            return start, holes
        if isinstance(node, _Cat):
            return self._chain([partial(self._build, sub) for sub in node.subs])
        # x{min,max}: min copies, then x* or (max - min) copies of x? (the same language).
        copies = [partial(self._build, node.sub)] * node.min
        if node.max == -1:
            copies.append(partial(self._loop, node.sub))
        else:
            copies.extend([partial(self._optional, node.sub)] * (node.max - node.min))
        return self._chain(copies)

    def _chain(self, parts: Sequence[Callable[[], _Frag]]) -> _Frag:
        if not parts:
            pc = self._emit(_Inst(_NOP))
            return pc, [(pc, 0)]
        start, holes = parts[0]()
        for part in parts[1:]:
            nxt, nxt_holes = part()
            self._patch(holes, nxt)
            holes = nxt_holes
        return start, holes

    def _loop(self, sub: _Node) -> _Frag:
        split = self._emit(_Inst(_SPLIT))
        body, holes = self._build(sub)
        self.insts[split].out = body
        self._patch(holes, split)
        return split, [(split, 1)]

    def _optional(self, sub: _Node) -> _Frag:
        body, holes = self._build(sub)
        split = self._emit(_Inst(_SPLIT, out=body))
        return split, [*holes, (split, 1)]

    def closure(self, state: frozenset[int], ctx: int) -> tuple[frozenset[int], bool]:
        """The SET instructions reachable without input at a position, and whether MATCH is."""
        key = (state, ctx)
        found = self._closures.get(key)
        if found is not None:
            return found
        before, after = divmod(ctx, 4)
        seen: set[int] = set()
        sets: set[int] = set()
        accept = False
        todo = list(state)
        while todo:
            pc = todo.pop()
            if pc in seen:
                continue
            seen.add(pc)
            inst = self.insts[pc]
            if inst.op == _SET:
                sets.add(pc)
            elif inst.op == _MATCH:
                accept = True
            elif inst.op == _SPLIT:
                todo += (inst.out, inst.out1)
            elif inst.op == _NOP or _holds(inst.kind, before, after):
                todo.append(inst.out)
        found = (frozenset(sets), accept)
        if len(self._closures) > _CACHE_LIMIT:
            self._closures.clear()
        self._closures[key] = found
        return found

    def step(self, sets: frozenset[int], ch: str) -> frozenset[int]:
        """The instructions after consuming ``ch`` from the SET instructions ``sets``."""
        key = (sets, ch)
        found = self._steps.get(key)
        if found is not None:
            return found
        c = ord(ch)
        nxt: set[int] = set()
        for pc in sets:
            inst = self.insts[pc]
            at = bisect_right(inst.bounds, c)
            if at % 2 == 1 or (at and inst.bounds[at - 1] == c):
                nxt.add(inst.out)
        found = frozenset(nxt)
        if len(self._steps) > _CACHE_LIMIT:
            self._steps.clear()
        self._steps[key] = found
        return found

    def run(self, topic: str) -> bool:
        state = self.start
        prev = _NONE
        for i in range(len(topic) + 1):
            ch = topic[i] if i < len(topic) else ""
            kind = _kind(ch)
            sets, accept = self.closure(state, prev * 4 + kind)
            if not ch:
                return accept
            state = self.step(sets, ch)
            if not state:
                return False
            prev = kind
        return False  # pragma: no cover - the loop returns at the end of the name


_NONE, _NEWLINE, _WORD_CHAR, _OTHER = range(4)


def _kind(ch: str) -> int:
    if not ch:
        return _NONE
    if ch == "\n":
        return _NEWLINE
    return _WORD_CHAR if ch.isascii() and (ch.isalnum() or ch == "_") else _OTHER


def _holds(kind: str, before: int, after: int) -> bool:
    """Whether an empty-width assertion holds between characters of kinds ``before``/``after``."""
    if kind == "begin_text":
        return before == _NONE
    if kind == "end_text":
        return after == _NONE
    if kind == "begin_line":
        return before in (_NONE, _NEWLINE)
    if kind == "end_line":
        return after in (_NONE, _NEWLINE)
    boundary = (before == _WORD_CHAR) != (after == _WORD_CHAR)
    return boundary if kind == "word" else not boundary


_PROGRAMS: weakref.WeakKeyDictionary[re.Pattern[str], _Program] = weakref.WeakKeyDictionary()


def compile_regex(pattern: str) -> re.Pattern[str]:
    """Compile a ``SubscribedTopicRegex`` (RE2/J syntax) into an equivalent Python pattern.

    Args:
        pattern: The regex as the client sent it.

    Returns:
        A compiled Python pattern; test topics with ``matches`` (linear time), not with the
        pattern's own methods (backtracking, exponential on some patterns).

    Raises:
        InvalidRegex: RE2/J refuses the pattern, or it is larger than ``MAX_PROGRAM``.
    """
    tree = _Parser(pattern).parse()
    try:
        if _size(tree) > MAX_PROGRAM:
            raise InvalidRegex(f"expression too large: expands beyond {MAX_PROGRAM} nodes")
        compiled = re.compile(_emit(tree))
        if compiled not in _PROGRAMS:
            _PROGRAMS[compiled] = _Program(tree)
        return compiled
    except RecursionError as exc:
        raise InvalidRegex("expression nests too deeply") from exc
    except re.error as exc:  # pragma: no cover - the translation is total
        raise InvalidRegex(f"cannot translate {pattern!r}: {exc}") from exc


def matches(compiled: re.Pattern[str], topic: str) -> bool:
    """Whether the regex matches the whole topic name (Java's ``matcher.matches()``).

    Runs in time linear in ``len(topic)`` for a pattern from ``compile_regex``; any other
    pattern is matched by Python's ``fullmatch``.
    """
    program = _PROGRAMS.get(compiled)
    if program is None:
        return compiled.fullmatch(topic) is not None
    return program.run(topic)
