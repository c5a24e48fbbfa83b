"""Exact max-min fair rates of a set of flows over shared links (progressive filling).

Every round freezes each link whose fair share (remaining capacity over its
unfrozen flows) is no larger than the path share of every unfrozen flow crossing
it; those flows get that share, the link's capacity is used up, and the next
round shares what is left. The link with the smallest share always qualifies, so
each round freezes at least one link, and the result is the unique max-min fair
allocation. Flows in different connected components never interact: a
component's rates do not depend on which other flows are in the call, to the
last bit, because every sum runs over one link's flows in flow order.
"""

from __future__ import annotations

import numpy as np


class LinkIncidence:
    """The flow -> link paths of a program, with per-flow offsets ready for gathers."""

    __slots__ = ("path_ptr", "path_len", "path_links", "capacity")

    def __init__(self, path_ptr: np.ndarray, path_links: np.ndarray, capacity: np.ndarray):
        self.path_ptr = np.asarray(path_ptr, np.int64)
        self.path_len = np.diff(self.path_ptr)
        self.path_links = np.asarray(path_links, np.int64)
        self.capacity = np.asarray(capacity, np.float64)

    def rates(self, flows: np.ndarray) -> np.ndarray:
        """Max-min fair rates (bytes/s) of ``flows`` (distinct flow ids) transferring together."""
        n = flows.shape[0]
        if n == 0:
            return np.zeros(0)
        lens = self.path_len[flows]
        flow_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=flow_ptr[1:])
        num_inc = int(flow_ptr[-1])
        # incidence i belongs to flow owner[i] and crosses link links[i]
        owner = np.repeat(np.arange(n), lens)
        links = self.path_links[np.arange(num_inc) + np.repeat(self.path_ptr[flows] - flow_ptr[:-1], lens)]
        by_link = np.argsort(links, kind="stable")
        sorted_links = links[by_link]
        new_link = np.empty(num_inc, bool)
        new_link[0] = True
        np.not_equal(sorted_links[1:], sorted_links[:-1], out=new_link[1:])
        link_start = np.flatnonzero(new_link)
        local = np.empty(num_inc, np.int64)  # local link index of each incidence
        local[by_link] = np.cumsum(new_link) - 1
        num_links = link_start.shape[0]
        remaining = self.capacity[sorted_links[link_start]].copy()
        unfrozen_count = np.diff(np.append(link_start, num_inc)).astype(np.float64)
        owner_by_link = owner[by_link]
        starts = flow_ptr[:-1]

        rate = np.zeros(n)
        frozen = np.zeros(n, bool)
        while True:
            live = unfrozen_count > 0
            share = np.full(num_links, np.inf)
            np.divide(np.maximum(remaining, 0.0), unfrozen_count, out=share, where=live)
            path_share = np.minimum.reduceat(share[local], starts)
            path_share[frozen] = np.inf
            least_of_flows = np.minimum.reduceat(path_share[owner_by_link], link_start)
            freeze = live & (share <= least_of_flows)
            newly = np.logical_or.reduceat(freeze[local], starts) & ~frozen
            assert newly.any(), "progressive filling made no progress"
            rate[newly] = path_share[newly]
            taken = newly[owner]
            remaining -= np.bincount(local, weights=np.where(taken, rate[owner], 0.0),
                                     minlength=num_links)
            unfrozen_count -= np.bincount(local, weights=taken, minlength=num_links)
            frozen |= newly
            if frozen.all():
                return rate
