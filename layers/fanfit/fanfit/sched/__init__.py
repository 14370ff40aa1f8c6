"""Scheduling, in pure numpy: throughput history, shard sizing, LB-BSP batches, DS-Sync groups.

- :mod:`~fanfit.sched.throughput`: what a shard reports, and a predictor of samples/s (EWMA).
- :mod:`~fanfit.sched.sizing`: units per invocation and Map concurrency for estimate stages.
- :mod:`~fanfit.sched.shards`: dealing units into shards.
- :mod:`~fanfit.sched.lbbsp`: per-worker batches proportional to throughput (Chen et al. 2021).
- :mod:`~fanfit.sched.dssync`: shuffled synchronisation groups (Wang et al. 2020).
- :mod:`~fanfit.sched.placement`: cost-optimal stage placement on Lambda or Batch GPU (HeterPS, Liu et al. 2023).
- :mod:`~fanfit.sched.lyapunov`: drift-plus-penalty dispatch of shards to CPU/GPU queues (Proteus, Xiang et al.).
"""

from fanfit.sched.dssync import dssync_groups
from fanfit.sched.lbbsp import idle_fraction, lbbsp_batches, round_times, uniform_batches
from fanfit.sched.lyapunov import LyapunovDispatcher, QueueSpec, simulate
from fanfit.sched.placement import (
    Placement,
    ResourceProfile,
    StageChoice,
    StageProfile,
    compare_placements,
    solve_placement,
)
from fanfit.sched.shards import DEFAULT_ACCOUNT_CONCURRENCY, deal, n_shards_for
from fanfit.sched.sizing import POLICIES, ShardingDecision, plan_shards, split_units
from fanfit.sched.throughput import (
    DEFAULT_ALPHA,
    EwmaThroughput,
    ShardObservation,
    ThroughputEntry,
    ThroughputPredictor,
    lambda_resource,
    lambda_vcpus,
    resource_memory_mb,
    scale_throughput,
    workload_signature,
)

__all__ = [
    "DEFAULT_ACCOUNT_CONCURRENCY",
    "DEFAULT_ALPHA",
    "POLICIES",
    "EwmaThroughput",
    "LyapunovDispatcher",
    "Placement",
    "QueueSpec",
    "ResourceProfile",
    "ShardObservation",
    "ShardingDecision",
    "StageChoice",
    "StageProfile",
    "ThroughputEntry",
    "ThroughputPredictor",
    "compare_placements",
    "deal",
    "dssync_groups",
    "idle_fraction",
    "lambda_resource",
    "lambda_vcpus",
    "lbbsp_batches",
    "n_shards_for",
    "plan_shards",
    "resource_memory_mb",
    "round_times",
    "scale_throughput",
    "simulate",
    "solve_placement",
    "split_units",
    "uniform_batches",
    "workload_signature",
]
