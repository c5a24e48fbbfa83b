"""``xsweep sweep``: every point of a sweep's grid planned and bounded, the exact funnel
over the bounded ones, and the published dataset, front, plot and plans.

``run.run_sweep`` is the entry point; ``units`` holds the units of work, ``processes``,
``distributed`` and ``dask_worker`` where they run, ``store`` the resumable output
folder, ``results`` the dataset and answer, ``summary`` the summary document, ``plot``
the Pareto plot.
"""
