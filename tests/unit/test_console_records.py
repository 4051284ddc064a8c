"""The pure parts of the everyday commands: the console's record batches (encode, decode,
read_committed filtering), Apache's murmur2 partitioner, the console line formats,
kafka-configs' --add-config syntax and Java's double format, GetOffsetShell's partition
patterns."""

from __future__ import annotations

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaas.tools._console_format import Formatter, LineReader, properties
from kaas.tools._quotas import Entity, java_double, quota_text
from kaas.tools._records import Fetched, Outgoing, decode_batches, encode_batch, murmur2, partition_for
from kaas.tools.configs import parse_add_config
from kaas.tools.records import _matches, _partition_set, parse_time
from kaas.wire import batch as wb

blobs = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=20), blobs), max_size=4).map(tuple)
outgoing = st.builds(Outgoing, blobs, blobs, headers)


@given(st.lists(outgoing, min_size=1, max_size=30), st.integers(0, 2**40), st.integers(0, 2**40))
def test_a_batch_reads_back_what_was_encoded(records, timestamp, base):
    raw = bytearray(encode_batch(records, timestamp))
    h = wb.parse_header(raw)
    assert (h.records_count, h.magic, h.producer_id, h.size) == (len(records), 2, -1, len(raw))
    assert wb.crc_ok(raw, 0, h)
    wb.patch(raw, 0, base, 3)  # as the broker places it in its log
    got = decode_batches(bytes(raw))
    assert got == [Fetched(base + i, timestamp, "CreateTime", r.key, r.value, r.headers)
                   for i, r in enumerate(records)]


def test_read_committed_skips_aborted_transactions_and_markers():
    def data(base, pid, values, txn=True):
        b = bytearray(wb.build_batch(base_offset=base, producer_id=pid, producer_epoch=0, base_sequence=0,
                                     attributes=wb.ATTR_TRANSACTIONAL if txn else 0,
                                     records=[(None, v) for v in values]))
        return bytes(b)

    def marker(base, pid, commit):
        b = bytearray(wb.control_batch(producer_id=pid, producer_epoch=0, commit=commit, coordinator_epoch=0,
                                       timestamp=0))
        wb.patch(b, 0, base, 0)
        return bytes(b)

    log = (data(0, -1, [b"plain"], txn=False) + data(1, 7, [b"a1", b"a2"]) + data(3, 8, [b"c1"])
           + marker(4, 7, commit=False) + marker(5, 8, commit=True) + data(6, 7, [b"a-later"]))
    values = [r.value for r in decode_batches(log, aborted=[(7, 1)])]
    assert values == [b"plain", b"c1", b"a-later"]  # 7's aborted run ends at its ABORT marker
    assert [r.value for r in decode_batches(log)] == [b"plain", b"a1", b"a2", b"c1", b"a-later"]
    assert [r.offset for r in decode_batches(log)] == [0, 1, 2, 3, 6]


def test_murmur2_is_apaches():
    # Apache's UtilsTest.testMurmur2 vectors
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107
    assert all(0 <= partition_for(bytes([i]), 7) < 7 for i in range(256))


def test_line_reader_parses_headers_key_value_and_null_marker():
    r = LineReader(properties(["parse.key=true", "key.separator=:", "parse.headers=true",
                               "headers.delimiter=|", "null.marker=NULL"]))
    assert r.parse(b"h1:v1,h2:NULL|k:the value: with colon\n") == Outgoing(
        b"k", b"the value: with colon", (("h1", b"v1"), ("h2", None)))
    assert r.parse(b"NULL|NULL:NULL\n") == Outgoing(None, None, ())
    with pytest.raises(click.ClickException, match="No key separator found on line number 3"):
        r.parse(b"h:x|no separator\n")
    plain = LineReader(properties([]))
    assert plain.parse(b"a\tb\n") == Outgoing(None, b"a\tb", ())
    tabbed = LineReader(properties(["parse.key=true"]))
    assert tabbed.parse(b"a\tb\r\n") == Outgoing(b"a", b"b", ())
    with pytest.raises(click.BadParameter, match="null.marker and key.separator"):
        LineReader(properties(["null.marker=:", "key.separator=:"]))
    with pytest.raises(click.BadParameter, match="unknown properties print.key"):
        LineReader(properties(["print.key=true"]))


def test_formatter_prints_as_default_message_formatter():
    rec = Fetched(5, 1000, "CreateTime", b"k", b"v", (("a", b"1"), ("b", None)))
    everything = Formatter(properties(["print.timestamp=true", "print.partition=true", "print.offset=true",
                                       "print.headers=true", "print.key=true"]))
    assert everything.format(2, rec) == b"CreateTime:1000\tPartition:2\tOffset:5\ta:1,b:null\tk\tv\n"
    assert Formatter({}).format(0, rec) == b"v\n"
    assert Formatter(properties(["print.key=true", "key.separator=|"])).format(0, rec._replace(key=None)) == \
        b"null|v\n"
    assert Formatter(properties(["print.headers=true", "print.value=false"])).format(
        0, rec._replace(headers=())) == b"NO_HEADERS\n"
    assert Formatter(properties(["print.key=true", "key.separator=\\t", "line.separator=;"])).format(0, rec) == \
        b"k\tv;"


def test_add_config_syntax_and_java_doubles():
    assert parse_add_config("a=1,b=[x,y,z],c=") == {"a": "1", "b": "x,y,z", "c": ""}
    with pytest.raises(click.BadParameter):
        parse_add_config("novalue")
    assert [java_double(v) for v in (262144.0, 1e7, 1.5e-4, 0.5, 12345678.0, 0.0)] == \
        ["262144.0", "1.0E7", "1.5E-4", "0.5", "1.2345678E7", "0.0"]
    assert quota_text([Entity("client-id", "c"), Entity("user", "")]) == "the default user-principal, client-id 'c'"


def test_get_offsets_partition_patterns_and_times():
    ranges = _partition_set("1,3-5,9-,-1")
    assert [p for p in range(12) if _matches(ranges, p)] == [0, 1, 3, 4, 9, 10, 11]
    assert _matches(None, 123)
    assert [parse_time(t) for t in ("latest", "earliest", "max-timestamp", "-4", "1700000000000")] == \
        [-1, -2, -3, -4, 1700000000000]
    with pytest.raises(click.BadParameter):
        parse_time("-9")
