"""The train models' interface (fanfit.train.model / models), the train job documents
(fanfit.jobs.documents.train) and the train handlers' idempotency keys.

GIVEN a model name, a malformed document or a handler WHEN it is looked up, parsed or read THEN a
named error naming what is wrong, and each handler keys its idempotency on its event model's key.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fanfit.errors import InvalidDocumentError, InvalidJobError

ROOT = Path(__file__).resolve().parents[2]


def test_model_for_names_the_allowed_models():
    from fanfit.train import TRAIN_MODELS, TrainModel, model_for

    # GIVEN every registered name THEN its model implements the interface under that name
    for name in TRAIN_MODELS:
        assert isinstance(model_for(name), TrainModel) and model_for(name).name == name
    # GIVEN an unknown name THEN InvalidJobError naming the allowed ones
    with pytest.raises(InvalidJobError, match="kmeans, logreg, linreg, mlp; got 'svm'"):
        model_for("svm")


def test_a_kmeans_round_through_the_interface_is_lloyds_step():
    from fanfit.train import kmeans_reduce, kmeans_step, model_for

    # GIVEN 60 rows in 3 blobs, 3 start centroids, 2 workers of 30 rows
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 0.1, size=(20, 2)) for c in (0.0, 3.0, 6.0)])
    start = X[[0, 20, 40]]
    model = model_for("kmeans")

    class Spec:
        seed, tol, rounds, n_clusters = 0, 0.0, 5, 3

    state = model.init(Spec(), X, 3, start)  # type: ignore[arg-type]
    batches = np.array([30, 30])
    parts = [model.worker_step(Spec(), state, X, None, batches, w, 0) for w in (0, 1)]  # type: ignore[arg-type]
    nxt, record = model.reduce(Spec(), state, parts, [[0, 1]])  # type: ignore[arg-type]
    # THEN the centroids are the exact M-step over all rows
    whole = kmeans_reduce([kmeans_step(X, start, None, 0)], start, 0.0)
    np.testing.assert_array_equal(nxt.arrays["centroids"], whole.centroids)
    assert record["inertia"] == pytest.approx(whole.inertia, rel=1e-12) and nxt.n_iter == 1


def test_train_documents_name_the_malformed_field():
    from fanfit.jobs.documents.train import RoundRecord, TrainPlan, TrainSpec

    # GIVEN a plan without n_obs THEN InvalidDocumentError naming the field and the key
    plan = {"job_id": "j", "spec": {"model": "kmeans", "features": ["a"]}, "data_key": "d",
            "n_outputs": 2, "workers": []}  # fmt: skip
    with pytest.raises(InvalidDocumentError, match=r"TrainPlan \(plan.json\).*n_obs"):
        TrainPlan.parse(plan, source="plan.json")
    # GIVEN a round record with an unknown key THEN it is refused by name
    with pytest.raises(InvalidDocumentError, match="surprise"):
        RoundRecord.parse({"surprise": 1})
    # GIVEN a spec whose workers is text THEN InvalidJobError naming workers
    with pytest.raises(InvalidJobError, match="workers"):
        TrainSpec.from_dict({"model": "kmeans", "features": ["a"], "workers": "two"})
    # AND a spec round-trips through its dict
    spec = TrainSpec.from_dict({"model": "logreg", "features": ["a", "b"], "target": "y"})
    assert TrainSpec.from_dict(spec.to_dict()) == spec and spec.to_dict()["features"] == ["a", "b"]


@pytest.mark.parametrize(
    ("function", "event"),
    [
        ("train_init", "TrainInitEvent"),
        ("train_schedule", "TrainRoundEvent"),
        ("train_shard", "TrainShardEvent"),
        ("train_reduce", "TrainRoundEvent"),
        ("train_finalize", "TrainFinalizeEvent"),
    ],  # fmt: skip
)
def test_each_train_handler_keys_idempotency_on_its_event_models_key(function, event):
    from fanfit.jobs.documents import events

    # GIVEN the handler's source THEN its IdempotencyConfig takes the event model's declared key
    source = (ROOT / "functions" / function / "app.py").read_text()
    assert f"IdempotencyConfig(event_key_jmespath={event}.IDEMPOTENCY_KEY)" in source
    key = getattr(events, event).IDEMPOTENCY_KEY
    assert key.startswith("[job_id, ") and key.endswith("]")


def test_fanfit_train_imports_nothing_above_it():
    # GIVEN a fresh interpreter WHEN fanfit.train is imported THEN neither sched nor jobs is (only
    # the bottom modules errors and split, the even split train and sched share)
    code = "import sys, fanfit.train; print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('fanfit.')}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['errors', 'split', 'train']"
