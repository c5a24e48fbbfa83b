"""Searching a sweep's space: the three commands that plan and evaluate its points, and what
they share.

One folder per command, each importing only the shared modules here and the space,
never another command's folder:

- ``space``: the grid of a sweep's points and the planner, a point to a plan (``grid``,
  ``planner`` with ``apportion``).
- ``sweep``: ``xsweep sweep``, every point through the exact funnel to a published
  dataset (``run``; its units of work, ``units``; where they run, ``processes``,
  ``distributed`` and ``dask_worker``; the output folder, ``store``; the dataset and
  answer, ``results``; the summary document, ``summary``; the plot, ``plot``).
- ``optimize``: ``xsweep optimize``, an Optuna study over the space (``run``; the study's
  attributes and samplers, ``study``; trials and points, ``trials``; the answer,
  ``best``).
- ``validate``: ``xsweep validate``, winners re-run in the exact simulator (``run``; its
  inputs, ``sweep_result`` and ``study_result``; which points, ``winners``; the
  comparison, ``compare``).

Shared here: ``command`` (the options, outcome and setup of ``sweep`` and ``optimize``),
``evaluation`` (the job, the session a process evaluates in and ``evaluate_points``),
``table`` (the one table of results every step passes on, and its files), ``levels``
(the integer codes of levels and statuses, and their names), ``pareto`` (fronts
and top points), ``funnel`` (the exact funnel), ``report`` (the front table),
``folders`` (where outputs go), ``storage`` (where a study lives) and ``progress``.
"""
