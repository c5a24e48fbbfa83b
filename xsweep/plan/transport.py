"""What NCCL makes of a path: the bytes and the latency a flow carries in the program.

Numbers only: the lowering keeps its tasks and flows, and asks :func:`flow_numbers`
for each flow's bytes and extra latency. Two effects of the link kinds on the path
(:class:`~xsweep.plan.topology.Topology` carries them per link):

* **bus efficiency**: NCCL moves data at a fraction of the line rate (protocol
  headers, flow control). A flow carries ``bytes / efficiency`` at the raw rate, with
  the efficiency of the path's narrowest link, so on an idle path it takes
  ``bytes / (B x efficiency)``.
* **launch latency**: every NCCL operation costs a fixed time; a path takes the
  largest of its links (the network's, when it leaves the node). A collective adds it
  as latency, once per operation: on an idle ring, a TP all-reduce of ``S`` bytes
  over ``k`` ranks then takes ``launch + 2(k-1) hops + 2(k-1)/k x S / (B x eff)``. A
  point-to-point send pays it as an overhead that occupies the path
  (``launch x B`` more bytes), so a rank that sends ``n`` transfers over one link pays
  ``n`` overheads, as ``n`` separate NCCL sends do, and on an idle path one transfer
  takes ``launch + bytes / (B x eff)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xsweep.plan.topology import Topology


def flow_numbers(topology: Topology, path: Sequence[int], nbytes: float, *,
                 launches: float = 0.0, p2p: bool = False) -> tuple[float, float]:
    """The ``(bytes, extra latency in s)`` of a flow of ``nbytes`` payload on ``path``.

    Args:
        launches: NCCL operations whose fixed time the flow waits for before it
            transfers (collectives: the first step of each operation).
        p2p: the flow is one point-to-point send; its fixed time occupies the path.
    """
    links = np.asarray(path, dtype=np.int64)
    capacity = topology.capacity[links]
    narrowest = int(np.argmin(capacity))
    launch_s = float(topology.launch_latency_s[links].max())
    wire_bytes = nbytes / float(topology.bus_efficiency[links][narrowest])
    if p2p:
        wire_bytes += launch_s * float(capacity[narrowest])
    return wire_bytes, launches * launch_s
