"""Operator tools: subcommands of the one ``kaas`` click CLI.

``kaas topics``, ``configs``, ``groups``, ``share-groups``, ``get-offsets``,
``delete-records``, ``console`` and ``txn`` speak the Kafka wire protocol with kio request
classes (``_wire.Cluster`` over ``kaas.client.WireClient``), like Apache's kafka-topics,
kafka-configs, kafka-consumer-groups, ... (docs/cli.rst); ``kaas inspect`` reads a data
directory offline and never writes it, like kafka-dump-log. ``output`` holds the shared
table rendering; ``_records`` encodes and decodes the console's record batches (the client
side: the broker never decodes records).

Sits at the ``cli`` layer: may import ``kaas.client``, ``kaas.storage`` (read-only parsing
helpers only), ``kaas.wire.batch``, ``kaas.wire.records`` (decompression),
``kaas.wire.build.ms`` and ``kaas.domain``; nothing imports it but ``kaas.cli``.
"""
