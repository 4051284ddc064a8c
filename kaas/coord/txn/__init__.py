"""The transaction coordinator (``TxnCoordinator``, ``broker.txn``), one module per concern:

* ``coordinator``: the request API (InitProducerId, AddPartitions/AddOffsets, EndTxn,
  Describe/ListTransactions) and the sweep (timeout reaper + marker reconcile);
* ``slots``: the slot files, their in-memory copies and the locks;
* ``finish``: EndTxn's second phase, in the background after an early answer;
* ``dispatch``: a prepared transaction's markers and offset hook, local, over the peer
  links, or queued;
* ``markers``: markers on led partitions (the leader's side of WriteTxnMarkers) and the
  offset hook of a group coordinated here;
* ``marker_queue``: applying this broker's marker queue;
* ``fencing``: the fence logs; ``verify``: KIP-890 produce verification.

Its loops (marker watcher, queue doorbell, fence watcher, sweeps) are in ``kaas.tasks.txn``.
"""

from kaas.coord.txn.coordinator import TxnCoordinator as TxnCoordinator
from kaas.coord.txn.markers import GROUP_HOOK_PREFIX as GROUP_HOOK_PREFIX

__all__ = ["GROUP_HOOK_PREFIX", "TxnCoordinator"]
