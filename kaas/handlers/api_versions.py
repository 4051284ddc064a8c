"""ApiVersions (18): the advertised ranges come from the handler registry."""

from __future__ import annotations

import re
from functools import cache

from kio.schema.errors import ErrorCode

from kaas.wire import codec
from kaas.wire.build import build

API_KEY = 18
VERSIONS = (0, 4)

_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


@cache
def _body(version: int, error: ErrorCode) -> bytes:
    """The encoded answer: the same for every request of a version (the registry is fixed
    at import), so built and encoded once (a 60-entry array was most of the request's cost)."""
    from kaas.handlers import versions_table

    body = {"error_code": error, "api_keys": versions_table(), "throttle_time": 0}
    return codec.encode_body(API_KEY, version, build(codec.response_class(API_KEY, version), body))


async def handle(ctx, req) -> bytes:
    if ctx.api_version >= 3:
        name = req.client_software_name
        ver = req.client_software_version
        if not (_SOFTWARE.match(name or "") and _SOFTWARE.match(ver or "")):
            return _body(ctx.api_version, ErrorCode.invalid_request)
    return _body(ctx.api_version, ErrorCode.none)
