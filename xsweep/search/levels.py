"""The levels of a search's results: how far each point went, cheapest first.

A point's ``level`` (a column of every table, a variable of the sweep's dataset) is one of
:data:`LEVELS`: ``none`` (no plan: infeasible before any evaluation), ``closed_form``
(planned, and bounded by arithmetic on its plan, :mod:`xsweep.search.closed_form`),
``bound`` (lowered and evaluated by the batched bound level) or ``exact`` (evaluated by
the batched exact level). Each level's iteration time is a lower bound on the next's.
"""

from __future__ import annotations

NONE = "none"
CLOSED_FORM = "closed_form"
BOUND = "bound"
EXACT = "exact"
#: Every level, in the order a point goes through them.
LEVELS = (NONE, CLOSED_FORM, BOUND, EXACT)
