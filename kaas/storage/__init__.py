"""Storage on the shared data directory: synchronous, trio-free, the only code that opens files.

May import: kaas.domain, kaas.wire.batch, kaas.errors, stdlib, crc32c, msgpack.
"""
