"""The GPU worker's path for Torch learners (issue 32): Schedule sends a wave's TorchMLP units to
one GPU shard, the worker (fanfit.jobs.gpu) fits them as one batched model, and the next barrier
records the batch's throughput, with the batch size, in the ThroughputTable."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

NET = {
    "hidden_layer_sizes": [8],
    "epochs": 3,
    "batch_size": 64,
    "dtype": "float64",
    "device": "cpu",
}


@pytest.fixture
def torch_job(job_storage, make_plr_frame, monkeypatch):
    """A PLR estimate with TorchMLP learners (3 folds x 2 repetitions x 2 learners), prepared."""
    from fanfit import storage
    from fanfit.client import build_spec
    from fanfit.client.data import to_matrix
    from fanfit.jobs.estimate.prepare import prepare_stage

    monkeypatch.setenv("FANFIT_GPU_INSTANCE_TYPE", "g4dn.xlarge")
    store, records, _ = job_storage
    learner = {"name": "TorchMLPRegressor", "params": NET}
    spec, columns = build_spec(
        y="y", d="d", x=["x1", "x2", "x3"], z=None, model="plr", score=None,
        learners={"ml_l": learner, "ml_m": learner}, n_folds=3, n_rep=2, seed=3,
    )  # fmt: skip
    names, values = to_matrix(make_plr_frame(), columns)
    job = "est-torch"
    spec_key = store.put_json(
        storage.spec_key(job),
        {"kind": "estimate", "dml": spec.to_dict(), "data_key": store.put_data(names, values),
         "folds_key": None, "max_concurrency": 4, "units_per_shard": None},
    )  # fmt: skip
    prepare_stage(store, records, job, spec_key, 0)
    return job


def test_a_waves_torch_units_run_batched_on_the_gpu_worker_and_their_batch_rate_is_recorded(
    job_storage, torch_job
) -> None:
    from fanfit import dml, storage
    from fanfit.jobs import gpu
    from fanfit.jobs.estimate.data import cached_folds, load, read_plan, unit_signature
    from fanfit.jobs.estimate.schedule import schedule_wave
    from fanfit.sched.throughput import ThroughputEntry

    store, records, throughput = job_storage
    job = torch_job
    # WHEN Schedule cuts stage 0's first wave on a stack with the GPU worker
    out = schedule_wave(store, records, throughput, job, 0, 0, 1769, 4, gpu_enabled=True)
    shards = store.get_json(out.shards_key)
    # THEN all twelve Torch units go to one GPU shard
    assert [(s["placement"], len(s["units"])) for s in shards] == [("gpu", 12)]
    # WHEN the GPU worker runs it (the Batch job's command: python -m fanfit.jobs.gpu crossfit TASK)
    task = {"job_id": job, "plan_key": storage.plan_key(job), "stage": 0, "shard": shards[0]}
    result = gpu.run_task("crossfit", task, store=store)
    # THEN each learner's six fits trained as one batch, each unit's seconds its share of it
    assert len(result["unit_fit_s"]) == 12
    assert result["unit_batch"] == {key: 6 for key in result["unit_fit_s"]}
    assert result["resource"] == "gpu:g4dn.xlarge"
    # AND the predictions are each unit's solo fit's
    plan = read_plan(store, storage.plan_key(job))
    data, folds = load(store, plan)
    arrays = store.get_arrays(result["preds_key"])
    for key in result["unit_fit_s"]:
        unit = dml.FitUnit.from_key(key)
        solo = dml.fit_predict(plan.dml, unit, data, folds)
        np.testing.assert_allclose(arrays[key], solo, rtol=1e-9, atol=0)
    # WHEN the next barrier observes the wave
    schedule_wave(store, records, throughput, job, 0, 1, 1769, 4, gpu_enabled=True)
    # THEN the throughput table holds the GPU worker's rate per batch of six fits: the batch's
    # training rows over the batch's seconds
    folds = cached_folds(store.bucket, plan.folds_key)
    n_features = len(plan.dml.x_cols)
    for learner in ("ml_l", "ml_m"):
        units = [u for u in dml.fit_units(plan.dml, 0) if u.learner == learner]
        signature = unit_signature(plan.dml, units[0], plan.n_obs, n_features)
        (item,) = throughput.load([signature])
        entry = ThroughputEntry.from_dict(item)
        assert entry.resource == "gpu:g4dn.xlarge" and entry.fits_per_batch == 6.0
        rows = sum(int(np.count_nonzero(folds[:, u.i_rep] != u.i_fold)) for u in units)
        seconds = sum(result["unit_fit_s"][u.key] for u in units)
        assert entry.samples_per_s == pytest.approx(rows / seconds)
