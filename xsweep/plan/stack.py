"""Training-stack options (:class:`Stack`): defined beside the plan schema, in
:mod:`xsweep.spec.stack`, since a validated plan carries its options typed; the
lowering and the workload read them from here too."""

from xsweep.spec.stack import DEFAULT_STACK, PRECISIONS, RECOMPUTE, ZERO_STAGES, Stack, interned

__all__ = ["DEFAULT_STACK", "PRECISIONS", "RECOMPUTE", "ZERO_STAGES", "Stack", "interned"]
