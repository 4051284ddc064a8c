"""One broker cluster as the differ sees it: connections per broker (and, on a secure
cluster, per user), routing to coordinators and leaders, topic ids, and the run of one
instance (setup, then the request under test) to a plain tree."""

from __future__ import annotations

import dataclasses
import hashlib
import ssl
import struct
import time
import uuid
from collections.abc import Mapping
from typing import Any

from kio.serial import entity_reader

from kaas.client import SaslConfig, ScramClient, WireClient, response_reader
from kaas.wire import codec
from kaas.wire.batch import ATTR_TRANSACTIONAL, build_batch
from kaas.wire.build import build

from .corpus import Instance, lookup, substitute
from .normalise import to_tree

TIMEOUT = 20.0
NOBODY = "none"
"""A step's ``as`` for a connection that has not authenticated (yet): one per instance and
broker, kept across its steps, so that a SaslHandshake and the SaslAuthenticate after it
share it."""


@dataclasses.dataclass(frozen=True)
class Auth:
    """How a secure cluster's connections authenticate: SCRAM as one of ``passwords``'
    users (``default_user`` unless a step says ``as``), over TLS with ``ssl_context``."""

    passwords: Mapping[str, str]
    ssl_context: ssl.SSLContext | None = None
    mechanism: str = "SCRAM-SHA-512"
    default_user: str = "admin"


def make_sasl(kind: str, spec: Mapping[str, Any], inst: Instance) -> bytes:
    """A SCRAM client message of the instance (its nonce derived from its id, so that both
    clusters see the same): ``first`` (``user``) or ``final`` (``user``, ``password``,
    ``mechanism``, ``server_first``: the server's first message)."""
    nonce = hashlib.sha256(inst.id.encode()).hexdigest()[:24]
    client = ScramClient(spec.get("mechanism", "SCRAM-SHA-256"), spec["user"], spec.get("password", ""), nonce)
    first = client.first()
    if kind == "first":
        return first
    return client.final(bytes(spec["server_first"]))


def make_batch(spec: Mapping[str, Any]) -> bytes:
    """A v2 batch: ``count`` records (``key``/``value`` text), producer ``pid``/``epoch``/
    ``seq``, ``txn`` (transactional); ``corrupt``: ``crc`` (a flipped CRC byte),
    ``length`` (a batch length past the end), ``magic`` (magic 1)."""
    count = int(spec.get("count", 1))
    records = [(None, f"{spec.get('value', 'v')}-{i}".encode()) for i in range(count)]
    data = bytearray(build_batch(
        attributes=ATTR_TRANSACTIONAL if spec.get("txn") else 0,
        base_timestamp=int(spec.get("timestamp", int(time.time() * 1000))),
        producer_id=int(spec.get("pid", -1)), producer_epoch=int(spec.get("epoch", -1)),
        base_sequence=int(spec.get("seq", -1)), records=records))
    corrupt = spec.get("corrupt")
    if corrupt == "crc":
        data[17] ^= 0xFF
    elif corrupt == "length":
        struct.pack_into(">i", data, 8, len(data) + 100)
    elif corrupt == "magic":
        data[16] = 1
    elif corrupt == "truncated":
        del data[-3:]
    return bytes(data)


class Side:
    """``apache`` or ``kaas``: a cluster reached at ``ports`` on 127.0.0.1."""

    def __init__(self, name: str, ports: list[int], auth: Auth | None = None) -> None:
        self.name = name
        self.ports = ports
        self.auth = auth
        self.conns: dict[tuple[int, str | None], WireClient] = {}
        self.topic_ids: dict[str, str] = {}

    def close(self) -> None:
        for c in self.conns.values():
            c.close()
        self.conns.clear()

    def _open(self, port: int, user: str | None) -> WireClient:
        if self.auth is None:
            return WireClient("127.0.0.1", port, timeout=TIMEOUT)
        sasl = None if user in (None, NOBODY) else SaslConfig(self.auth.mechanism, user, self.auth.passwords[user])
        return WireClient("127.0.0.1", port, timeout=TIMEOUT, sasl=sasl, ssl_context=self.auth.ssl_context)

    def _conn(self, port: int, fresh: bool, user: str | None) -> WireClient:
        if fresh:
            return self._open(port, user)
        key = (port, user)
        if key not in self.conns:
            self.conns[key] = self._open(port, user)
        return self.conns[key]

    def _user(self, step: Mapping[str, Any]) -> str | None:
        if self.auth is None:
            return None
        return str(step.get("as", self.auth.default_user))

    def end_instance(self) -> None:
        """Close the instance's unauthenticated connections (``as``: ``none``)."""
        for key in [k for k in self.conns if k[1] == NOBODY]:
            self.conns.pop(key).close()

    def call(self, port: int, api: int, version: int, body: Any, fresh: bool = False,
             user: str | None = None) -> dict[str, Any]:
        """The response as a plain tree, or ``{"closed": ...}`` when the broker closed the
        connection (or did not answer in time). ``user``: on a secure cluster, who the
        connection authenticated as (default: the admin; ``none``: nobody)."""
        if self.auth is not None and user is None:
            user = self.auth.default_user
        try:
            wc = self._conn(port, fresh, user)
        except (OSError, EOFError, ConnectionError) as exc:
            return {"closed": f"connect: {type(exc).__name__}"}
        try:
            if isinstance(body, bytes):
                wc.corr += 1
                wc.sock.sendall(codec.encode_request(api, version, wc.corr, "kaas-diff", body))
                size = struct.unpack(">i", wc._recv(4))[0]
                payload = wc._recv(size)
                _corr, off = codec.response_header(api, version, payload)
                resp_cls, data = codec.response_class(api, version), payload[off:]
            else:
                resp_cls, data = wc._exchange(build(codec.request_class(api, version), body))
        except (OSError, EOFError, ConnectionError, struct.error) as exc:
            wc.close()
            self.conns.pop((port, user), None)
            if isinstance(exc, TimeoutError):
                return {"closed": "timeout"}
            # over TLS a close is an SSL error or a reset as often as an end of file
            return {"closed": type(exc).__name__ if self.auth is None else "closed"}
        finally:
            if fresh:
                wc.close()
        try:
            resp = response_reader(resp_cls)(data, 0)[0]
        except NotImplementedError:
            resp = entity_reader(resp_cls)(data, 0)[0]
        return to_tree(resp)

    def metadata(self, topics: list[str] | None) -> dict[str, Any]:
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False}
        return self.call(self.ports[0], 3, 12, body)

    def create_topics(self, layout: Mapping[str, int]) -> None:
        """Create the corpus's topics (replication factor: every broker, up to 3) and wait
        until each partition has a leader; record their ids."""
        rf = min(3, len(self.ports))
        body = {"topics": [{"name": n, "num_partitions": p, "replication_factor": rf} for n, p in layout.items()],
                "timeout": 30000}
        self.call(self.ports[0], 19, 5, body)
        deadline = time.monotonic() + 60
        while True:
            md = self.metadata(list(layout))
            ok = all(t["error_code"] == "none" and len(t["partitions"]) == layout[t["name"]]
                     and all(p["leader_id"] >= 0 for p in t["partitions"]) for t in md.get("topics", []))
            if ok and len(md.get("topics", [])) == len(layout):
                self.topic_ids = {t["name"]: t["topic_id"] for t in md["topics"]}
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: topics not ready: {md}")
            time.sleep(0.3)

    def coordinator(self, key: str, key_type: int) -> int:
        deadline = time.monotonic() + 30
        while True:
            r = self.call(self.ports[0], 10, 3, {"key": key, "key_type": key_type})
            if r.get("error_code") == "none":
                return int(r["port"])
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: no coordinator for {key!r}: {r}")
            time.sleep(0.3)

    def leader(self, topic: str, partition: int) -> int:
        md = self.metadata([topic])
        for t in md.get("topics", []):
            for p in t["partitions"]:
                if p["partition_index"] == partition and p["leader_id"] >= 0:
                    for b in md["brokers"]:
                        if b["node_id"] == p["leader_id"]:
                            return int(b["port"])
        return self.ports[0]

    def route(self, to: str, inst: Instance) -> int:
        if to == "group":
            return self.coordinator(f"g-{inst.uniq}", 0)
        if to == "txn":
            return self.coordinator(f"t-{inst.uniq}", 1)
        if to.startswith("leader:"):
            _, topic, part = to.split(":")
            return self.leader(topic, int(part))
        return self.ports[0]

    def run(self, inst: Instance) -> dict[str, Any]:
        """The response to the instance's request, after its setup steps. After a setup
        step that creates or deletes ACLs, wait until every broker sees the change
        (``sync_acls``), unless the step says ``"sync": false``."""
        setup: list[Any] = []
        spec = inst.spec
        try:
            for i, step in enumerate(spec.get("setup", [])):
                version = inst.version if step["version"] == "same" else step["version"]
                resp = self._step(step, inst, setup, step["api"], version)
                if "closed" in resp:
                    return {"setup_failed": i, "closed": resp["closed"]}
                setup.append(resp)
                if step["api"] in (30, 31) and step.get("sync", True) and self.auth is not None:
                    from .secure import sync_acls

                    sync_acls(self, step["api"], substitute(step.get("body", {}), inst, setup, self._ids(),
                                                            make_batch, make_sasl))
                if step.get("sleep_ms"):
                    time.sleep(step["sleep_ms"] / 1000)
            return self._step(spec, inst, setup, inst.api, inst.version)
        finally:
            self.end_instance()

    def _step(self, step: Mapping[str, Any], inst: Instance, setup: list[Any], api: int, version: int
              ) -> dict[str, Any]:
        port = self.route(step.get("to", "any"), inst)
        if "raw_body" in step:
            body: Any = bytes.fromhex(step["raw_body"])
        else:
            try:
                body = substitute(step.get("body", {}), inst, setup, self._ids(), make_batch, make_sasl)
            except (KeyError, IndexError, TypeError) as exc:  # a setup answer without the field
                return {"unresolved": f"{type(exc).__name__}: {exc}"}
        user = self._user(step)
        if step.get("to") == "trial":
            return self._trial(api, version, body, user)
        retry = step.get("retry_on")
        deadline = time.monotonic() + 30
        while True:
            resp = self.call(port, api, version, body, fresh=bool(step.get("fresh")), user=user)
            if not retry or "closed" in resp or time.monotonic() > deadline:
                return resp
            try:
                code = lookup(resp, retry["path"])
            except (KeyError, IndexError, TypeError):
                return resp
            if code not in retry["codes"]:
                return resp
            if retry.get("bump"):  # the answered request moved a session epoch on
                body = {**body, retry["bump"]: body[retry["bump"]] + 1}
            time.sleep(0.2)

    def _trial(self, api: int, version: int, body: Any, user: str | None = None) -> dict[str, Any]:
        """The answer of the broker that coordinates the request's key: each broker in
        turn, the first whose answer has no NOT_COORDINATOR or NOT_LEADER_OR_FOLLOWER
        (share-state APIs, whose coordinator kaas's FindCoordinator versions cannot name)."""
        first: dict[str, Any] | None = None
        for port in self.ports:
            resp = self.call(port, api, version, body, user=user)
            first = first or resp
            if "not_coordinator" not in repr(resp) and "not_leader_or_follower" not in repr(resp):
                return resp
        assert first is not None
        return first

    def _ids(self) -> dict[str, uuid.UUID]:
        return {k: uuid.UUID(v) for k, v in self.topic_ids.items()}
