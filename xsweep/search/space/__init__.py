"""A sweep's space: its grid of points (``grid``) and the planner that turns a point into a
deployment plan or the reason it has none (``planner``, which divides layers and
micro-batches with ``apportion``)."""
