"""Operator tools: subcommands of the one ``kaas`` click CLI.

``kaas topics``, ``kaas groups`` and ``kaas txn`` speak the Kafka wire protocol with kio
request classes (``_wire.Cluster`` over ``kaas.client.WireClient``), like kafka-topics,
kafka-consumer-groups and kafka-transactions; ``kaas inspect`` reads a data directory
offline and never writes it, like kafka-dump-log. ``output`` holds the shared table
rendering.

Sits at the ``cli`` layer: may import ``kaas.client``, ``kaas.storage`` (read-only parsing
helpers only), ``kaas.wire.batch``, ``kaas.wire.build.ms`` and ``kaas.domain``; nothing
imports it but ``kaas.cli``.
"""
