"""``python scripts/multihost run``: kaas across simulated hosts with real network and
storage partitions (root; ``make multihost``).

Three hosts are network namespaces on a bridge, each with its own bindfs (FUSE) view of
the shared directory; the clients (the EOS harness's copiers, seeder and verifier, and a
probe producer) run in a namespace of their own. No address outside these namespaces is
used. Scenarios, each on a fresh cluster under the exactly-once copy:

  a-brokers-apart          the brokers cannot reach one another, but all reach storage and
                           clients reach all: progress continues (peer links fail over to
                           the files)
  bc-storage-cut-and-heal  (b) the controller's host is frozen off storage (its bindfs
                           stopped, as a hard NFS mount whose server is gone): its
                           partitions move within the lease and it fences itself; (c) the
                           cut heals and it rejoins at higher epochs
  d-clients-cut-off        the clients cannot reach one host: they see errors and retry

Each is judged by the EOS verdicts (0 anomalies) and its own checks; the figures
(takeover time, the probe's longest produce gap during the fault, commits during it) are
printed as one JSON line per scenario. Exit status 0 only when every check held.

The FUSE stand-in is not NFS: it has no close-to-open consistency or attribute cache, no
lookup cache, no silly-rename of removed open files and no ESTALE (docs/deploy.rst).

Modules: ``net`` (namespaces, bridge, packet drops, the per-host storage views), ``run``
(one scenario: the cluster, the fault's timeline, the verdicts).
"""
