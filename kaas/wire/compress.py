"""Compressing a v2 batch's records section the way the Java client and Apache's broker do,
for a topic whose ``compression.type`` names a codec other than the producer's.

Each codec is written in the framing Apache's own writers use, so that every client that
reads Apache's logs reads these too:

- gzip (1): a gzip member (deflate, ``compression.gzip.level``, default 6 as Java's -1);
- snappy (2): the xerial framing of snappy-java's ``SnappyOutputStream`` (what the Java
  client and broker write): the 16-byte header (magic, version 1, compatible version 1),
  then per 32 KiB of input a big-endian length and a raw snappy block;
- lz4 (3): the LZ4 frame format as Kafka's ``Lz4BlockOutputStream`` writes it: 64 KiB
  independent blocks (Kafka's reader refuses linked ones), no block or content checksum,
  a correct header checksum; the default level 9 uses LZ4's fast compressor and any other
  ``compression.lz4.level`` the high-compression one at that level, as Apache does;
- zstd (4): one zstd frame at ``compression.zstd.level`` (default 3).

Decompression is ``kaas.wire.records``' (it reads every framing clients send).

Invariants:
    - ``decompress(codec, compress(codec, data, level)) == data`` for every codec and level;
    - codec 0 is the identity.
"""

from __future__ import annotations

import struct
import zlib

__all__ = ["CODECS", "DEFAULT_LEVELS", "LEVEL_RANGES", "compress"]

# compression.type -> codec id of the batch attributes (-1: keep the producer's)
CODECS: dict[str, int] = {"producer": -1, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# codec id -> (its level config, Apache's default, the range Apache accepts)
DEFAULT_LEVELS: dict[int, int] = {1: -1, 3: 9, 4: 3}
LEVEL_RANGES: dict[str, tuple[int, int, int]] = {  # key -> (codec, min, max); gzip also takes -1
    "compression.gzip.level": (1, 1, 9),
    "compression.lz4.level": (3, 1, 17),
    "compression.zstd.level": (4, -131072, 22),
}

_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_LZ4_MAGIC = struct.pack("<I", 0x184D2204)
_LZ4_BLOCK = 64 * 1024
_LZ4_FLG = 0x60  # version 01, independent blocks, no checksums, no content size
_LZ4_BD = 0x40  # 64 KiB maximum block size
_LZ4_LE32 = struct.Struct("<I")
_LZ4_UNCOMPRESSED = 0x80000000
_BE32 = struct.Struct(">I")


def _xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of a short input (< 16 bytes: the LZ4 frame descriptor's checksum)."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF
    assert len(data) < 16
    h = (seed + p5 + len(data)) & mask
    i = 0
    while i + 4 <= len(data):
        h = (h + _LZ4_LE32.unpack_from(data, i)[0] * p3) & mask
        h = (((h << 17) | (h >> 15)) & mask) * p4 & mask
        i += 4
    for b in data[i:]:
        h = (h + b * p5) & mask
        h = (((h << 11) | (h >> 21)) & mask) * p1 & mask
    h ^= h >> 15
    h = (h * p2) & mask
    h ^= h >> 13
    h = (h * p3) & mask
    h ^= h >> 16
    return h


_LZ4_HEADER = _LZ4_MAGIC + bytes([_LZ4_FLG, _LZ4_BD, (_xxh32(bytes([_LZ4_FLG, _LZ4_BD])) >> 8) & 0xFF])


def _gzip(data: bytes, level: int) -> bytes:
    c = zlib.compressobj(6 if level == -1 else level, zlib.DEFLATED, 31)  # 31: a gzip member, mtime 0
    return c.compress(data) + c.flush()


def _snappy(data: bytes) -> bytes:
    import cramjam

    out = bytearray(_XERIAL_HEADER)
    for at in range(0, len(data), _XERIAL_BLOCK):
        block = cramjam.snappy.compress_raw(data[at:at + _XERIAL_BLOCK])
        out += _BE32.pack(len(block))
        out += block
    return bytes(out)


def _lz4(data: bytes, level: int) -> bytes:
    import cramjam

    out = bytearray(_LZ4_HEADER)
    for at in range(0, len(data), _LZ4_BLOCK):
        chunk = data[at:at + _LZ4_BLOCK]
        if level == 9:
            block = cramjam.lz4.compress_block(chunk, store_size=False)
        else:
            block = cramjam.lz4.compress_block(chunk, mode="high_compression", compression=level, store_size=False)
        if len(block) >= len(chunk):  # incompressible: stored as is, flagged
            out += _LZ4_LE32.pack(len(chunk) | _LZ4_UNCOMPRESSED)
            out += chunk
        else:
            out += _LZ4_LE32.pack(len(block))
            out += block
    out += b"\x00\x00\x00\x00"  # end mark
    return bytes(out)


def _zstd(data: bytes, level: int) -> bytes:
    import cramjam

    return bytes(cramjam.zstd.compress(data, level=level))


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """The records section ``data`` (uncompressed records) compressed with ``codec``.

    Args:
        codec: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
        data: the concatenated records.
        level: the codec's level (``compression.<codec>.level``); None: Apache's default.

    Raises:
        ValueError: an unknown codec.
    """
    if codec == 0:
        return data
    if level is None:
        level = DEFAULT_LEVELS.get(codec, 0)
    if codec == 1:
        return _gzip(data, level)
    if codec == 2:
        return _snappy(data)
    if codec == 3:
        return _lz4(data, level)
    if codec == 4:
        return _zstd(data, level)
    raise ValueError(f"unknown compression codec {codec}")
