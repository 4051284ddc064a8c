"""How a ShareFetch answer batches what it acquired (``kaas.domain.share_batches``):
Apache's cut of first deliveries at log batch boundaries once ``BatchSize`` is reached,
and the joining of acquisitions made in steps for one answer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kaas.domain.share_batches import join_acquired, split_acquired


def test_examples():
    # log batches of 2 from 0; batch size 3: a cut at 4 (4 - 0 >= 3), none at 6 (6 - 4 < 3)
    assert split_acquired([(0, 7, 1)], [0, 2, 4, 6], 3) == [(0, 3, 1), (4, 7, 1)]
    # a log batch is never cut: one of 5 stays whole with a batch size of 2
    assert split_acquired([(8, 13, 1)], [8, 13], 2) == [(8, 12, 1), (13, 13, 1)]
    # no more than the batch size: one range; redeliveries untouched; 0 cuts nothing
    assert split_acquired([(0, 2, 1)], [0, 1, 2], 3) == [(0, 2, 1)]
    assert split_acquired([(0, 9, 2)], [0, 5], 1) == [(0, 9, 2)]
    assert split_acquired([(0, 9, 1)], [0, 5], 0) == [(0, 9, 1)]
    # steps of one answer joined (then cut as one acquisition)
    assert join_acquired([(0, 1, 1)], [(2, 3, 1), (4, 5, 1)]) == [(0, 5, 1)]
    assert join_acquired([(0, 1, 2)], [(2, 3, 1)]) == [(0, 1, 2), (2, 3, 1)]
    assert join_acquired([(0, 1, 1)], [(3, 4, 1)]) == [(0, 1, 1), (3, 4, 1)]  # not contiguous

@st.composite
def acquisitions(draw):
    """Log batches (bases, in order, the first at 0) and one first-delivery range over them."""
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=30))
    bases = [sum(sizes[:i]) for i in range(len(sizes))]
    end = sum(sizes) - 1
    first = draw(st.sampled_from(bases))
    last = draw(st.integers(first, end))
    return bases, (first, last, 1), draw(st.integers(1, 12))


@given(acquisitions())
def test_a_cut_is_apaches(case):
    bases, rng, size = case
    out = split_acquired([rng], bases, size)
    # the same offsets, in order, at the same delivery count
    assert out[0][0] == rng[0] and out[-1][1] == rng[1]
    assert all(a[1] + 1 == b[0] for a, b in zip(out, out[1:], strict=False))
    assert all(c == 1 for _, _, c in out)
    for i, (first, last, _) in enumerate(out):
        assert first == rng[0] or first in bases  # cut only at a log batch's base
        # cut at the first base that reaches the batch size, never before it
        assert all(b - first < size for b in bases if first < b <= last)
        if i < len(out) - 1:
            assert out[i + 1][0] - first >= size


@given(acquisitions(), st.data())
def test_steps_joined_then_cut_are_one_acquisition(case, data):
    """An answer that acquires a range in steps (each ending at a log batch's end) answers
    what one acquisition of the whole would: join, then cut."""
    bases, (first, last, _), size = case
    cuts = sorted(data.draw(st.sets(st.sampled_from([b for b in bases if first < b <= last] or [first]))))
    steps, start = [], first
    for c in cuts:
        if c > start:
            steps.append((start, c - 1, 1))
            start = c
    steps.append((start, last, 1))
    joined: list = []
    for s in steps:
        joined = join_acquired(joined, [s])
    assert split_acquired(joined, bases, size) == split_acquired([(first, last, 1)], bases, size)
