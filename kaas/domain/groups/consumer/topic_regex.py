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
import weakref

from kaas.domain.groups.consumer.re2_nfa import Program
from kaas.domain.groups.consumer.re2_syntax import Alt, Assert, Cat, CharSet, InvalidRegex, Node, parse, size

__all__ = ["MAX_PROGRAM", "InvalidRegex", "compile_regex", "matches"]

MAX_PROGRAM = 10_000
"""Largest expanded expression (nodes after unrolling counted repetitions) accepted."""


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


def _emit(node: Node) -> str:
    if isinstance(node, CharSet):
        if not node.ranges:
            return "[^\\x00-\\U0010ffff]"
        if len(node.ranges) == 1 and node.ranges[0][0] == node.ranges[0][1]:
            return _char(node.ranges[0][0])
        body = "".join(_char(lo) if lo == hi else f"{_char(lo)}-{_char(hi)}" for lo, hi in node.ranges)
        return f"[{body}]"
    if isinstance(node, Assert):
        return _ASSERTIONS[node.kind]
    if isinstance(node, Cat):
        return "".join(_emit(s) for s in node.subs)
    if isinstance(node, Alt):
        return "(?:" + "|".join(_emit(s) for s in node.subs) + ")"
    sub = _emit(node.sub)
    if node.max == -1:
        count = {0: "*", 1: "+"}.get(node.min, f"{{{node.min},}}")
    elif (node.min, node.max) == (0, 1):
        count = "?"
    else:
        count = f"{{{node.min}}}" if node.min == node.max else f"{{{node.min},{node.max}}}"
    return f"(?:{sub}){count}"


_PROGRAMS: weakref.WeakKeyDictionary[re.Pattern[str], Program] = weakref.WeakKeyDictionary()


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
    tree = parse(pattern)
    try:
        if size(tree) > MAX_PROGRAM:
            raise InvalidRegex(f"expression too large: expands beyond {MAX_PROGRAM} nodes")
        compiled = re.compile(_emit(tree))
        if compiled not in _PROGRAMS:
            _PROGRAMS[compiled] = Program(tree)
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
