"""Resharding schemes: the paper's Figure 2 example, closed forms and conservation by replay."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xsweep.plan.reshard import (
    Scheme,
    Transfer,
    alpacomm_units,
    hetauto_virtual_groups,
    layout,
    reshard,
)

SRC6 = (10, 11, 12, 13, 14, 15)
DST4 = (20, 21, 22, 23)


def _covered(intervals):
    """Sorted, merged union of intervals; raises if any two overlap."""
    merged = []
    for lo, hi in sorted(intervals):
        assert lo < hi
        assert not merged or merged[-1][1] <= lo, f"overlap at {lo}"
        if merged and merged[-1][1] == lo:
            merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return merged


def _inside(piece, union):
    return any(lo <= piece[0] and piece[1] <= hi for lo, hi in union)


def _replay(scheme, src, dst, total):
    """Run the phases in order and check conservation; return the transfers."""
    transfers = reshard(scheme, src, dst, total)
    src_layout = layout(scheme, len(src), total, peer_tp=len(dst))
    dst_layout = layout(scheme, len(dst), total, peer_tp=len(src))
    held = {r: list(src_layout[i]) for i, r in enumerate(src)} | {r: [] for r in dst}
    forwarded = defaultdict(list)
    phases = sorted({t.phase for t in transfers})
    assert phases == list(range(len(phases)))
    for phase in phases:
        arriving = defaultdict(list)
        for t in (t for t in transfers if t.phase == phase):
            assert t.src != t.dst and t.bytes > 0 and t.pieces
            assert t.bytes == pytest.approx(sum(hi - lo for lo, hi in t.pieces))
            sender = _covered(held[t.src])
            assert all(_inside(p, sender) for p in t.pieces), "sends data it does not hold"
            arriving[t.dst] += t.pieces
            forwarded[t.src] += t.pieces
        for rank, pieces in arriving.items():
            held[rank] += pieces
            _covered(held[rank])  # a byte delivered twice to one rank would overlap
    for i, rank in enumerate(dst):
        holding = _covered(held[rank])
        wanted = _covered(dst_layout[i])
        assert all(_inside(p, holding) for p in wanted), f"rank {rank} misses data"
        # Anything beyond its own shard was only relayed through it.
        relay = _covered(forwarded[rank])
        for lo, hi in holding:
            assert all(_inside(p, wanted) or _inside(p, relay)
                       for p in _split(lo, hi, wanted + relay)), f"rank {rank} keeps extra data"
    return transfers


def _split(lo, hi, intervals):
    """Cut [lo, hi] at every endpoint of ``intervals`` that falls inside it."""
    cuts = sorted({lo, hi} | {x for a, b in intervals for x in (a, b) if lo < x < hi})
    return list(zip(cuts, cuts[1:], strict=False))


def _cross(transfers, src, dst):
    return [t for t in transfers if t.src in src and t.dst in dst]


def test_alpacomm_figure_2_units():
    assert alpacomm_units(6, 4, 12) == [2, 1, 1, 2, 2, 1, 1, 2]


def test_alpacomm_figure_2_transfers():
    transfers = _replay(Scheme.ALPACOMM, SRC6, DST4, 12.0)
    assert [(t.src, t.dst, t.bytes, t.pieces) for t in transfers] == [
        (10, 20, 2, ((0, 2),)), (11, 20, 1, ((2, 3),)), (11, 21, 1, ((3, 4),)),
        (12, 21, 2, ((4, 6),)), (13, 22, 2, ((6, 8),)), (14, 22, 1, ((8, 9),)),
        (14, 23, 1, ((9, 10),)), (15, 23, 2, ((10, 12),))]
    assert {t.phase for t in transfers} == {0}


def test_hetauto_figure_2_three_phases():
    assert hetauto_virtual_groups(6, 4) == 2
    transfers = _replay(Scheme.HETAUTO, SRC6, DST4, 12.0)
    by_phase = [[(t.src, t.dst, t.bytes) for t in transfers if t.phase == p] for p in range(3)]
    assert by_phase == [
        [(11, 10, 2), (12, 10, 2), (14, 13, 2), (15, 13, 2)],  # gather to leaders 10 and 13
        [(10, 20, 6), (13, 22, 6)],  # leader to leader, total / gcd
        [(20, 21, 3), (22, 23, 3)],  # scatter from leaders 20 and 22
    ]
    assert max(t.phase for t in transfers) == 2


def test_lcm_figure_2_case_is_balanced():
    transfers = _replay(Scheme.LCM, SRC6, DST4, 12.0)
    assert len(transfers) == 12 and all(t.bytes == 1 for t in transfers)
    assert Counter(t.src for t in transfers) == {r: 2 for r in SRC6}
    assert Counter(t.dst for t in transfers) == {r: 3 for r in DST4}
    # Interleaved: chunk c goes from source local c mod 6 to destination local c mod 4.
    assert [(t.src, t.dst, t.pieces) for t in transfers][:5] == [
        (10, 20, ((0, 1),)), (11, 21, ((1, 2),)), (12, 22, ((2, 3),)), (13, 23, ((3, 4),)),
        (14, 20, ((4, 5),))]


def test_lcm_layout_is_interleaved_and_others_contiguous():
    assert layout(Scheme.LCM, 2, 6.0, peer_tp=3) == [[(0, 1), (2, 3), (4, 5)],
                                                      [(1, 2), (3, 4), (5, 6)]]
    assert layout("lcm", 1, 6.0, peer_tp=3) == [[(0, 6)]]
    assert layout(Scheme.LCM, 3, 6.0) == [[(0, 2)], [(2, 4)], [(4, 6)]]
    for scheme in (Scheme.HETAUTO, Scheme.ALPACOMM):
        assert layout(scheme, 2, 6.0, peer_tp=3) == [[(0, 3)], [(3, 6)]]


@pytest.mark.parametrize("scheme", list(Scheme))
def test_equal_tp_is_a_direct_copy(scheme):
    transfers = reshard(scheme, (0, 1, 2), (3, 4, 5), 30.0)
    assert [(t.src, t.dst, t.bytes, t.phase, t.pieces) for t in transfers] == [
        (0, 3, 10, 0, ((0, 10),)), (1, 4, 10, 0, ((10, 20),)), (2, 5, 10, 0, ((20, 30),))]


def test_hetauto_drops_empty_phases():
    # 2 -> 4: gcd 2, source groups of one rank (no gather), so P2P is phase 0.
    transfers = _replay(Scheme.HETAUTO, (0, 1), (2, 3, 4, 5), 8.0)
    assert [(t.src, t.dst, t.bytes, t.phase) for t in transfers] == [
        (0, 2, 4, 0), (1, 4, 4, 0), (2, 3, 2, 1), (4, 5, 2, 1)]


@pytest.mark.parametrize("scheme", list(Scheme))
def test_zero_bytes_and_bad_ranks(scheme):
    assert reshard(scheme, (0,), (1,), 0.0) == []
    for src, dst in [((0, 1), (1, 2)), ((), (1,)), ((0, 0), (1,))]:
        with pytest.raises(ValueError):
            reshard(scheme, src, dst, 1.0)
    with pytest.raises(ValueError):
        reshard(scheme, (0,), (1,), -1.0)


def test_transfer_requires_pieces():
    with pytest.raises(TypeError):
        Transfer(src=0, dst=1, bytes=1.0, phase=0)  # type: ignore[call-arg]


tps = st.integers(1, 8)
sizes = st.one_of(st.integers(1, 10**10).map(float), st.floats(1e-3, 1e12))


@given(st.sampled_from(list(Scheme)), tps, tps, sizes)
def test_conservation_by_replay(scheme, t_s, t_d, total):
    src = tuple(range(t_s))
    dst = tuple(range(100, 100 + t_d))
    transfers = _replay(scheme, src, dst, total)
    crossing = _cross(transfers, src, dst)
    # Nothing stays put (the stages share no GPU): exactly the tensor crosses, in one phase.
    assert len({t.phase for t in crossing}) == 1
    assert sum(t.bytes for t in crossing) == pytest.approx(total, rel=1e-9)
    assert all(t.src in src + dst and t.dst in src + dst for t in transfers)


@given(tps, tps, sizes)
def test_lcm_closed_forms(t_s, t_d, total):
    transfers = reshard(Scheme.LCM, tuple(range(t_s)), tuple(range(8, 8 + t_d)), total)
    chunks = math.lcm(t_s, t_d)
    assert len(transfers) == chunks  # one per chunk: every (src, dst) pair at most once
    assert len({(t.src, t.dst) for t in transfers}) == chunks
    assert all(t.bytes == pytest.approx(total / chunks) for t in transfers)
    assert set(Counter(t.src for t in transfers).values()) == {chunks // t_s}
    assert set(Counter(t.dst for t in transfers).values()) == {chunks // t_d}


@given(tps, tps, sizes)
def test_hetauto_closed_forms(t_s, t_d, total):
    g = hetauto_virtual_groups(t_s, t_d)
    transfers = reshard(Scheme.HETAUTO, tuple(range(t_s)), tuple(range(8, 8 + t_d)), total)
    gather, scatter = t_s > g, t_d > g
    assert max(t.phase for t in transfers) + 1 == 1 + gather + scatter
    p2p = [t for t in transfers if t.phase == int(gather)]
    assert len(p2p) == g and all(t.bytes == pytest.approx(total / g) for t in p2p)
    assert len(transfers) == (t_s - g) + g + (t_d - g)


@given(tps, tps, sizes)
def test_alpacomm_closed_forms(t_s, t_d, total):
    units = alpacomm_units(t_s, t_d, total)
    assert len(units) == t_s + t_d - math.gcd(t_s, t_d)  # shared cuts are the multiples of 1/g
    assert sum(units) == pytest.approx(total, rel=1e-9)
    transfers = reshard(Scheme.ALPACOMM, tuple(range(t_s)), tuple(range(8, 8 + t_d)), total)
    assert [t.bytes for t in transfers] == units
