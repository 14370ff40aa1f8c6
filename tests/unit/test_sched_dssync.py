"""DS-Sync groups (Wang et al. 2020): a partition of the workers, reshuffled per round, reproducible."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanfit.errors import InvalidJobError
from fanfit.sched.dssync import dssync_groups


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=200),
    g=st.integers(min_value=1, max_value=50),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    r=st.integers(min_value=0, max_value=10_000),
)
def test_groups_partition_the_workers_deterministically(n, g, seed, r) -> None:
    # WHEN a round's groups are drawn
    groups = dssync_groups(n, g, seed, r)
    # THEN every worker is in exactly one group, no group exceeds G, sizes differ by at most one
    assert sorted(i for grp in groups for i in grp) == list(range(n))
    sizes = [len(grp) for grp in groups]
    assert len(groups) == math.ceil(n / g) and max(sizes) <= g and max(sizes) - min(sizes) <= 1
    # AND the same (seed, round) gives the same groups
    assert dssync_groups(n, g, seed, r) == groups


def test_groups_are_reshuffled_every_round_and_pinned() -> None:
    # GIVEN 8 workers in pairs over 20 rounds
    rounds = [dssync_groups(8, 2, 42, r) for r in range(20)]
    # THEN the rounds differ, so over the rounds every worker meets many others
    assert len({str(g) for g in rounds}) > 15
    partners = {i: set() for i in range(8)}
    for groups in rounds:
        for a, b in groups:
            partners[a].add(b)
            partners[b].add(a)
    assert all(len(p) >= 5 for p in partners.values())
    # AND the draw is pinned to SeedSequence(seed, spawn_key=(2, round)) and numpy's permutation
    perm = np.random.default_rng(np.random.SeedSequence(42, spawn_key=(2, 0))).permutation(8)
    assert rounds[0] == sorted(sorted(int(i) for i in perm[k : k + 2]) for k in range(0, 8, 2))
    # AND another seed gives other groups
    assert [dssync_groups(8, 2, 43, r) for r in range(20)] != rounds


def test_remainders_are_spread_and_large_groups_are_bsp() -> None:
    # THEN 7 workers in groups of 3 give sizes 3, 2, 2; G >= N gives one group
    assert sorted(len(g) for g in dssync_groups(7, 3, 0, 0)) == [2, 2, 3]
    assert dssync_groups(5, 8, 0, 3) == [[0, 1, 2, 3, 4]]
    with pytest.raises(InvalidJobError):
        dssync_groups(4, 0, 0, 0)
    with pytest.raises(InvalidJobError):
        dssync_groups(4, 2, -1, 0)
