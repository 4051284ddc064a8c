"""The client quotas on a running broker (KIP-546): the last good copy of
``__cluster/client_quotas.json`` (``storage.client_quotas``), polled by ``tasks.features``,
and the effective quota of a (user, client-id) or an address (``domain.client_quotas.
effective``) for the enforcement to come."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas.broker.polled import PolledFile
from kaas.domain import client_quotas
from kaas.domain.client_quotas import Entity
from kaas.errors import KaasError
from kaas.storage.client_quotas import ClientQuotaFile, ClientQuotas

if TYPE_CHECKING:
    from kaas.storage.paths import Layout


class ClientQuotaStore(PolledFile[ClientQuotas]):
    """The client quotas this broker applied."""

    def __init__(self, layout: Layout, *, fsync: bool = True) -> None:
        self.file = ClientQuotaFile(layout.client_quotas, fsync=fsync)
        super().__init__("client_quotas", self.file.signature, self.file.read,
                         lambda q: {"version": q.version, "entities": len(q.entries)})

    def quotas(self) -> ClientQuotas:
        """The last good copy.

        Raises:
            KaasError: KAFKA_STORAGE_ERROR, the file is unreadable now (or was never read).
        """
        if self.error is not None or self.current is None:
            raise KaasError(ErrorCode.kafka_storage_error, f"client quota file unreadable: {self.error}")
        return self.current

    def effective(self, key: str, *, user: str = "", client_id: str = "",
                  ip: str | None = None) -> tuple[float, Entity] | None:
        """``domain.client_quotas.effective`` over the last good copy (None: unlimited, or
        no copy read yet)."""
        if self.current is None:
            return None
        return client_quotas.effective(self.current.entries, key, user=user, client_id=client_id, ip=ip)
