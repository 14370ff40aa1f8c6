"""Live jobs register Dorm's completion figures (issue 15, item 3).

GIVEN a moto partition table, throughput table and bucket, WHEN an estimate's Schedule and a train
job's TrainSchedule pass a barrier, THEN each registers its ``remaining_s`` (slot-seconds of work
left) and ``critical_s`` (seconds it needs at least at its whole demand) from what the scheduler
already knows (the throughput history its waves are sized from; the last round's record), none
before anything is measured, re-registers only when a figure moved by more than
:data:`fanfit.jobs.sharing.FIGURE_TOLERANCE` (half; or its demand changed), and two such jobs get
the completion pass of ``dorm_policy`` (the partition table's policy) in the table.
"""

from __future__ import annotations

import numpy as np
import pytest

RATE_L, RATE_M = 40.0, 20.0  # seeded throughput of the two nuisance learners, samples/s
RATE_G = 10.0  # and of the IV-type score's second-stage learner


def _seed_throughput(store, throughput, job: str, rates: dict[str, float]) -> None:
    """Put a throughput entry on lambda-1769 for the signature of each learner role in ``rates``
    (``ml_l``, ``ml_m``, ``ml_g``) among the units of every stage of the job, so that its waves
    are sized, not probed."""
    from fanfit import dml, storage
    from fanfit.jobs.estimate.data import read_plan, unit_signature
    from fanfit.sched.throughput import ThroughputEntry

    plan = read_plan(store, storage.plan_key(job))
    n_features = len(plan.dml.x_cols) + plan.dml.n_treat - 1
    by_role = {
        dml.learner_name(u.learner): unit_signature(plan.dml, u, plan.n_obs, n_features)
        for stage in range(plan.n_stages)
        for u in dml.fit_units(plan.dml, stage)
    }
    throughput.save(
        ThroughputEntry(by_role[role], "lambda-1769", rate, 0.1, 3).to_dict()
        for role, rate in rates.items()
    )


def _start_iv_job(job_storage, parts, put_estimate_spec, job: str) -> None:
    """Prepare stage 0 of a PLR job with the IV-type score (stage 0 fits ml_l and ml_m, stage 1
    ml_g on their residuals; 2 repetitions x 2 folds each) and seed its learners' throughput:
    :data:`RATE_L`, :data:`RATE_M` and :data:`RATE_G` samples/s."""
    from fanfit import storage
    from fanfit.client import build_spec
    from fanfit.jobs.estimate.prepare import prepare_stage

    store, records, throughput = job_storage
    spec, _ = build_spec(
        y="y", d="d", x=["x1", "x2", "x3"], z=None, model="plr", score="IV-type",
        learners={"ml_l": "LinearRegression", "ml_m": "LinearRegression",
                  "ml_g": "LinearRegression"},
        n_folds=2, n_rep=2, seed=3,
    )  # fmt: skip
    key = put_estimate_spec(store, storage.spec_key(job), dml=spec.to_dict())
    prepare_stage(store, records, job, key, 0, partitions=parts)
    _seed_throughput(store, throughput, job, {"ml_l": RATE_L, "ml_m": RATE_M, "ml_g": RATE_G})


def _n_train(store, job: str) -> list[int]:
    """Training rows of each (repetition, fold) of the job's folds (2 folds)."""
    from fanfit import storage
    from fanfit.jobs.estimate.data import cached_folds, read_plan

    folds = cached_folds(store.bucket, read_plan(store, storage.plan_key(job)).folds_key)
    return [int(np.count_nonzero(folds[:, r] != f)) for r in range(folds.shape[1]) for f in (0, 1)]


def test_an_estimate_registers_its_units_left_times_their_predicted_seconds(
    job_storage, make_partitions, put_estimate_spec
):
    from fanfit import storage
    from fanfit.jobs.estimate.crossfit import crossfit_shard
    from fanfit.jobs.estimate.prepare import prepare_stage
    from fanfit.jobs.estimate.schedule import schedule_wave

    store, records, throughput = job_storage
    parts = make_partitions()
    job = "est-fig"
    spec_key = put_estimate_spec(store, storage.spec_key(job), n_rep=2, max_concurrency=4)
    # GIVEN a PLR job of 2 repetitions x 2 folds x 2 learners (8 units) on 400 rows, registered
    # by Prepare without figures, and a throughput history of 40 (ml_l) and 20 (ml_m) samples/s
    prepare_stage(store, records, job, spec_key, 0, partitions=parts)
    assert parts.get(job).get("remaining_s") is None
    _seed_throughput(store, throughput, job, {"ml_l": RATE_L, "ml_m": RATE_M})
    # WHEN Schedule cuts its first wave
    out = schedule_wave(store, records, throughput, job, 0, 0, 1769, 4, partitions=parts)
    assert out.has_wave
    item = parts.get(job)
    # THEN remaining_s = every unit's training rows over its learner's rate: with 2 folds a row
    # trains in exactly one fold of each repetition, so the rows of one learner's units add up to
    # n_rep x n_obs = 800: 800 / 40 + 800 / 20 = 60 s
    assert float(item["remaining_s"]) == pytest.approx(2 * 400 / RATE_L + 2 * 400 / RATE_M)
    # AND critical_s = the stage's longest unit (one stage): the largest fold complement at 20/s
    assert float(item["critical_s"]) == pytest.approx(max(_n_train(store, job)) / RATE_M)
    assert parts.history()[-1]["event"] == "resize"
    # WHEN the wave runs and the next barrier finds nothing left
    for shard in store.get_json(out.shards_key):
        crossfit_shard(store, job, storage.plan_key(job), 0, shard, memory_mb=1769)
    done = schedule_wave(store, records, throughput, job, 0, 1, 1769, 4, partitions=parts)
    # THEN (one stage) it registers no work left
    assert not done.has_wave
    item = parts.get(job)
    assert (float(item["remaining_s"]), float(item["critical_s"])) == (0.0, 0.0)


def test_a_probe_wave_registers_no_figures_so_the_completion_pass_stays_off(
    job_storage, make_partitions, put_estimate_spec
):
    from fanfit import storage
    from fanfit.jobs.estimate.prepare import prepare_stage
    from fanfit.jobs.estimate.schedule import schedule_wave
    from fanfit.jobs.sharing import register_job
    from fanfit.sched.partition import dorm_partitions

    store, records, throughput = job_storage
    parts = make_partitions()
    # GIVEN another job that gave its figures, and an estimate whose learners were never measured
    register_job(parts, "other", "estimate", 4, remaining_s=10.0, critical_s=1.0)
    job = "est-probe"
    spec_key = put_estimate_spec(store, storage.spec_key(job), n_rep=2, max_concurrency=4)
    prepare_stage(store, records, job, spec_key, 0, partitions=parts)
    # WHEN Schedule cuts its first wave (a probe: no unit has predicted seconds)
    out = schedule_wave(store, records, throughput, job, 0, 0, 1769, 4, partitions=parts)
    assert out.has_wave
    # THEN it registers no figures (no guess) and the table holds Dorm's optimizer alone
    assert parts.get(job).get("remaining_s") is None and parts.get(job).get("critical_s") is None
    jobs = parts.jobs()
    demand = np.array([[int(j["demand"]), 0] for j in jobs])
    expected = dorm_partitions(demand, [4, 0]).partitions[:, 0].tolist()
    assert [int(j["partition"]) for j in jobs] == expected


def test_an_estimates_figures_add_the_later_stages_units_and_longest_unit(
    job_storage, make_partitions, put_estimate_spec
):
    from fanfit.jobs.estimate.schedule import schedule_wave

    store, records, throughput = job_storage
    parts = make_partitions()
    # GIVEN a PLR job with the IV-type score: stage 0 fits ml_l and ml_m, stage 1 ml_g on their
    # residuals (2 repetitions x 2 folds each), with 40, 20 and 10 samples/s measured
    job, rate_g = "est-iv", RATE_G
    _start_iv_job(job_storage, parts, put_estimate_spec, job)
    # WHEN stage 0's first barrier registers the job's figures
    schedule_wave(store, records, throughput, job, 0, 0, 1769, 4, partitions=parts)
    item = parts.get(job)
    # THEN remaining_s also counts stage 1's units (the plan knows them): 800 rows each learner,
    # 800 / 40 + 800 / 20 + 800 / 10 = 140 s
    assert float(item["remaining_s"]) == pytest.approx(800 / RATE_L + 800 / RATE_M + 800 / rate_g)
    # AND critical_s chains the stages: stage 0's longest unit (20/s) then stage 1's (10/s)
    longest = max(_n_train(store, job))
    assert float(item["critical_s"]) == pytest.approx(longest / RATE_M + longest / rate_g)


def _train_round(store, records, throughput, parts, job: str, r: int) -> dict:
    """TrainSchedule of round ``r``, then its workers and its reduce, in-process."""
    from fanfit.jobs.train.reduce import reduce_round
    from fanfit.jobs.train.schedule import schedule_round
    from fanfit.jobs.train.shard import train_shard

    planned = schedule_round(store, throughput, job, r, partitions=parts)
    for item in planned["workers"]:
        train_shard(store, job, r, item["worker"], memory_mb=1769)
    return reduce_round(store, records, job, r)


def test_a_train_job_registers_rounds_left_times_its_last_round(
    job_storage, make_partitions, put_train_spec
):
    from fanfit import storage
    from fanfit.jobs.train.data import get_state
    from fanfit.jobs.train.init import init_job
    from fanfit.jobs.train.schedule import schedule_round

    store, records, throughput = job_storage
    parts = make_partitions()
    job = "train-fig"
    spec_key = put_train_spec(store, storage.spec_key(job))
    functions = {1769: "arn:aws:lambda:us-east-1:123456789012:function:large"}
    # GIVEN a K-Means job (4 workers, at most 3 rounds and a final E-step) registered by TrainInit
    init_job(store, records, job, spec_key, functions, partitions=parts)
    # WHEN round 0 runs THEN its barrier registers no figures (nothing measured yet)
    _train_round(store, records, throughput, parts, job, 0)
    assert parts.get(job).get("remaining_s") is None
    assert [h["event"] for h in parts.history()] == ["arrive"]
    # WHEN round 1's barrier reads round 0's record
    state = get_state(store, job, 1)
    assert (state.phase, state.n_iter) == ("train", 1)
    schedule_round(store, throughput, job, 1, partitions=parts)
    record = store.get_json(storage.train_round_key(job, 0))
    round_s = max(w["ended_at"] - w["started_at"] for w in record["workers"])
    # THEN with 3 - 1 Lloyd rounds and the final E-step left (3 rounds) of round_s each:
    # critical_s = 3 x round_s and remaining_s = 3 x round_s x 4 workers
    item = parts.get(job)
    assert float(item["critical_s"]) == pytest.approx(3 * round_s)
    assert float(item["remaining_s"]) == pytest.approx(3 * round_s * 4)
    assert parts.history()[-1]["event"] == "resize" and int(item["demand"]) == 4
    # AND a retried barrier of round 1 (its round plan kept) registers nothing more
    n_history = len(parts.history())
    schedule_round(store, throughput, job, 1, partitions=parts)
    assert len(parts.history()) == n_history


def test_figures_re_register_only_when_they_moved_by_more_than_the_tolerance(make_partitions):
    from fanfit.jobs.sharing import (
        FIGURE_TOLERANCE,
        Partition,
        figures_moved,
        follow_job,
        register_job,
    )

    # GIVEN a job registered with remaining_s 100 and critical_s 10
    held = Partition(4, 0, 4, 1, remaining_s=100.0, critical_s=10.0)
    assert FIGURE_TOLERANCE == 0.5
    # THEN a move of at most half a registered figure is not material, more is
    assert not figures_moved(held, 50.0, 10.0) and not figures_moved(held, 150.0, 5.0)
    assert figures_moved(held, 49.9, 10.0) and figures_moved(held, 100.0, 15.1)
    # AND figures that appear or disappear always are
    assert figures_moved(held, None, None)
    assert figures_moved(Partition(4, 0, 4, 1), 1.0, 1.0)
    assert not figures_moved(Partition(4, 0, 4, 1), None, None)
    # AND a train job of 100 rounds at a steady round re-registers 6 times over its 99
    # measured barriers (rounds left 99, 49, 24, 11, 5, 2: each under half the last), not 99
    registered, lefts = None, []
    for left in range(99, 0, -1):
        current = Partition(4, 0, 4, 1, remaining_s=registered, critical_s=registered)
        if figures_moved(current, float(left), float(left)):
            registered = float(left)
            lefts.append(left)
    assert lefts == [99, 49, 24, 11, 5, 2]

    parts = make_partitions()
    # GIVEN a job registered on the table with figures
    register_job(parts, "a", "train", 2, remaining_s=100.0, critical_s=10.0)
    # WHEN a barrier sends figures within half THEN nothing is written and the old ones stay
    assert follow_job(parts, "a", "train", demand=2, remaining_s=60.0, critical_s=6.0) is not None
    assert len(parts.history()) == 1 and float(parts.get("a")["remaining_s"]) == 100.0
    # WHEN they moved by more THEN the job is re-registered (a resize) with the new ones
    follow_job(parts, "a", "train", demand=2, remaining_s=40.0, critical_s=4.0)
    assert [h["event"] for h in parts.history()] == ["arrive", "resize"]
    assert float(parts.get("a")["remaining_s"]) == 40.0
    # WHEN only the demand changed THEN it is re-registered too
    follow_job(parts, "a", "train", demand=3, remaining_s=40.0, critical_s=4.0)
    assert parts.history()[-1]["event"] == "resize" and int(parts.get("a")["demand"]) == 3
    # AND a job not registered (released, or never) is left alone
    assert follow_job(parts, "gone", "train", demand=2, remaining_s=1.0, critical_s=1.0) is None
    assert parts.get("gone") is None


def test_two_live_estimates_with_figures_get_the_completion_pass(
    job_storage, make_partitions, put_estimate_spec, monkeypatch
):
    from fanfit import storage
    from fanfit.client import build_spec
    from fanfit.jobs import sharing
    from fanfit.jobs.estimate.prepare import prepare_stage
    from fanfit.jobs.estimate.schedule import schedule_wave
    from fanfit.sched.partition import dorm_partitions

    store, records, throughput = job_storage
    parts = make_partitions()
    monkeypatch.setenv("FANFIT_ACCOUNT_CONCURRENCY", "12")
    # GIVEN two estimates of 12 units each (3 repetitions, one unit per shard, cap 12) on 12
    # slots: "fast" fits its learners (LinearRegression) at 4,000 samples/s, "slow" (Lasso) at 2
    slow_spec, _ = build_spec(
        y="y", d="d", x=["x1", "x2", "x3"], z=None, model="plr", score=None,
        learners={"ml_l": "Lasso", "ml_m": "Lasso"}, n_folds=2, n_rep=3, seed=3,
    )  # fmt: skip
    jobs = {"fast": (4000.0, {}), "slow": (2.0, {"dml": slow_spec.to_dict()})}
    for job, (rate, extra) in jobs.items():
        key = put_estimate_spec(store, storage.spec_key(job), n_rep=3, max_concurrency=12,
                                units_per_shard=1, **extra)  # fmt: skip
        prepare_stage(store, records, job, key, 0, partitions=parts)
        _seed_throughput(store, throughput, job, {"ml_l": rate, "ml_m": rate})
    # WHEN both pass their first barrier (each registers its wave's demand and its figures)
    for job in jobs:
        schedule_wave(store, records, throughput, job, 0, 0, 1769, 12, partitions=parts)
    items = {j["job_id"]: j for j in parts.jobs()}
    demand = np.array([[int(items[j]["demand"]), 0] for j in jobs])
    remaining = [float(items[j]["remaining_s"]) for j in jobs]
    critical = [float(items[j]["critical_s"]) for j in jobs]
    assert demand[:, 0].tolist() == [12, 12]
    # THEN the table holds dorm_policy's completion pass. Worked by hand: Dorm's optimizer
    # alone gives 6 and 6; "slow"'s longest unit (about 100 s) exceeds 0.9 x the seconds all the
    # work takes on 12 slots (about 1,200 / 12 = 100 s), so it is on the makespan's critical
    # path and gets the boost; one slot moves to it (F = 2/12 = 0.17 <= 0.24; two would be 0.33)
    optimizer_only = dorm_partitions(demand, [12, 0]).partitions[:, 0].tolist()
    expected = (
        # the policy recompute runs (sharing imports it wherever it is defined)
        sharing.dorm_policy(demand, [12, 0], remaining_s=remaining, critical_s=critical)
        .partitions[:, 0]
        .tolist()
    )
    assert optimizer_only == [6, 6] and expected == [5, 7]
    assert [int(items[j]["partition"]) for j in jobs] == expected


def test_an_estimates_figures_are_computed_only_at_a_barrier_that_sends_them(
    job_storage, make_partitions, put_estimate_spec, monkeypatch
):
    from fanfit import dml, storage
    from fanfit.jobs.estimate import demand
    from fanfit.jobs.estimate import schedule as sched
    from fanfit.jobs.estimate.data import unit_signature
    from fanfit.jobs.estimate.wave import register_wave

    store, records, throughput = job_storage
    parts = make_partitions()
    computed = []
    real = demand.completion_figures
    monkeypatch.setattr(
        demand, "completion_figures", lambda *a, **k: computed.append(a[1]) or real(*a, **k)
    )
    loads = []  # the signatures each read of the throughput table asked for
    real_load = throughput.load
    monkeypatch.setattr(throughput, "load", lambda sigs: loads.append(set(sigs)) or real_load(sigs))
    # GIVEN the IV-type PLR job (stage 1 fits ml_g) with 40, 20 and 10 samples/s measured, whose
    # first barrier registered its demand and figures (computed once, stage 1's history read once)
    job = "est-lazy"
    _start_iv_job(job_storage, parts, put_estimate_spec, job)
    sched.schedule_wave(store, records, throughput, job, 0, 0, 1769, 4, partitions=parts)
    plan = sched.read_plan(store, storage.plan_key(job))
    ctx = sched._stage_context(store, job, 0, plan)
    stage_1 = {
        unit_signature(plan.dml, u, ctx.n_obs, ctx.n_features) for u in dml.fit_units(plan.dml, 1)
    }
    assert len(computed) == 1 and sum(bool(sigs & stage_1) for sigs in loads) == 1
    first = parts.get(job)
    n_history = len(parts.history())
    history = sched.observe(store, throughput, ctx, None)
    n_loads = len(loads)

    def barrier(remaining):
        return register_wave(parts, ctx, remaining, history, memory_sizes=[1769],
                             gpu_enabled=False, account_concurrency=4, throughput=throughput)  # fmt: skip

    # WHEN the next barriers ask for the same demand (the same units left)
    for _ in range(3):
        held = barrier(list(ctx.units))
        assert held is not None and held.demand == int(first["demand"])
    # THEN they neither compute the figures nor read the throughput table for them, and write
    # nothing: the registered figures stay
    assert len(computed) == 1 and len(loads) == n_loads
    assert len(parts.history()) == n_history
    assert (parts.get(job)["remaining_s"], parts.get(job)["critical_s"]) == (
        first["remaining_s"], first["critical_s"],
    )  # fmt: skip
    # WHEN a barrier's demand changes (one unit left: demand 1)
    last = [u for u in ctx.units if u.learner.startswith("ml_m")][:1]
    held = barrier(last)
    # THEN the figures are computed once, for that barrier, and registered with the demand: the
    # unit's rows at 20/s plus stage 1's 800 rows at 10/s (its longest unit after it)
    assert len(computed) == 2 and computed[-1] == last
    assert held is not None and held.demand == 1
    item = parts.get(job)
    rows = max(_n_train(store, job))
    n_unit = int(np.count_nonzero(ctx.folds[:, last[0].i_rep] != last[0].i_fold))
    assert float(item["remaining_s"]) == pytest.approx(n_unit / RATE_M + 800 / RATE_G)
    assert float(item["critical_s"]) == pytest.approx(n_unit / RATE_M + rows / RATE_G)
    assert parts.history()[-1]["event"] == "resize"
