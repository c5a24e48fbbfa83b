"""Host arrays that a CPU device takes as they are, without a copy.

``jax.device_put`` of a numpy array onto a CPU device shares the array's memory when
its address is a multiple of 64 bytes, and copies it otherwise; numpy's own large
arrays start 16 bytes into their pages, so every kernel call copied its inputs
(measured: 2-6 ms for 16 MB, against 0.08 ms shared). The encoders build their
batches with :func:`host_full`; an accelerator copies them either way. A shared array
must not change while a kernel may read it: the encoders make new ones per call.
"""

from __future__ import annotations

import numpy as np

#: Bytes the start of an array must be a multiple of for a CPU device to share it.
ALIGN = 64


def host_full(shape: tuple[int, ...], fill, dtype) -> np.ndarray:
    """``np.full(shape, fill, dtype)`` starting at a multiple of ``ALIGN`` bytes.

    Zeros come from freshly mapped pages, as ``np.zeros``' do: pages the caller never
    writes cost nothing until read.
    """
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.zeros(size + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    out = raw[start: start + size].view(dtype).reshape(shape)
    if fill:
        out.fill(fill)
    return out
