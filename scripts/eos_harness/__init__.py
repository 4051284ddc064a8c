"""``python scripts/eos_harness run``: the exactly-once harness: seed, copy with transactions,
verify.

    python scripts/eos_harness run --bootstrap 127.0.0.1:9092 --messages 20000 --copiers 3
    python scripts/eos_harness run --start-cluster 3 --messages 5000    # its own cluster
    python scripts/eos_harness run --start-cluster 3 --secure           # kaas cluster --secure
    python scripts/eos_harness run --start-cluster 3 --group-protocol consumer   # KIP-848 copiers
    python scripts/eos_harness run --bootstrap HOST:PORT --secure --command-config admin.properties

1. seeds an input topic with N unique sequenced messages;
2. runs K copier processes: a read_committed group consumer and a transactional producer
   (consume-process-produce with send_offsets_to_transaction, KIP-447), committing every
   M messages and deliberately aborting every A-th transaction (then rewinding);
3. verifies with a read_committed consumer: every input exactly once in the output,
   per-input-partition order kept, nothing of an aborted transaction visible, and the
   group's committed offsets equal to the input end offsets.

Prints progress while it runs, a summary table at the end, and one JSON line with the
figures. Exit status 0 only when every guarantee held. ``KAAS_HARNESS_DEBUG=eos,protocol``
passes librdkafka debug contexts to the copiers' producers.

Copiers may be SIGKILLed and restarted mid-run (``CopierPool.kill``/``restart``, used by
``scripts/chaos``'s continuous scenario): each copier reports through an append-only file of JSON
lines of its own (a kill loses at most a torn last line, which is skipped; an mp.Queue or
Event could be left locked or half-written) and stops when a ``stop`` file appears. The
verifier first waits until no transaction is open on any output partition (the last
stable offset, a read_committed ListOffsets, equals the high watermark): a killed copier's
transaction stays open until its restart fences it or the coordinator aborts it after
``transaction.timeout.ms``, and reading before then would stop at the LSO and report the
records behind it as lost. A transaction still open when that wait gives up is reported as
a violation (every transaction must complete), and the read stops at the LSO.

``--group-protocol consumer`` runs the copiers with librdkafka's ``group.protocol=consumer``
(KIP-848: ConsumerGroupHeartbeat, server-side assignment) instead of the classic protocol
(``cooperative-sticky``). librdkafka refuses the classic-only settings with it
(``session.timeout.ms``, ``heartbeat.interval.ms``, ``partition.assignment.strategy``): the
session timeout and heartbeat interval are the broker's, so ``--start-cluster`` gives its
brokers the copiers' 4 s and 1 s (``group.consumer.session.timeout.ms`` and
``group.consumer.heartbeat.interval.ms`` with lower minimums, ``consumer_broker_args``); on a
cluster of ``--bootstrap`` they are whatever that cluster has (Apache's default is 45 s, so a
killed copier's partitions move later). ``CopierPool.stop``/``restart(idx, protocol)`` stop a
copier as an application is stopped (its transaction ended, its consumer closed) and start
it again with another protocol: ``scripts/chaos``'s rolling upgrade. The verifier and the
harness's monitor read by assignment and join no group, so they keep the default protocol.

``--secure`` runs on a SASL_SSL cluster with the authoriser on (``kaas cluster --secure``
with ``--start-cluster``, else any cluster whose admin's client settings ``--command-config``
gives): the harness, as the admin, creates the topics, then a SCRAM-SHA-512 user per role
(copier, seeding producer, verifier) and the ACLs each role needs and nothing more
(``acl_plan``); the copiers, the seeding producer and the verifier connect as those users
(SASL_SSL, the cluster's CA), never as a super user. Before seeding it checks that the ACLs
read back are exactly the plan and that a few things outside it are refused (the copier
writing the input topic, initialising a transactional id outside its prefix or setting a
SCRAM password; the verifier writing the output topic). At the end, also of a failed or
interrupted run (Ctrl-C, SIGTERM), it removes exactly those users and ACLs again and
nothing else (``revoke_least_privilege``; it refuses to start if any of them exists
already, so whatever it removes it made); ``--keep-users`` leaves them for inspection. The
JSON says what was removed (``security.cleanup``); a removal that failed is a line of
``warnings`` and does not fail the run (``clean_up`` says why).

Modules, by concern (none imports ``cli``; ``cli`` is the only one that knows click commands;
``verify`` knows neither click nor processes):

    config   the run's names (topics, group, transactional ids, users) and each role's
             client settings
    topics   creating the topics, seeding the input
    copier   the copier process, its report file, the pool that starts/kills/restarts them
    verify   reading the output back and checking it with ``kaas.domain.checker``
    acls     --secure: the plan, making and probing the users and ACLs, removing them
    run      one run (``run_harness``), launching a cluster, SIGTERM as Ctrl-C
    cli      the click group and ``run``; ``__main__`` runs it
"""

from .acls import PROBE_EXPECT as PROBE_EXPECT
from .acls import ROLES as ROLES
from .acls import Grants as Grants
from .acls import acl_line as acl_line
from .acls import acl_plan as acl_plan
from .acls import acls_of as acls_of
from .acls import clean_up as clean_up
from .acls import grant_least_privilege as grant_least_privilege
from .acls import revoke_filters as revoke_filters
from .acls import revoke_least_privilege as revoke_least_privilege
from .config import GROUP_PROTOCOLS as GROUP_PROTOCOLS
from .config import HarnessConfig as HarnessConfig
from .config import consumer_broker_args as consumer_broker_args
from .config import group_settings as group_settings
from .config import security as security
from .config import txn_id_prefix as txn_id_prefix
from .config import user_of as user_of
from .copier import CopierPool as CopierPool
from .copier import StatsFile as StatsFile
from .run import admin_settings as admin_settings
from .run import interrupt_on_sigterm as interrupt_on_sigterm
from .run import run_harness as run_harness
from .topics import create_topics as create_topics
from .topics import seed as seed
from .verify import verify as verify
