"""``xsweep optimize``: an Optuna study over a sweep's space, asked and told in batches.

``run.run_optimize`` is the entry point; ``study`` holds the study's attributes, its
sampler and the check that a study is this space's, ``trials`` what a trial suggests
and is told, ``best`` the study's answer.
"""
