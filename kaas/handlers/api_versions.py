"""ApiVersions (18): the advertised ranges are the handler registry's (dispatch hands them
over in ``Context.api_keys``); v3+ adds the supported features (``domain.features``) and
the finalized ones (``broker.features``)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, TypeAlias

from kio.schema.api_versions import v3, v4
from kio.schema.errors import ErrorCode

from kaas.domain import features
from kaas.wire import codec
from kaas.wire.build import build

if TYPE_CHECKING:
    from kio.schema.api_versions import v0, v1, v2

    from kaas.handlers.context import ApiRange, Context

    ApiVersionsRequest: TypeAlias = (v0.ApiVersionsRequest | v1.ApiVersionsRequest | v2.ApiVersionsRequest
                                     | v3.ApiVersionsRequest | v4.ApiVersionsRequest)

API_KEY = 18
VERSIONS = (0, 4)
_NAMED = (v3.ApiVersionsRequest, v4.ApiVersionsRequest)  # the versions whose clients name themselves (v3+)

_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


@lru_cache(maxsize=64)
def _body(version: int, error: ErrorCode, api_keys: tuple[ApiRange, ...], epoch: int = -1,
          finalized: tuple[tuple[str, int], ...] = ()) -> bytes:
    """The encoded answer: the same for every request of a version while the finalized
    features stay (the registry is fixed at import), so built and encoded once per version
    and finalized epoch (a 60-entry array was most of the request's cost).

    v3+ carries the supported features (v3 leaves out those whose minimum is 0, as Apache
    does for the clients of that version) and the finalized levels with their epoch.
    """
    body: dict[str, object] = {"error_code": error, "throttle_time": 0, "api_keys": [
        {"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in api_keys]}
    if version >= 3:
        body["supported_features"] = [{"name": n, "min_version": lo, "max_version": hi}
                                      for n, (lo, hi) in sorted(features.SUPPORTED.items()) if version >= 4 or lo > 0]
        body["finalized_features_epoch"] = epoch
        body["finalized_features"] = [{"name": n, "min_version_level": lv, "max_version_level": lv}
                                      for n, lv in finalized]
    return codec.encode_body(API_KEY, version, build(codec.response_class(API_KEY, version), body))


async def handle(ctx: Context, req: ApiVersionsRequest) -> bytes:
    assert ctx.api_keys, "dispatch hands ApiVersions the registry's table"
    if isinstance(req, _NAMED):
        name = req.client_software_name
        ver = req.client_software_version
        if not (_SOFTWARE.match(name or "") and _SOFTWARE.match(ver or "")):
            return _body(ctx.api_version, ErrorCode.invalid_request, ctx.api_keys)
    if ctx.api_version < 3:
        return _body(ctx.api_version, ErrorCode.none, ctx.api_keys)
    return _body(ctx.api_version, ErrorCode.none, ctx.api_keys, *ctx.broker.features.advertised())
