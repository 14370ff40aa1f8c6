"""The GPU worker path: shards placed on AWS Batch through ``batch:submitJob`` and WatchGpuJob's
checks until the job ends, on the local stack.

The template's compute environment, job queue and job definition are created by the local stack's
CloudFormation (fanfit's Batch resource providers); a Batch job runs the job definition's command,
``python -m fanfit.jobs.gpu KIND TASK``, as a host process (CPU here, the GPU where one is). The
shard it computes lands in S3 under the same key as a Lambda shard's, so the rest of the pipeline
cannot tell them apart.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration

X_401K = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]
# A small network: the test checks the path and the maths, not the learner's quality.
TORCH_MLP = {"hidden_layer_sizes": [16, 16], "epochs": 5, "batch_size": 256, "lr": 0.01}


@pytest.fixture(scope="module")
def data_401k() -> pd.DataFrame:
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "data" / "sipp1991.dta"
    frame = pd.read_stata(path)[["net_tfa", "e401", *X_401K]].astype(float)
    return frame.sample(n=2000, random_state=0).reset_index(drop=True)


def test_template_creates_the_batch_resources(local_client, fanfit_outputs):
    # GIVEN the deployed template WHEN its Batch resources are described
    batch = local_client.session.client("batch", endpoint_url=local_client.stack.endpoint_url)
    queue = batch.describe_job_queues(jobQueues=[fanfit_outputs["GpuJobQueueArn"]])["jobQueues"]
    definition = batch.describe_job_definitions(
        jobDefinitions=[fanfit_outputs["GpuWorkerJobDefinitionArn"]]
    )["jobDefinitions"]
    # THEN the queue is enabled and the job definition asks for one GPU and runs fanfit's worker
    assert queue and queue[0]["state"] == "ENABLED"
    container = definition[0]["containerProperties"]
    assert {"type": "GPU", "value": "1"} in container["resourceRequirements"]
    assert container["command"][:3] == ["python", "-m", "fanfit.jobs.gpu"]


def test_an_estimate_with_a_torch_learner_runs_its_shards_on_batch_and_equals_doubleml(
    local_client, fanfit_outputs, data_401k
):
    pytest.importorskip("torch")
    pytest.importorskip("doubleml")

    # GIVEN a PLR whose ml_l is a PyTorch MLP (too large for Lambda) and ml_m a logistic regression
    job = local_client.submit_estimate(
        data_401k,
        model="plr",
        y="net_tfa",
        d="e401",
        x=X_401K,
        ml_l=f"TorchMLPRegressor:{json.dumps(TORCH_MLP)}",
        ml_m='LogisticRegression:{"max_iter": 1000}',
        n_folds=3,
        n_rep=1,
        seed=7,
    )
    result = job.result(timeout=600)

    # THEN every ml_l fit ran on the GPU worker (AWS Batch), every Lambda shard holds ml_m fits
    schedule = job.record()["schedule"]["waves"]
    assert sum(w["n_gpu_shards"] for w in schedule) >= 1
    from fanfit import storage
    from fanfit.dml import FitUnit

    stage = local_client.store.get_json(storage.schedule_key(job.job_id, 0))
    for wave in stage["waves"]:
        on = {"lambda": [], "gpu": []}
        for shard in wave["shards"]:
            on[shard["placement"]] += [FitUnit.from_key(key).learner for key in shard["units"]]
        assert set(on["lambda"]) <= {"ml_m"}, wave["shards"]
        # ... and ml_m, which both can run, was split between the Lambda queue and the GPU
        # worker by drift-plus-penalty (Proteus): the wave's decision records the split (the
        # GPU's backlog, its start-up and the Torch fits, makes it all or nearly all Lambda's)
        # and its GPU shard holds the ml_m fits the split gave it
        (split,) = wave["placement"]["dispatch"]
        lam, gpu = split["queues"]
        assert split["stage"] == "ml_m" and lam["units"] + gpu["units"] == split["n_units"]
        assert gpu["backlog_s"] > lam["backlog_s"] and split["V"] >= 0
        assert on["gpu"].count("ml_m") == gpu["units"]
        assert on["lambda"].count("ml_m") <= lam["units"]
    # ... the GPU worker trained a shard's ml_l fits together, as one batched model (issue 32)
    from fanfit.jobs.estimate.data import shard_stats

    batched = []
    for wave in stage["waves"]:
        for shard in (s for s in wave["shards"] if s["placement"] == "gpu"):
            key = storage.preds_key(job.job_id, 0, shard["shard_id"])
            stats = shard_stats(local_client.store.get_arrays(key), key)
            torch_units = [k for k in shard["units"] if FitUnit.from_key(k).learner == "ml_l"]
            if len(torch_units) > 1:
                assert stats.unit_batch == dict.fromkeys(torch_units, len(torch_units))
            batched.append(len(torch_units))
    # 3 folds x 1 repetition, all on the GPU worker, at least two of them in one batch
    assert sum(batched) == 3 and max(batched) > 1
    # ... in the job record too
    assert {d["stage"] for w in schedule for d in w["placement"]["dispatch"]} == {"ml_m"}
    # ... a Batch job ran and succeeded
    batch = local_client.session.client("batch", endpoint_url=local_client.stack.endpoint_url)
    queue = fanfit_outputs["GpuJobQueueArn"]
    done = batch.list_jobs(jobQueue=queue, jobStatus="SUCCEEDED")["jobSummaryList"]
    assert any(j["jobName"] == "fanfit-crossfit" for j in done)
    # ... and the DML maths equal DoubleML's on the same out-of-fold predictions and folds
    obj = job.to_doubleml()
    np.testing.assert_allclose(obj.coef, result.coef, rtol=1e-9)
    np.testing.assert_allclose(obj.se, result.se, rtol=1e-9)


def test_a_hybrid_kmeans_round_with_a_batch_worker_equals_sklearn(local_client):
    from sklearn.cluster import KMeans
    from sklearn.datasets import load_digits

    # GIVEN the digits, two Lambda workers and one GPU worker (AWS Batch) in every round
    X = load_digits().data
    frame = pd.DataFrame(X, columns=[f"p{i}" for i in range(X.shape[1])])
    rng = np.random.default_rng(0)
    init = X[rng.choice(len(X), 10, replace=False)] + rng.normal(0, 0.1, (10, X.shape[1]))
    ref = KMeans(n_clusters=10, init=init, n_init=1, algorithm="lloyd", max_iter=3, tol=0.0).fit(X)

    # WHEN the train job runs LB-BSP rounds across Lambda and Batch
    res = local_client.train(frame, model="kmeans", features=list(frame.columns), n_clusters=10,
                             init=init, workers=3, gpu_workers=1, worker_memory="1769,885",
                             rounds=3, balance="lb-bsp", timeout=600)  # fmt: skip

    # THEN the centroids equal scikit-learn's Lloyd, and the last worker ran on Batch every round
    np.testing.assert_allclose(res.centroids, ref.cluster_centers_, rtol=0, atol=1e-8)
    for record in res.rounds:
        assert record["workers"][2]["resource"] == "gpu:g4dn.xlarge"
        assert sum(w["batch"] for w in record["workers"]) == len(X)
        # ... its step ran in torch (CPU torch: the local GPU worker is a host process), the
        # Lambda workers' in numpy, and each round's rows were split by drift-plus-penalty
        assert record["workers"][2]["device"] == "cpu" and "device" not in record["workers"][0]
        lam, gpu = record["dispatch"]["queues"]
        assert (lam["samples"], gpu["samples"]) == (
            sum(w["batch"] for w in record["workers"][:2]),
            record["workers"][2]["batch"],
        )
