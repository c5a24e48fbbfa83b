"""Units of arithmetic for the executors' tests, called as a sweep's units are:
``unit(session, job, *args)``."""

from __future__ import annotations

import os


def product(session, job, k):
    return job * k


def difference(session, job, k):
    return job - k


def quotient(session, job, k):
    return job / k


def whose_session(session, job, k):
    """The process that ran the unit and the session it ran in."""
    return os.getpid(), id(session), type(session).__name__


def jax_loaded(session, job, k):
    """The process that ran the unit and whether JAX is loaded there."""
    import sys

    return os.getpid(), "jax" in sys.modules
