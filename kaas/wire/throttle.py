"""A handler's answer with its ``throttle_time_ms`` set (client quotas, KIP-219): the dict,
kio response or encoded body a handler returned, with the throttle time the quotas asked
for. An encoded body is decoded and encoded again, which costs only the throttled
answers; a version without the field is returned as it was."""

from __future__ import annotations

import dataclasses
import datetime
import functools
from typing import Any

from kaas.wire import codec

__all__ = ["has_throttle_field", "with_throttle"]


@functools.cache
def has_throttle_field(api_key: int, version: int) -> bool:
    """Whether the response of this key and version carries ``throttle_time_ms``."""
    return any(f.name == "throttle_time" for f in dataclasses.fields(codec.response_class(api_key, version)))


def with_throttle(api_key: int, version: int, answer: Any, throttle_ms: int) -> Any:
    """``answer`` (a dict, a kio response, or an encoded body) with ``throttle_ms`` as its
    throttle time; None stays None (an acks=0 Produce has no answer)."""
    if answer is None or not has_throttle_field(api_key, version):
        return answer
    if isinstance(answer, dict):
        return {**answer, "throttle_time": throttle_ms}
    if isinstance(answer, (bytes, bytearray, memoryview)):
        answer = codec.decode_body(api_key, version, answer)
    return dataclasses.replace(answer, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
