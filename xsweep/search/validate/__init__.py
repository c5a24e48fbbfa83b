"""``xsweep validate``: the winners of a sweep or study re-run in the exact simulator and
compared with their batched results.

``run.validate`` is the entry point; ``sweep_result`` and ``study_result`` open its
inputs (a sweep's output folder, a study written by ``xsweep optimize``), ``winners``
picks the points to re-run, ``compare`` judges each against the simulator.
"""
