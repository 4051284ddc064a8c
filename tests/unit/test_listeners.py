"""Listener options as Apache Kafka parses them (kaas.listeners)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaas.listeners import Endpoint, Listener, ListenerError, parse_endpoints, parse_protocol_map, resolve, shift_ports
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
