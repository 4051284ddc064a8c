"""The principal of a TLS client certificate (issue 21): its subject as an RFC 2253
distinguished name, mapped by Apache Kafka's ``ssl.principal.mapping.rules``
(``SslPrincipalMapper``). Pure: ``net.tls`` hands in the subject of a verified
certificate and prefixes the result with ``User:``.

Rules, comma-separated, tried in order; the first that applies names the principal:

- ``DEFAULT``: the distinguished name itself;
- ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last slash:
  when the (Java) regular expression ``pattern`` matches the whole name, every match of it
  is replaced by ``replacement`` (``$1`` names a group; ``\\`` escapes, ``\\/`` is a slash
  inside the pattern or the replacement), then lower- or upper-cased.

Invariants:
    - a rule that does not match the whole name does not apply (Java's ``matches``);
    - no rule applying is an error (``NoMatchingRule``), never an anonymous principal.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# Apache's RULE_PATTERN and RULE_SPLITTER (SslPrincipalMapper.java)
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_PARSER = re.compile(_RULE)

# getpeercert() attribute names -> the keywords of Java's X500Principal.getName() (RFC 2253)
_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
    "domainComponent": "DC", "userId": "UID",
}


class RuleError(ValueError):
    """``ssl.principal.mapping.rules`` does not parse."""


class NoMatchingRule(LookupError):
    """No rule applies to a distinguished name (Apache: ``NoMatchingRule``)."""


@dataclass(frozen=True, slots=True)
class Rule:
    pattern: str | None = None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "", "L" or "U"

    @property
    def is_default(self) -> bool:
        return self.pattern is None

    def apply(self, dn: str) -> str | None:
        """The name this rule gives ``dn``; None when it does not apply."""
        if self.pattern is None:
            return dn
        rx = re.compile(self.pattern)
        if rx.fullmatch(dn) is None:
            return None
        parts = _replacement(self.replacement, rx.groups)
        out = rx.sub(lambda m: "".join(p if isinstance(p, str) else (m.group(p) or "") for p in parts), dn)
        if self.case == "L":
            return out.lower()
        if self.case == "U":
            return out.upper()
        return out


def _replacement(text: str, groups: int) -> list[str | int]:
    """A Java ``Matcher.replaceAll`` replacement as literal strings and group numbers:
    ``\\x`` is a literal x, ``$n`` group n (as many digits as still name a group).

    Raises:
        RuleError: a trailing backslash, or ``$`` not followed by a group number.
    """
    out: list[str | int] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text):
                raise RuleError(f"character to be escaped is missing in replacement {text!r}")
            out.append(text[i + 1])
            i += 2
        elif c == "$":
            j = i + 1
            if j >= len(text) or not text[j].isdigit():
                raise RuleError(f"illegal group reference in replacement {text!r}")
            n = int(text[j])
            j += 1
            while j < len(text) and text[j].isdigit() and n * 10 + int(text[j]) <= groups:
                n = n * 10 + int(text[j])
                j += 1
            if n > groups:
                raise RuleError(f"no group {n} in the pattern of replacement {text!r}")
            out.append(n)
            i = j
        else:
            out.append(c)
            i += 1
    return out


def parse_rules(text: str | None) -> tuple[Rule, ...]:
    """``ssl.principal.mapping.rules`` -> rules, in order. None or blank: ``DEFAULT``.

    Raises:
        RuleError: a rule does not parse, or its pattern is not a regular expression.
    """
    if text is None or not text.strip():
        return (Rule(),)
    pieces = [s.group(1) for s in _SPLITTER.finditer(text.strip()) if s.group(1)]
    rules = []
    for piece in pieces:
        m = _PARSER.match(piece)
        if m is None or m.end() != len(piece):
            raise RuleError(f"invalid rule: {piece!r}")
        if m.group(1) is not None:
            rules.append(Rule())
        elif m.group(2) is not None:
            try:
                rx = re.compile(m.group(2))
            except re.error as exc:
                raise RuleError(f"invalid pattern in rule {piece!r}: {exc}") from None
            _replacement(m.group(3), rx.groups)
            rules.append(Rule(m.group(2), m.group(3), m.group(4)))
        else:
            raise RuleError(f"invalid rule: {piece!r}")
    if not rules:
        raise RuleError(f"no rules in {text!r}")
    return tuple(rules)


def map_name(dn: str, rules: Sequence[Rule]) -> str:
    """The principal name the first applying rule gives ``dn``.

    Raises:
        NoMatchingRule: none applies.
    """
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return name
    raise NoMatchingRule(f"no rules apply to {dn}")


def _escape(value: str) -> str:
    """RFC 2253 escaping of one attribute value."""
    out = []
    for i, c in enumerate(value):
        if c in ',+"\\<>;' or (c == "#" and i == 0) or (c == " " and i in (0, len(value) - 1)):
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


def format_dn(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """The RFC 2253 string of a subject as ``ssl.SSLSocket.getpeercert()`` gives it (a
    sequence of RDNs, each a sequence of (attribute, value)): the last RDN first, as Java's
    ``X500Principal.getName()`` writes it (``CN=alice,OU=eng,O=Example,C=GB``)."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_KEYWORDS.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)
