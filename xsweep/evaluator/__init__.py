"""The batched evaluator: plans in, an xarray Dataset out, through the JAX kernels.

Public: :class:`Evaluator` (owns devices, dtype, compiled kernels) and
:func:`evaluate` (a default instance). Inside, one module per concept: ``shapes``
(sizes and rounded shapes), ``encode`` (padded arrays of the exact level and the
metrics), ``blocks`` (the bound's block layout), ``slots`` (the exact level's slot
sizing), ``derived`` (per-program memo), ``executables`` (jitted sharded calls),
``driver`` (bucketing, chunking, reruns), ``dataset`` (the Dataset).
"""

from xsweep.evaluator.evaluator import Evaluator, default_evaluator, evaluate

__all__ = ["Evaluator", "default_evaluator", "evaluate"]
