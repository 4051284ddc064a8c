"""TEMPORARY PLACEHOLDER (branch cg-core only): regular-expression subscriptions in RE2J
syntax are being written on branch cg-assign; this holds the agreed interface over
Python's ``re`` so the consumer-group machine can be built and tested meanwhile. It is
replaced whole when cg-assign is merged."""

from __future__ import annotations

import re

__all__ = ["InvalidRegex", "compile_regex", "matches"]


class InvalidRegex(ValueError):
    """The pattern does not compile."""


def compile_regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidRegex(str(exc)) from None


def matches(compiled: re.Pattern[str], topic: str) -> bool:
    """Whole-name match, as Java's ``Matcher.matches()``."""
    return compiled.fullmatch(topic) is not None
