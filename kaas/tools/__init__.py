"""Operator tools: subcommands of the one ``kaas`` click CLI.

``kaas topics`` and ``kaas groups`` speak the Kafka wire protocol (``kaas.client.WireClient``),
like kafka-topics and kafka-consumer-groups; ``kaas inspect`` reads a data directory
offline and never writes it, like kafka-dump-log. ``output`` holds the shared table
rendering (also used by ``kaas txn``).

Sits at the ``cli`` layer: may import ``kaas.client``, ``kaas.storage`` (read-only parsing
helpers only), ``kaas.wire.batch`` and ``kaas.domain``; nothing imports it but ``kaas.cli``
and ``kaas.txn_cli``.
"""
