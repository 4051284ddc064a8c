"""ApiVersions (18): the advertised ranges come from the handler registry."""

from __future__ import annotations

import re

from kio.schema.errors import ErrorCode

API_KEY = 18
VERSIONS = (0, 4)

_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


async def handle(ctx, req) -> dict:
    from kaas.handlers import versions_table

    if ctx.api_version >= 3:
        name = req.client_software_name
        ver = req.client_software_version
        if not (_SOFTWARE.match(name or "") and _SOFTWARE.match(ver or "")):
            return {"error_code": ErrorCode.invalid_request, "api_keys": versions_table(), "throttle_time": 0}
    return {"error_code": ErrorCode.none, "api_keys": versions_table(), "throttle_time": 0}
