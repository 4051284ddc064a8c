"""Feature levels (KIP-584): the features kaas supports, the levels a new cluster
finalizes, and UpdateFeatures' validation as Apache 4.4's controller decides it.

A *finalized* level is the cluster-wide version of a feature every broker acts on (level 0:
the feature is off, and absent from ApiVersions' FinalizedFeatures). A broker *supports* a
range of levels. kaas supports only features whose behaviour it serves:

=================================  ==========  ======  ===========================================
feature                            supported   new     what a level changes in kaas
=================================  ==========  ======  ===========================================
``metadata.version``               33-33       33      nothing: kaas keeps no KRaft records; the
                                                       level (4.4-IV2) is shown, never changed
``transaction.version``            0-2         2       0 and 1 behave alike (1 is Apache's
                                                       flexible transaction-log format); 2 is
                                                       KIP-890 part 2: clients that see it end
                                                       transactions with EndTxn v5 (an epoch
                                                       bump each) and let the leaders add
                                                       their partitions (Produce v12)
``group.version``                  0-1         1       1: ConsumerGroupHeartbeat/Describe (KIP-848)
``share.version``                  0-1         1       1: the share-group APIs (KIP-932); Apache's
                                                       2 (share-group DLQ) is not served
=================================  ==========  ======  ===========================================

Apache's ``kraft.version``, ``eligible.leader.replicas.version`` and ``streams.version``
are not supported: kaas has no KRaft quorum, no ISR, no streams groups.

Pure: no I/O. ``storage.features`` is the file, ``broker.features`` the broker's copy.

Invariants:
    - ``plan`` refuses a whole request at its first bad update, with Apache's error code
      (INVALID_UPDATE_VERSION) and message; it never returns a level outside the range
      ``SUPPORTED`` gives, nor a finalized level 0 (a feature at 0 leaves the map);
    - ``default_levels()`` is within ``SUPPORTED``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["APACHE_FEATURES", "NEW_CLUSTER", "SUPPORTED", "TRANSACTION_VERSION_MAX", "Refusal", "Update",
           "UpgradeType", "default_levels", "plan"]

METADATA_VERSION = "metadata.version"
TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"
SHARE_VERSION = "share.version"

# The highest transaction.version kaas serves: 2, KIP-890 part 2 (EndTxn v5, the epoch
# bump per transaction); a new cluster finalizes it, as Apache 4.4 does.
TRANSACTION_VERSION_MAX = 2
# Apache 4.4's latest production metadata.version (4.4-IV2), the only one kaas claims.
METADATA_VERSION_LEVEL = 33

SUPPORTED: dict[str, tuple[int, int]] = {
    METADATA_VERSION: (METADATA_VERSION_LEVEL, METADATA_VERSION_LEVEL),
    TRANSACTION_VERSION: (0, TRANSACTION_VERSION_MAX),
    GROUP_VERSION: (0, 1),
    SHARE_VERSION: (0, 1),
}
"""feature -> (min, max) supported level."""

NEW_CLUSTER: dict[str, int] = {
    METADATA_VERSION: METADATA_VERSION_LEVEL,
    TRANSACTION_VERSION: min(2, TRANSACTION_VERSION_MAX),
    GROUP_VERSION: 1,
    SHARE_VERSION: 1,
}
"""The levels a new kaas cluster finalizes. Apache 4.4's new cluster (``kafka-storage format``
defaults, seen in its ApiVersions): metadata.version 33, transaction.version 2,
group.version 1, share.version 2, streams.version 1, eligible.leader.replicas.version 1;
kaas finalizes the same for the features it supports, share.version at its own 1."""

# Every production feature Apache 4.4 knows: disabling one kaas lacks (level 0) is a no-op,
# a name outside this set at level 0 is "not found", as in Apache.
APACHE_FEATURES = frozenset({METADATA_VERSION, TRANSACTION_VERSION, GROUP_VERSION, SHARE_VERSION, "kraft.version",
                             "eligible.leader.replicas.version", "streams.version"})


class UpgradeType:
    """UpdateFeatures' UpgradeType (v1+; v0's requests are upgrades, as Apache reads them)."""

    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True, slots=True)
class Update:
    """One FeatureUpdate of a request."""

    feature: str
    level: int
    upgrade_type: int = UpgradeType.UPGRADE


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is refused: Apache's error (a ``kio`` ErrorCode name) and message."""

    error: str
    message: str


def default_levels() -> dict[str, int]:
    """The finalized levels of a new cluster (features at 0 left out)."""
    return {name: level for name, level in NEW_CLUSTER.items() if level > 0}


def _reason(update: Update, current: int, controller: int) -> str | None:
    """Why one update is invalid (Apache's reason text), or None."""
    name, level = update.feature, update.level
    if update.upgrade_type not in (UpgradeType.UPGRADE, UpgradeType.SAFE_DOWNGRADE, UpgradeType.UNSAFE_DOWNGRADE):
        return "The controller does not support the given upgrade type."
    if level < 0:
        return "A feature version cannot be less than 0."
    supported = SUPPORTED.get(name)
    if supported is None:
        if level == 0:
            return None if name in APACHE_FEATURES else f"Feature {name} not found."
        return f"Local controller {controller} does not support this feature."
    low, high = supported
    if not low <= level <= high:
        return f"Local controller {controller} only supports versions {low}-{high}"
    if level < current and update.upgrade_type == UpgradeType.UPGRADE:
        return "Can't downgrade the version of this feature without setting the upgrade type to either safe or " \
               "unsafe downgrade."
    if level > current and update.upgrade_type != UpgradeType.UPGRADE:
        return "Can't downgrade to a newer version."
    return None


def plan(current: Mapping[str, int], updates: Sequence[Update], controller: int) -> dict[str, int] | Refusal:
    """The finalized levels after ``updates``, or why the request is refused.

    Args:
        current: the finalized levels now (a feature left out is at 0).
        updates: the request's updates, each checked against ``current`` (as Apache checks
            them against the committed levels), applied in the request's order.
        controller: this controller's broker id (Apache names it in some messages).

    Returns:
        the new levels (a feature updated to 0 left out), or the Refusal of the first bad
        update: INVALID_UPDATE_VERSION, as Apache words it.
    """
    levels = dict(current)
    for u in updates:
        why = _reason(u, current.get(u.feature, 0), controller)
        if why is not None:
            return Refusal("invalid_update_version",
                           "The update failed for all features since the following feature had an error: "
                           f"Invalid update version {u.level} for feature {u.feature}. {why}")
        if u.level == 0:
            levels.pop(u.feature, None)
        else:
            levels[u.feature] = u.level
    return levels
