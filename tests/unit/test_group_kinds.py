"""The group kinds' records (``kaas.coord.group.kinds``): what every kind answers alike,
readable or not. A kind whose state on file could not be read holds no machine, only why:
it is refused (``entry.refuse_unreadable``), has no timer, counts as a group and is listed;
a readable one answers from its machine."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kaas.coord.group.entry import refuse_unreadable
from kaas.coord.group.kinds import ClassicKind, ConsumerKind, ShareKind
from kaas.domain.groups.classic.group import Group
from kaas.domain.groups.consumer.group import ConsumerGroup
from kaas.domain.groups.share.group import ShareGroup
from kaas.errors import KaasError

KINDS = (ClassicKind, ConsumerKind, ShareKind)


def classic(delay_ms: int = 3_000) -> Group:
    return Group("g", now_ms=0, initial_rebalance_delay_ms=delay_ms)


@given(kind=st.sampled_from(KINDS), reason=st.text(min_size=1))
def test_an_unreadable_kind_is_refused_has_no_timer_counts_and_is_listed(kind, reason):
    k = kind(None, error=reason)
    assert k.unreadable == reason
    with pytest.raises(KaasError) as exc:
        refuse_unreadable(k.unreadable)
    assert exc.value.code == ErrorCode.unknown_server_error and reason in str(exc.value)
    assert k.next_deadline() is None
    assert k.counts_as_group()  # its file exists: a commit to it is not one to no group
    assert k.listing() == ("", "Empty", "classic")


@pytest.mark.parametrize("kind, machine", [(ClassicKind, classic()), (ConsumerKind, ConsumerGroup("g")),
                                           (ShareKind, ShareGroup("g"))])
def test_a_readable_kind_is_served_from_its_machine(kind, machine):
    k = kind(machine)
    assert k.unreadable is None
    refuse_unreadable(k.unreadable)  # nothing raised
    assert k.group is machine and k.next_deadline() == machine.next_deadline()
    assert not hasattr(k, "__dict__")  # slotted, as every record of the seam


def test_a_classic_group_counts_once_it_has_members_and_a_dead_one_is_not_listed():
    g = classic()
    k = ClassicKind(g)
    assert not k.counts_as_group() and k.listing() == ("", "Empty", "classic")
    g.join(0, "", None, "c", "h", 10_000, 10_000, "consumer", [("range", b"")], False, 1)
    assert k.counts_as_group() and k.listing() == ("consumer", "PreparingRebalance", "classic")
    assert k.next_deadline() == g.next_deadline() == 3_000  # the initial rebalance delay
    g.mark_dead(0)
    assert k.listing() is None


@pytest.mark.parametrize("kind, machine", [(ConsumerKind, ConsumerGroup), (ShareKind, ShareGroup)])
def test_a_modern_kind_always_counts_lists_its_type_and_starts_filed(kind, machine):
    k = kind(machine("g"))
    assert k.counts_as_group() and k.listing() == (kind.name, "Empty", kind.name)
    assert not k.dirty and kind(machine("g"), dirty=True).dirty
