"""The Broker object handed to handlers (``core``), the partitions it leads
(``partition``), its view of the cluster (``cluster_view``), topic administration
(``topic_admin``) and the ACLs it enforces (``acls``)."""

from kaas.broker.cluster_view import ClusterView as ClusterView
from kaas.broker.core import Broker as Broker
from kaas.broker.core import BrokerInfo as BrokerInfo
from kaas.broker.core import fs_type as fs_type
from kaas.broker.partition import Partition as Partition
from kaas.broker.partition import ProduceResult as ProduceResult
