"""Sweep-line DP groups, LCM rings and chunking: the paper's appendix B/C examples and invariants."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xsweep.plan.groups import (
    GroupSpan,
    chunk_bytes_per_rank,
    chunks_per_rank,
    dp_groups,
    lcm_of,
    per_rank_bytes,
    sweep_line_segments,
)

MB = 1e6

# Section 4.3 / appendix B: four device groups over a 32-layer model.
APPENDIX_B = (
    GroupSpan(0, 1, 20, (0, 1, 2)),
    GroupSpan(1, 21, 32, (5, 6)),
    GroupSpan(2, 1, 15, (3, 4)),
    GroupSpan(3, 16, 32, (7, 8, 9)),
)


def test_appendix_b_segments():
    assert sweep_line_segments(APPENDIX_B) == [(1, 15), (16, 20), (21, 32)]


def test_appendix_b_dp_groups():
    groups = dp_groups(APPENDIX_B)
    assert [(g.first_layer, g.last_layer) for g in groups] == [(1, 15), (16, 20), (21, 32)]
    assert [g.device_groups for g in groups] == [(0, 2), (0, 3), (1, 3)]
    assert [g.tps for g in groups] == [(3, 2), (3, 3), (2, 3)]
    assert [set(g.ranks) for g in groups] == [{0, 1, 2, 3, 4}, {0, 1, 2, 7, 8, 9},
                                              {5, 6, 7, 8, 9}]
    assert [g.lcm for g in groups] == [6, 3, 6]


def test_appendix_b_rings_follow_interleaved_ownership():
    first = dp_groups(APPENDIX_B)[0]  # layers 1-15: DG0 (TP 3) with DG2 (TP 2)
    assert [r.chunk for r in first.rings] == list(range(6))
    # DG0: chunks {0,3} -> rank 0, {1,4} -> 1, {2,5} -> 2; DG2: {0,2,4} -> 3, {1,3,5} -> 4.
    assert [r.ranks for r in first.rings] == [(0, 3), (1, 4), (2, 3), (0, 4), (1, 3), (2, 4)]


def test_rings_use_the_local_index_not_the_global_rank():
    # DG1's ranks (5, 6) do not start at a multiple of its TP: chunk 0 belongs to
    # rank 5 (local 0), not rank 6 (6 mod 2 == 0); likewise rank 7, not 9, in DG3.
    last = dp_groups(APPENDIX_B)[2]
    assert [r.ranks for r in last.rings] == [(5, 7), (6, 8), (5, 9), (6, 7), (5, 8), (6, 9)]


def test_segment_held_by_one_group_has_no_dp_group():
    spans = (GroupSpan(0, 1, 10, (0, 1)), GroupSpan(1, 1, 6, (2,)), GroupSpan(2, 7, 12, (3,)))
    assert sweep_line_segments(spans) == [(1, 6), (7, 10), (11, 12)]
    groups = dp_groups(spans)
    assert [(g.first_layer, g.last_layer, g.device_groups) for g in groups] == [
        (1, 6, (0, 1)), (7, 10, (0, 2))]


def test_single_pipeline_has_no_dp_group():
    spans = (GroupSpan(0, 1, 16, (0, 1)), GroupSpan(1, 17, 32, (2, 3, 4)))
    assert sweep_line_segments(spans) == [(1, 16), (17, 32)]
    assert dp_groups(spans) == []


def test_appendix_c_chunking():
    d = 60 * MB
    assert per_rank_bytes(d, 3) == pytest.approx(20 * MB)
    assert per_rank_bytes(d, 2) == pytest.approx(30 * MB)
    assert chunks_per_rank((3, 2), 3) == 2
    assert chunks_per_rank((3, 2), 2) == 3
    assert chunk_bytes_per_rank(d, (3, 2)) == pytest.approx(10 * MB)


def test_chunks_per_rank_rejects_a_foreign_tp():
    with pytest.raises(ValueError):
        chunks_per_rank((3, 2), 4)


def test_lcm_bound_of_appendix_e():
    assert lcm_of(range(1, 9)) == 840
    assert lcm_of([8, 7, 5, 3]) == 840
    assert lcm_of([4, 4, 2]) == 4


@st.composite
def replica_spans(draw):
    """2-4 replicas, each a pipeline of 1-4 stages cutting 1..L at random points."""
    num_layers = draw(st.integers(2, 24))
    spans, next_rank = [], 0
    for _ in range(draw(st.integers(2, 4))):
        stages = draw(st.integers(1, min(4, num_layers)))
        cuts = sorted(draw(st.lists(st.integers(2, num_layers), min_size=stages - 1,
                                    max_size=stages - 1, unique=True)))
        for first, stop in zip([1, *cuts], [*cuts, num_layers + 1], strict=True):
            tp = draw(st.integers(1, 8))
            spans.append(GroupSpan(len(spans), first, stop - 1,
                                   tuple(range(next_rank, next_rank + tp))))
            next_rank += tp
    order = draw(st.permutations(range(len(spans))))
    return num_layers, [spans[i] for i in order]


@given(replica_spans())
def test_segments_partition_the_model_and_groups_cover_them(case):
    num_layers, spans = case
    segments = sweep_line_segments(spans)
    assert segments[0][0] == 1 and segments[-1][1] == num_layers
    assert all(a[1] + 1 == b[0] for a, b in zip(segments, segments[1:], strict=False))
    # No span boundary falls inside a segment, and every replica covers every layer,
    # so every segment gets exactly one DP group holding one span per replica.
    for s in spans:
        for first, last in segments:
            assert first <= last
            assert not first < s.first_layer <= last and not first <= s.last_layer < last
    groups = dp_groups(spans)
    assert [(g.first_layer, g.last_layer) for g in groups] == segments
    by_id = {s.id: s for s in spans}
    for g in groups:
        holders = sorted(s.id for s in spans
                         if s.first_layer <= g.first_layer and g.last_layer <= s.last_layer)
        assert list(g.device_groups) == holders
        assert g.tps == tuple(by_id[i].tp for i in holders)
        assert g.ranks == tuple(sorted(r for i in holders for r in by_id[i].ranks))
        assert g.lcm == lcm_of(g.tps)


@given(replica_spans())
def test_every_rank_sits_in_its_share_of_the_rings(case):
    _, spans = case
    for g in dp_groups(spans):
        assert len(g.rings) == g.lcm
        appearances = {r: 0 for r in g.ranks}
        for c, ring in enumerate(g.rings):
            assert ring.chunk == c and len(ring.ranks) == len(g.device_groups)
            for dg, rank in zip(g.device_groups, ring.ranks, strict=True):
                span = next(s for s in spans if s.id == dg)
                assert span.ranks.index(rank) == c % span.tp
                appearances[rank] += 1
        for dg, tp in zip(g.device_groups, g.tps, strict=True):
            span = next(s for s in spans if s.id == dg)
            assert all(appearances[r] == chunks_per_rank(g.tps, tp) for r in span.ranks)
        # Each rank's chunks add up to its TP shard.
        for tp in g.tps:
            assert chunks_per_rank(g.tps, tp) * chunk_bytes_per_rank(1.0, g.tps) == (
                pytest.approx(per_rank_bytes(1.0, tp)))
