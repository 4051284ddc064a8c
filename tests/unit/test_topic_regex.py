"""SubscribedTopicRegex: RE2/J syntax, refused as RE2/J refuses, matched as a whole name."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaas.domain.groups.consumer.topic_regex import InvalidRegex, compile_regex, matches

TOPIC_CHARS = "abcAB01._-"
topic_names = st.text(TOPIC_CHARS, min_size=1, max_size=12)


@pytest.mark.parametrize(
    ("pattern", "topic", "expected"),
    [
        ("orders-.*", "orders-eu", True),
        ("orders-.*", "new-orders-eu", False),  # a whole match, not a search
        ("orders", "orders-eu", False),
        ("", "a", False),  # an empty regex subscribes to nothing
        ("a{,3}", "a{,3}", True),  # not a count in RE2/J: literal text
        ("a{,3}", "aaa", False),
        ("a{01}", "a{01}", True),
        ("a{2,}", "aaaa", True),
        ("(?i)ORDERS", "orders", True),
        ("x(?i)y|z", "xY", True),
        ("x(?i)y|z", "Z", True),  # the flag reaches the end of the group
        ("(?i:a)b", "AB", False),
        ("(a(?i)b)c", "aBC", False),  # ... and not beyond it
        (r"\Qa.b\E", "a.b", True),
        (r"\Qa.b\E", "axb", False),
        (r"\Qa.b", "a.b", True),  # \Q without \E runs to the end
        (r"[[:alpha:]]+\d", "abc1", True),
        (r"[[:^alpha:]]", "1", True),
        (r"\pL+", "Topic", True),
        (r"\p{Lu}\p{^Lu}+", "Topic", True),
        (r"\PL", "a", False),
        (r"\p{Latin}+\p{Common}", "ab.", True),
        (r"(?P<region>eu|us)-(?<n>\d+)", "eu-12", True),
        (r"\x{61}\x62\143", "abc", True),
        (r"a$", "a", True),
        (r"^a\z", "a", True),
        (r"\Aa", "a", True),
        (r"a\b.", "a.", True),
        (r"a\B.", "a.", False),
        (r"a\Bb", "ab", True),
        (r"[]a]+", "]a", True),
        (r"[a-]+", "-a", True),
        (r"[^\D]+", "123", True),
        (r"[\d-z]+", "1-z", True),
        (r"^*a", "a", True),  # RE2/J repeats an anchor; Python would refuse
        (r"a*(?i)*", "aa", True),
        (r"a*?b", "aab", True),
        (r"(?U)a+b", "aab", True),
        (r"(?s).", "\n", True),
        (r".", "\n", False),
        (r"(?m)^a$", "a", True),
        (r"\_x", "_x", True),
        (r"a|", "", True),
        (r"(?i)k", "\u212a", True),  # Kelvin sign: simple case folding
        (r"(?i)i", "\u0131", False),  # dotless i is not in i's orbit
        (r"(?i)[\W]", "k", False),  # \W folds before it negates, as RE2/J
        (r"(?i)[^k]", "\u212a", False),
    ],
)
def test_matches(pattern: str, topic: str, expected: bool) -> None:
    compiled = compile_regex(pattern)
    assert matches(compiled, topic) is expected
    # The Python translation says the same as the linear matcher.
    assert (compiled.fullmatch(topic) is not None) is expected


def test_matching_is_linear_where_python_backtracks() -> None:
    # Python's own fullmatch takes exponential time here (26 characters: seconds).
    compiled = compile_regex("(a|a)*b")
    assert not matches(compiled, "a" * 249)
    assert matches(compiled, "a" * 248 + "b")
    assert not matches(compile_regex("(.*-)*x"), "a-" * 124)


def test_a_pattern_not_from_compile_regex_still_matches() -> None:
    assert matches(re.compile("ab+"), "abb")


@pytest.mark.parametrize(
    "pattern",
    [
        "a**", "a*+", "a++", "a?*", "a{2}{3}", "a*??",  # stacked or possessive quantifiers
        "*a", "a|*", "(*a)", "(?i)*",  # nothing to repeat
        "(?=a)", "(?!a)", "(?<=a)b", "(?<!a)b", "(?>a)", "(?(1)a|b)", "(?#comment)",
        r"(a)\1", r"\2", r"\8", r"\Z", r"\C", r"\G", r"\e", r"\u0041", r"\k<n>", r"\h",
        r"[\b]", r"[\Q]", r"\x{110000}", r"\x{}", r"\xg1", r"\x4",
        "a{1001}", "a{0,1001}", "a{3,2}", "a{123456789}",
        "(a", "a)", "((a)", "[a", "[]", "[^]", "\\", "a\\",
        "(?P<n>a)(?P<n>b)", "(?P<>a)", "(?P<a-b>a)", "(?P<n", "(?P=n)", "(?P>n)",
        "(?x)a", "(?-)", "(?i-)", "(?--i)", "(?i", "(?",
        r"\p{Foo}", r"\pX", r"\p{Lu", r"\p", "[[:foo:]]", "[[:]]", "[z-a]",
        "((a{1000}){1000})",  # beyond MAX_PROGRAM
        "(a" * 2000 + ")" * 2000,  # nests too deeply
    ],
)
def test_refused(pattern: str) -> None:
    with pytest.raises(InvalidRegex):
        compile_regex(pattern)


def test_invalid_regex_is_a_value_error() -> None:
    assert issubclass(InvalidRegex, ValueError)


# Patterns from the syntax Python and RE2/J read alike on topic names: their answers agree.
atoms = st.sampled_from(["a", "b", "A", "0", r"\.", "-", "_", ".", "[ab]", "[^a]", "[a-c0]", r"\d", r"\w"])


@st.composite
def common_patterns(draw: st.DrawFn, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        if depth < 2 and draw(st.booleans()):
            alts = draw(st.lists(common_patterns(depth + 1), min_size=1, max_size=3))
            part = "(" + "|".join(alts) + ")"
        else:
            part = draw(atoms)
        parts.append(part + draw(st.sampled_from(["", "", "*", "+", "?", "{1,2}", "*?"])))
    return "".join(parts)


@given(pattern=common_patterns(), topic=topic_names)
def test_agrees_with_python_on_common_syntax(pattern: str, topic: str) -> None:
    assert matches(compile_regex(pattern), topic) is (re.fullmatch(pattern, topic) is not None)


@given(pattern=st.text(r"ab.*+?|()[]{}^$\-1,:iPE<>=!dQzp", max_size=12), topic=topic_names)
def test_any_text_compiles_or_is_refused_cleanly(pattern: str, topic: str) -> None:
    try:
        compiled = compile_regex(pattern)
    except InvalidRegex:
        return
    assert matches(compiled, topic) is (compiled.fullmatch(topic) is not None)
