"""``python scripts/chaos run``: chaos scenarios, the EOS harness on a fresh 3-broker kaas cluster while brokers die.

    python scripts/chaos run --scenario all --messages 4000 --seed 7
    python scripts/chaos run --scenario endtxn-failpoints
    python scripts/chaos run --scenario random-kills --secure
    python scripts/chaos run --scenario continuous --group-protocol consumer
    python scripts/chaos run --scenario rolling-upgrade

Scenarios (each reproducible from its seed, printed on failure):
  endtxn-failpoints  SIGKILL (os._exit at a failpoint) the transaction coordinators at each
                     EndTxn step in turn: after_prepare, after_local_markers, after_enqueue,
                     before_complete, twice over
  random-kills       SIGKILL a random broker every few seconds
  pause-coordinator  SIGSTOP the transaction coordinator of a copier past the session
                     timeout, then SIGCONT it
  kill-controller    SIGKILL the controller, twice
  kill-all           SIGKILL every broker at once; the supervisor restarts them all
  disk-full          the cluster's data directory on a tmpfs of its own (root: mount), filled
                     to the last byte by a filler file for a few seconds, then freed, three
                     times: appends, state files, heartbeats and logs all hit ENOSPC
  continuous         for 60 s: a broker SIGKILLed every 4 s in rotation, one copier SIGKILLed
                     and restarted, the transaction coordinator of a copier SIGSTOPped for 6 s
                     once (faults by the clock, from a thread of their own). Progress as well
                     as safety: the copy must complete; the longest stretch without a
                     committed transaction and the copy rate are reported against a fault-free
                     run of the same size (scenario ``none``, run first; --no-baseline skips it)
  rolling-restart    every broker in turn SIGTERMed (a graceful drain, as Kubernetes rolls a
                     StatefulSet), restarted by the supervisor and waited for until it leads
                     again; a probe producer measures the longest produce gap of each restart
                     (``rolling`` in the report; scripts/chaos/rolling.py); the copy is
                     paced to 60 s by default, to outlast the three restarts
  none               no faults (the baseline; not part of ``all``)
  rolling-upgrade    the copiers start on the classic group protocol; under load each in turn
                     is stopped (its transaction ended, its consumer closed) and started again
                     with group.protocol=consumer, 8 s apart: the group converts online. Checks
                     0 anomalies, that the copy completes, that every copier ended on the
                     consumer protocol and that each upgraded copier committed while the group
                     still had classic members (not part of ``all``; needs the
                     classic<->consumer conversion in the coordinator: without it the first
                     consumer-protocol copier is refused with INCONSISTENT_GROUP_PROTOCOL,
                     which librdkafka retries quietly, and copies nothing until the last
                     classic copier has left)
  consumer-churn     issue 42: the copy (20,000 records) with consumer-protocol copiers on a
                     cluster with the default group settings (45 s session, 5 s heartbeat):
                     for 60 s a broker SIGKILLed every 4 s in rotation
                     (KAAS_CHAOS_KILL_EVERY_S), one copier SIGKILLed and restarted as a new
                     member; KAAS_CHAOS_STOP_GROUP_COORDINATOR_S=12 also SIGSTOPs the group
                     coordinator's broker for 12 s. The copy must complete, and no copier go
                     without a commit for longer than the session plus the grace (67.5 s,
                     docs/groups.rst); not part of ``all``

  share              not the EOS copy but KIP-932 share groups (``share``, ``share_clients``,
                     ``share_verdict``): 4 ShareConsumer processes (explicit acknowledgement,
                     every record accepted; odd seeds also release 2%) over a 6-partition
                     topic written by an idempotent producer and 2 transactional ones that
                     abort a quarter of their transactions, the group on
                     share.isolation.level=read_committed (IncrementalAlterConfigs on the
                     GROUP resource); for 60 s (--duration) every 5 s one of: SIGKILL the
                     group's coordinator, SIGKILL a partition leader, pause the volume (every
                     write and fsync of every broker stalls 0.5 s for 4 s), SIGSTOP a leader
                     for 6 s, SIGKILL any broker; once a consumer SIGKILLed and restarted.
                     Then the producers stop, the topic is read back read_committed, the
                     consumers drain it, the share-state files are read, and each record is
                     judged: delivered, accepted (never lost), not accepted twice nor
                     delivered after an accept answered success, delivery counts within the
                     limit, nothing of an aborted transaction delivered. ``--runs N`` runs
                     seeds SEED..SEED+N-1 (report: share-seedN.json; not part of ``all``)
  share-churn        the share scenario's clients and verdict on brokers with the default
                     share session (45 s) and heartbeat: a broker SIGKILLed every 4 s in
                     rotation, one consumer SIGKILLed and restarted; its records come back
                     when their locks end. The verdict also needs no stretch without an
                     accepted record above the session plus the grace (report:
                     share-churn-seedN.json; not part of ``all``)

  apache-eos         not the EOS copy but Apache Kafka's own transactions system test with
                     its tools (TransactionalMessageCopier, VerifiableProducer,
                     VerifiableConsumer from kafka-tools 4.4.0; ``apache_eos``,
                     ``copy_verdict``): 100,000 messages copied by copiers assigned a
                     partition each or in a group, bounced cleanly or hard, while a broker
                     is SIGKILLed every 4 s; --mode, --bounce (default: all four runs)
  streams            a Kafka Streams 4.4 exactly_once_v2 application
                     (compat/streams/EosStreamsApp.java; ``streams``, ``streams_model``):
                     200,000 orders through a repartition, a table join, a windowed and a
                     running aggregate, 2 instances of 2 threads, one SIGKILLed and
                     restarted, a broker SIGKILLed every 4 s; the output read_committed
                     must equal what ``streams_model`` computes from the input
  Both take --target kaas|apache|both (Apache Kafka 4.4 as the control; ``targets``) and
  need java and mvn (``jvm``); ``java_runs`` prints their table.

  mixed-tv           issue 45: transaction.version 1 and 2 clients on one cluster
                     (``mixed_tv``): 2 librdkafka transactional producers (TV1; transactions
                     of 10 records over the 3 partitions of the shared topic, every 5th
                     aborted) and 2 Apache TransactionalMessageCopier JVMs (the Java 4.4
                     client: TV2, Produce adds the partitions, TxnOffsetCommit the offsets,
                     EndTxn v5 bumps the epoch; random aborts) copying a seeded topic into
                     the same partitions, while 2 more TV2 copiers copy the shared topic,
                     read_committed, to an output topic; meanwhile the endtxn-failpoints
                     chaos crashes the coordinator at each EndTxn step, twice over. Then both
                     topics are read back and judged (``mixed_verdict``): every committed TV1
                     transaction whole and once, no aborted one visible, none torn (some
                     records visible, some not), every seeded value once and in order, the
                     output equal to the shared topic partition for partition; the slot
                     files must show the librdkafka ids on version 1 and the Java ids on
                     version 2. Needs java and mvn (the jars of ``compat/java/pom.xml``);
                     JVMs at -Xmx256m; not part of ``all``

  connect            not the EOS copy but Kafka Connect 4.4's exactly-once source support
                     (KIP-618; ``connect``, ``connect_workers``, ``connect_internal``,
                     ``connect_verdict``): 2 distributed workers, a counting source with 2
                     tasks in transactions it defines, a recording sink, the compacted
                     config/offset/status topics; a broker SIGKILLed every 4 s in rotation
                     (each kill once every broker serves again), one worker SIGKILLed and
                     restarted. Every number exactly once read_committed, the sink's group
                     offsets never ahead of what the sink was given, the internal topics
                     read to their end every 5 s (``--target apache|both``: on Apache Kafka
                     4.4 too; report: connect-TARGET-seedN.json; not part of ``all``)

``--group-protocol consumer`` runs the copiers with ``group.protocol=consumer`` (KIP-848) and
starts the brokers with the copiers' 4 s session timeout and 1 s heartbeat interval for
consumer-protocol groups (``eos_harness.consumer_broker_args``). ``make chaos`` runs
random-kills and continuous that way too, and the rolling upgrade.

Each scenario writes a report to --out (default /tmp/kaas-chaos-reports): SCENARIO-seedN.json
(the figures, every fault with its time, every commit's time) and SCENARIO-seedN.svg, a
timeline of committed transactions per second with each fault marked (scripts/timeline.py),
and prints both paths (SCENARIO-secure-seedN.* with --secure). Broker restarts by the
supervisor are marked too (a watcher thread follows the pid files).

``--secure`` runs each scenario on ``kaas cluster --secure`` (SASL_SSL, SCRAM, the
authoriser on): the harness's copiers, seeding producer and verifier run as
least-privilege SCRAM users with exactly the ACLs they need (``eos_harness.acls.acl_plan``), so
the faults also hit the authenticated peer links and the ACL and credential reloads of
restarted brokers. Before the harness runs, a bystander user with ACLs on the same
resources is made (``secure.plant_bystander``); after it, the cluster's users and ACLs are read
back (``cluster_after`` in the report): none of the harness's may be left, and the
bystander's and the super users' must all be there.

Exit status 0 only when exactly-once held in every scenario run (and, for ``continuous``,
the copy completed). The issue-19 targets for ``continuous`` (no stretch without a commit
over 5 s, at least half the fault-free rate) are reported, not enforced.

Modules, by concern (none imports ``cli``; ``cli`` is the only one that knows click commands):

    faults     the faults on a running cluster (SIGKILL a broker, fill/free the volume,
               restarts watched) and their log; where the controller and a coordinator are
    scenarios  ``Chaos``: when each scenario's faults land; ``SCENARIOS``
    rolling    the rolling-restart scenario and its probe producer
    secure     --secure: the bystander before the harness, the cluster read back after
    runner     one scenario on a fresh cluster: scratch volume, cluster, chaos, harness
    report     recovery figures, the JSON report and the SVG timeline
    share      the share scenario: its cluster, clients, faults, read-back and verdict
    share_clients  its client processes (share consumer, producer, transactional producer)
    share_verdict  its per-record verdict (pure)
    targets    the cluster of a Java scenario (kaas or Apache 4.4), the kill rotation
    jvm        the Java processes (classpaths from Maven, capped heaps)
    apache_eos Apache's transactions system test; copy_verdict its verdict (pure)
    streams    the Kafka Streams scenario; streams_model its input, expectation, verdict
    java_runs  the Java scenarios' runs and table
    mixed_tv   the mixed-tv scenario: its cluster, topics, clients, chaos, read-back
    mixed_clients  its librdkafka TV1 producers and Java TV2 copiers
    mixed_verdict  its verdict (pure): TV1 transactions whole, the seed once, the kill tally
    connect    the connect scenario: its run, readers, faults and report
    connect_workers   its Connect workers (classpath, settings, processes, REST)
    connect_internal  its reads of the workers' compacted internal topics
    connect_verdict   its verdicts (pure)
    cli        the click group and ``run``; ``__main__`` runs it
"""
