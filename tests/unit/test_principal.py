"""ssl.principal.mapping.rules as Apache's SslPrincipalMapper (kaas.domain.principal)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaas.domain.principal import NoMatchingRule, Rule, RuleError, format_dn, map_name, parse_rules

APACHE_DOC_RULES = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
                    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
                    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
                    "DEFAULT")


@pytest.mark.parametrize("dn, name", [
    # the cases of Apache's SslPrincipalMapperTest.testCommaWithWhitespace / testRules
    ("CN=Kafka Server 1,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown", "Kafka Server 1"),
    ("CN=duke,OU=JavaSoft,O=Sun Microsystems,L=Cupertino,ST=CA,C=US", "duke@javasoft"),
    ("OU=JavaSoft,O=Sun Microsystems,C=US,cn=Duke.1", "duke.1"),
    ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
])
def test_apache_documentation_rules(dn, name):
    assert map_name(dn, parse_rules(APACHE_DOC_RULES)) == name


def test_parse():
    assert parse_rules(None) == (Rule(),)
    assert parse_rules("  ") == (Rule(),)
    assert parse_rules("DEFAULT") == (Rule(),)
    assert parse_rules("RULE:^CN=(.*)$/$1/U , DEFAULT") == (Rule("^CN=(.*)$", "$1", "U"), Rule())
    # an escaped slash inside the pattern and the replacement
    rules = parse_rules(r"RULE:^CN=(.*?)\/(.*)$/$1\/x/")
    assert map_name("CN=a/b", rules) == "a/x"


@pytest.mark.parametrize("bad", ["RULE:^CN=(.*)$/$1", "RULE:^CN=(.*)$/$1/X", "DEFAULTX", "foo",
                                 "RULE:(/x/", "RULE:^(.*)$/$2/", "RULE:^(.*)$/x\\/"])
def test_bad_rules(bad):
    with pytest.raises(RuleError):
        parse_rules(bad)


def test_no_rule_applies():
    with pytest.raises(NoMatchingRule):
        map_name("CN=a,O=b", parse_rules("RULE:^CN=(.*),O=c$/$1/"))


def test_rule_must_match_the_whole_name():
    assert map_name("CN=a,O=b", parse_rules("RULE:CN=(.*?),/$1/,DEFAULT")) == "CN=a,O=b"


def test_format_dn_is_rfc2253_last_rdn_first():
    subject = ((("countryName", "GB"),), (("organizationName", "Ex, Ltd"),), (("organizationalUnitName", "eng"),),
               (("commonName", "alice"),))
    assert format_dn(subject) == r"CN=alice,OU=eng,O=Ex\, Ltd,C=GB"
    assert format_dn(((("commonName", "#x "),),)) == r"CN=\#x\ "


dn_values = st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=12)


@given(dn_values, dn_values)
def test_default_is_identity_and_rules_apply_in_order(cn, org):
    dn = f"CN={cn},O={org}"
    assert map_name(dn, parse_rules("DEFAULT")) == dn
    assert map_name(dn, parse_rules("RULE:^(.*)$/$1/")) == dn
    assert map_name(dn, parse_rules("RULE:^CN=([^,]*),.*$/$1/L,DEFAULT")) == cn.lower()
    assert map_name(dn, parse_rules("RULE:^CN=([^,]*),.*$/$1/U")) == cn.upper()
    assert map_name(dn, parse_rules("RULE:^NOPE$/x/,RULE:^CN=[^,]*,O=(.*)$/org-$1/")) == f"org-{org}"


@given(st.lists(st.sampled_from(["DEFAULT", "RULE:^CN=(.*?),O=(.*)$/$2:$1/L", r"RULE:^(.*)$/u\/$1/U"]),
                min_size=1, max_size=4), st.sampled_from([",", ", ", " ,  "]))
def test_split_is_independent_of_spacing(rules, sep):
    assert parse_rules(sep.join(rules)) == parse_rules(",".join(rules))
    assert len(parse_rules(sep.join(rules))) == len(rules)
