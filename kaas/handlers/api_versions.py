"""ApiVersions (18): the advertised ranges come from the handler registry."""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING, TypeAlias

from kio.schema.api_versions import v3, v4
from kio.schema.errors import ErrorCode

from kaas.wire import codec
from kaas.wire.build import build

if TYPE_CHECKING:
    from kio.schema.api_versions import v0, v1, v2

    from kaas.handlers import Context

    ApiVersionsRequest: TypeAlias = (v0.ApiVersionsRequest | v1.ApiVersionsRequest | v2.ApiVersionsRequest
                                     | v3.ApiVersionsRequest | v4.ApiVersionsRequest)

API_KEY = 18
VERSIONS = (0, 4)
_NAMED = (v3.ApiVersionsRequest, v4.ApiVersionsRequest)  # the versions whose clients name themselves (v3+)

_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


@cache
def _body(version: int, error: ErrorCode) -> bytes:
    """The encoded answer: the same for every request of a version (the registry is fixed
    at import), so built and encoded once (a 60-entry array was most of the request's cost)."""
    from kaas.handlers import versions_table

    body = {"error_code": error, "api_keys": versions_table(), "throttle_time": 0}
    return codec.encode_body(API_KEY, version, build(codec.response_class(API_KEY, version), body))


async def handle(ctx: Context, req: ApiVersionsRequest) -> bytes:
    if isinstance(req, _NAMED):
        name = req.client_software_name
        ver = req.client_software_version
        if not (_SOFTWARE.match(name or "") and _SOFTWARE.match(ver or "")):
            return _body(ctx.api_version, ErrorCode.invalid_request)
    return _body(ctx.api_version, ErrorCode.none)
