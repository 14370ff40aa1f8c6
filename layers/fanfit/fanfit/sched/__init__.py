"""Scheduling, in pure numpy: throughput history, shard sizing, LB-BSP batches, DS-Sync groups.

- :mod:`~fanfit.sched.throughput`: what a shard reports, and a predictor of samples/s (EWMA).
- :mod:`~fanfit.sched.sizing`: units per invocation and Map concurrency for estimate stages.
- :mod:`~fanfit.sched.shards`: dealing units into shards.
- :mod:`~fanfit.sched.lbbsp`: per-worker batches with equal predicted round times (Chen et al. 2020).
- :mod:`~fanfit.sched.dssync`: shuffled synchronisation groups (Wang et al. 2020).
- :mod:`~fanfit.sched.resources`: resource names (``lambda-<MB>``, ``gpu:<instance type>``).
- :mod:`~fanfit.sched.placement`: cost-optimal stage placement on Lambda or the GPU worker (HeterPS, Liu et al. 2023).
- :mod:`~fanfit.sched.profiles`: a wave's stage profiles from the throughput table, and the objective (run-time placement).
- :mod:`~fanfit.sched.lyapunov`: drift-plus-penalty dispatch of shards to CPU/GPU queues (Proteus, Xiang et al.).
"""
