"""One module per Kafka API, each serving the kio request classes of its versions.

``handlers.context`` defines what a handler is given (``Context``) and returns
(``Answer``); ``handlers.registry`` lists the modules and is the one source of truth for
dispatch and ApiVersions. This package imports nothing, so importing any handler never
loads the registry, and the import graph has no cycle (``make lint``).
"""
