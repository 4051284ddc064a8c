"""The coordinators: the runtime of the pure ``domain`` machines for transactions
(``kaas.coord.txn``) and consumer groups (``kaas.coord.group``).

They see the broker only through ``kaas.coord.ports`` and carry out the machines' effects
on the shared volume (``kaas.storage``). Their background loops live in ``kaas.tasks``;
they offer the one-shot operations those loops call.

May import: ``kaas.domain``, ``kaas.storage``, kio, and the leaf utilities (``kaas.errors``,
``kaas.failpoints``, ``kaas.settings``, ``kaas.aio``). Never ``kaas.broker``, ``kaas.net``,
``kaas.tasks`` or ``kaas.handlers`` (the import-linter layers contract, ``make lint``).
"""
