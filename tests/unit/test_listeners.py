"""Listener options as Apache Kafka parses them (kaas.listeners)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaas.listeners import (
    SASL_MECHANISMS,
    Endpoint,
    Listener,
    ListenerError,
    apply_listener_configs,
    parse_endpoints,
    parse_protocol_map,
    resolve,
    shift_ports,
)
from kaas.settings import Settings


def test_two_listeners_default_map():
    ls, ib = resolve("PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093")
    assert ib == "PLAINTEXT"
    assert ls == (Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT", "127.0.0.1", 9092),
                  Listener("SSL", "127.0.0.1", 9093, "SSL", "127.0.0.1", 9093))
    assert ls[1].tls and not ls[1].sasl and not ls[0].tls


def test_custom_names_need_the_map_and_the_inter_broker_name():
    with pytest.raises(ListenerError, match="no security protocol defined for listener INTERNAL"):
        resolve("INTERNAL://:9092")
    with pytest.raises(ListenerError, match="inter-broker-listener-name"):
        resolve("INTERNAL://:9092,EXTERNAL://:9093", protocol_map="INTERNAL:SSL,EXTERNAL:SASL_SSL")
    ls, ib = resolve("internal://:9092,EXTERNAL://:9093", protocol_map="INTERNAL:SSL,EXTERNAL:SASL_SSL",
                     inter_broker="internal")
    assert ib == "INTERNAL"
    assert [(x.name, x.protocol, x.host, x.advertised_host) for x in ls] == [
        ("INTERNAL", "SSL", "", "127.0.0.1"), ("EXTERNAL", "SASL_SSL", "", "127.0.0.1")]
    assert ls[1].tls and ls[1].sasl


def test_advertised_listeners():
    ls, _ = resolve("PLAINTEXT://0.0.0.0:9092,SSL://0.0.0.0:9093",
                    advertised="PLAINTEXT://kaas-0.example:19092")
    assert (ls[0].advertised_host, ls[0].advertised_port, ls[0].advertised) == ("kaas-0.example", 19092, True)
    assert ls[1].advertised is False  # listening, but never named in Metadata
    with pytest.raises(ListenerError, match="subset"):
        resolve("PLAINTEXT://:9092", advertised="PLAINTEXT://a:1,SSL://a:2")
    with pytest.raises(ListenerError, match="nonroutable"):
        resolve("PLAINTEXT://:9092", advertised="PLAINTEXT://0.0.0.0:9092")
    with pytest.raises(ListenerError, match="advertised-listeners"):  # the inter-broker one must be advertised
        resolve("PLAINTEXT://:9092,SSL://:9093", advertised="SSL://a:9093")


@pytest.mark.parametrize("bad", ["PLAINTEXT:/127.0.0.1:9092", "PLAINTEXT://127.0.0.1", "://h:1",
                                 "PLAINTEXT://h:70000", "PLAINTEXT://h:1,PLAINTEXT://h:2"])
def test_bad_listeners(bad):
    with pytest.raises(ListenerError):
        resolve(bad)


def test_bad_protocol_map():
    for bad in ("A:TLS", "A", "A:SSL,A:SSL", ":SSL"):
        with pytest.raises(ListenerError):
            parse_protocol_map(bad)
    assert parse_protocol_map(None)["SASL_SSL"] == "SASL_SSL"
    assert parse_protocol_map(" a : ssl ") == {"A": "SSL"}  # a given map replaces the default


def test_same_bind_twice_is_refused():
    with pytest.raises(ListenerError, match="both bind"):
        resolve("PLAINTEXT://h:1,SSL://h:1")


def test_ipv6_and_shift():
    assert parse_endpoints("SSL://[::1]:9093") == [Endpoint("SSL", "::1", 9093)]
    assert shift_ports("PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9192,X://h:0", 2) == \
        "PLAINTEXT://127.0.0.1:9094,SSL://[::1]:9194,X://h:0"


def test_settings_without_listeners_is_the_one_plaintext_listener():
    s = Settings(listen_host="0.0.0.0", listen_port=1, advertise_host="a", advertise_port=2)
    assert s.all_listeners == (Listener("PLAINTEXT", "0.0.0.0", 1, "PLAINTEXT", "a", 2),)
    assert s.inter_broker.name == "PLAINTEXT"


names = st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True)
hosts = st.sampled_from(["127.0.0.1", "", "localhost", "::1", "kaas-1.example"])


@given(st.lists(st.tuples(names, hosts, st.integers(1, 65535)), min_size=1, max_size=5,
                unique_by=(lambda t: t[0], lambda t: (t[1], t[2]))))
def test_endpoints_round_trip(entries):
    text = ",".join(str(Endpoint(n, h, p)) for n, h, p in entries)
    assert parse_endpoints(text) == [Endpoint(n, h, p) for n, h, p in entries]
    assert parse_endpoints(shift_ports(text, 0)) == parse_endpoints(text)
    pmap = ",".join(f"{n}:SSL" for n, _, _ in entries)
    ls, ib = resolve(text, protocol_map=pmap, inter_broker=entries[-1][0])
    assert ib == entries[-1][0] and [x.name for x in ls] == [n for n, _, _ in entries]
    assert all(x.advertised_host not in ("", "0.0.0.0", "::") for x in ls)


@pytest.mark.parametrize(("args", "message"), [
    (["--listeners", "INTERNAL://127.0.0.1:1"], "listeners"),  # no protocol for INTERNAL in the map
    (["--sasl-enabled-mechanisms", "GSSAPI"], "--sasl-enabled-mechanisms"),
])
def test_broker_refuses_bad_listener_and_sasl_options(tmp_path, args, message):
    from click.testing import CliRunner

    from kaas.cli import cli

    res = CliRunner().invoke(cli, ["broker", "--data", str(tmp_path), *args])
    assert res.exit_code == 2 and message in res.output, res.output


# ----------------------------------------------------------------------------- listener-prefixed settings

def _three() -> tuple[Listener, ...]:
    ls, _ = resolve("PLAINTEXT://:9092,INTERNAL://:9093,EXTERNAL://:9094",
                    protocol_map="PLAINTEXT:PLAINTEXT,INTERNAL:SSL,EXTERNAL:SASL_SSL")
    return ls


def test_listener_configs_set_each_listeners_own_settings():
    ls = _three()
    out = apply_listener_configs(ls, ["listener.name.internal.ssl.client.auth=required",
                                      "listener.name.External.ssl.client.auth= None ",  # any case, as Apache's
                                      "listener.name.EXTERNAL.sasl.enabled.mechanisms=scram-sha-512, PLAIN"])
    assert [x.name for x in out] == ["PLAINTEXT", "INTERNAL", "EXTERNAL"]
    assert out[0] == ls[0]
    assert (out[1].ssl_client_auth, out[1].sasl_enabled_mechanisms) == ("required", None)
    assert (out[2].ssl_client_auth, out[2].sasl_enabled_mechanisms) == ("none", ("SCRAM-SHA-512", "PLAIN"))
    assert out[1].config_prefix == "listener.name.internal."
    assert apply_listener_configs(ls, []) == ls


def test_a_listeners_own_setting_wins_over_the_broker_wide_one():
    ls = apply_listener_configs(_three(), ["listener.name.internal.ssl.client.auth=none",
                                           "listener.name.external.sasl.enabled.mechanisms=PLAIN"])
    s = Settings(listeners=ls, ssl_client_auth="required", sasl_enabled_mechanisms=("SCRAM-SHA-256",))
    # EXTERNAL is SASL_SSL: the broker-wide option leaves it alone (KIP-684), its own would not
    assert [s.ssl_client_auth_of(x) for x in s.all_listeners] == ["required", "none", "none"]
    assert s.sasl_mechanisms_of("EXTERNAL") == ("PLAIN",)
    assert s.sasl_mechanisms_of("INTERNAL") == ("SCRAM-SHA-256",)
    assert s.sasl_mechanisms_of("GONE") == ("SCRAM-SHA-256",)
    assert s.listener("INTERNAL") is ls[1] and s.listener("internal") is None


def test_sasl_handshake_offers_the_listeners_own_mechanisms():
    from kaas.handlers._sasl import mechanisms
    from kaas.handlers.session import Session

    ls, _ = resolve("A://:1,B://:2,C://:3", protocol_map="A:SASL_SSL,B:SASL_SSL,C:SASL_PLAINTEXT", inter_broker="A")
    ls = apply_listener_configs(ls, ["listener.name.a.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
                                     "listener.name.c.sasl.enabled.mechanisms=SCRAM-SHA-256"])
    s = Settings(listeners=ls, inter_broker_listener="A")
    assert mechanisms(s, Session("A", "SASL_SSL")) == ["PLAIN", "SCRAM-SHA-512"]
    assert mechanisms(s, Session("B", "SASL_SSL")) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]  # the broker-wide default
    assert mechanisms(s, Session("C", "SASL_PLAINTEXT")) == ["SCRAM-SHA-256"]


@pytest.mark.parametrize(("item", "message"), [
    ("ssl.client.auth=required", "is not listener.name.<listener>.<key>=<value>"),
    ("listener.name.internal.ssl.client.auth", "is not listener.name.<listener>.<key>=<value>"),
    ("listener.name.nope.ssl.client.auth=required", "no listener NOPE (the listeners: PLAINTEXT, INTERNAL, EXTERNAL)"),
    ("listener.name.internal.ssl.keystore.location=/x", "kaas does not take 'ssl.keystore.location' per listener"),
    ("listener.name.internal.SSL.CLIENT.AUTH=none", "kaas does not take 'SSL.CLIENT.AUTH' per listener"),
    ("listener.name.nope.ssl.truststore.type=PEM", "neither a listener of this broker"),
    ("listener.name.ssl.client.auth=required", "neither a listener of this broker"),
    ("listener.name.internal.ssl.client.auth=maybe", "one of none, requested, required"),
    ("listener.name.plaintext.ssl.client.auth=required", "the protocol of PLAINTEXT is PLAINTEXT"),
    ("listener.name.internal.sasl.enabled.mechanisms=PLAIN", "the protocol of INTERNAL is SSL"),
    ("listener.name.external.sasl.enabled.mechanisms=GSSAPI", "unknown mechanisms GSSAPI"),
    ("listener.name.external.sasl.enabled.mechanisms= , ", "at least one mechanism"),
])
def test_bad_listener_configs_are_refused_in_one_line(item, message):
    with pytest.raises(ListenerError) as info:
        apply_listener_configs(_three(), [item])
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_listener_config_given_twice_is_refused():
    with pytest.raises(ListenerError, match="given twice"):
        apply_listener_configs(_three(), ["listener.name.internal.ssl.client.auth=none",
                                          "listener.name.INTERNAL.ssl.client.auth=required"])


_protocols = st.sampled_from(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
_dotted = st.from_regex(r"[A-Z][A-Z0-9_]{0,5}(\.[A-Z0-9_]{1,4})?", fullmatch=True)  # names may hold dots
_mechanism_lists = st.lists(st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]),
                            min_size=1, max_size=3)


def _cased(name: str, flips: list[bool]) -> str:
    return "".join(c.lower() if f else c for c, f in zip(name, flips + [False] * len(name), strict=False))


@given(st.lists(st.tuples(_dotted, _protocols), min_size=1, max_size=4, unique_by=lambda t: t[0]), st.data())
def test_listener_configs_reach_exactly_the_listeners_named(entries, data):
    text = ",".join(f"{n}://127.0.0.1:{i + 1}" for i, (n, _) in enumerate(entries))
    ls, _ = resolve(text, protocol_map=",".join(f"{n}:{p}" for n, p in entries), inter_broker=entries[0][0])
    items, want = [], {}
    for x in ls:
        prefix = "listener.name." + _cased(x.name, data.draw(st.lists(st.booleans(), max_size=12)))
        if x.tls and data.draw(st.booleans()):
            mode = data.draw(st.sampled_from(["none", "requested", "required"]))
            items.append(f"{prefix}.ssl.client.auth={mode.upper() if data.draw(st.booleans()) else mode}")
            want.setdefault(x.name, {})["ssl_client_auth"] = mode
        if x.sasl and data.draw(st.booleans()):
            mechs = data.draw(_mechanism_lists)
            items.append(f"{prefix}.sasl.enabled.mechanisms={','.join(m.lower() for m in mechs)}")
            want.setdefault(x.name, {})["sasl_enabled_mechanisms"] = tuple(mechs)
    items = data.draw(st.permutations(items))
    out = apply_listener_configs(ls, items)
    for before, after in zip(ls, out, strict=True):
        own = want.get(before.name, {})
        assert after.ssl_client_auth == own.get("ssl_client_auth")
        assert after.sasl_enabled_mechanisms == own.get("sasl_enabled_mechanisms")
        assert (after.name, after.protocol, after.port) == (before.name, before.protocol, before.port)


@given(st.from_regex(r"[a-z][a-z0-9.]{0,20}", fullmatch=True), st.sampled_from(["PLAINTEXT", "INTERNAL", "EXTERNAL"]))
def test_only_the_honoured_keys_are_accepted(key, listener):
    item = f"listener.name.{listener.lower()}.{key}=x"
    if key in ("ssl.client.auth", "sasl.enabled.mechanisms"):
        return
    with pytest.raises(ListenerError):
        apply_listener_configs(_three(), [item])


def test_the_mechanisms_a_listener_may_name_are_the_ones_the_broker_serves():
    from kaas.handlers._sasl import SUPPORTED

    assert set(SASL_MECHANISMS) == set(SUPPORTED)
