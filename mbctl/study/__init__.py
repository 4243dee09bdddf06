"""Parameter studies: a study file's runs on Dask, streamed to a Parquet table (``mbctl sweep``).

The layer above identification (it runs every workflow) and below the command line:
:mod:`mbctl.study.design` (the runs and their robots), :mod:`mbctl.study.workflows` (what a
run computes), :mod:`mbctl.study.engine` (checks, batches, parts, resume),
:mod:`mbctl.study.cluster` (the Dask client and task map), :mod:`mbctl.study.summary`
(percentiles and torque bands).
"""
