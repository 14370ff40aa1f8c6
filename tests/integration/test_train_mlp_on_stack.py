"""An mlp train job on the local stack, every worker on the GPU worker (AWS Batch).

GIVEN scikit-learn's digits (1,797 8x8 images, 10 classes; 80 % train, 20 % test, stratified),
WHEN a 64-256-256-256-10 ReLU network trains for 8 rounds of plain SGD (global batch 512, about
2.9 epochs, lr 0.3) on 2 workers, both Batch jobs (locally host processes with the CPU build of
torch, so float64), THEN

- the model equals an in-process reference run of the same rounds
  (:func:`fanfit.train.mlp.train_mlp` with the batches the scheduler chose) to 1e-8: the pipeline
  adds nothing to the maths but S3 round trips of float64 arrays;
- its test accuracy is within 3 percentage points of scikit-learn's ``MLPClassifier`` with the same
  architecture and optimiser (``solver='sgd'``, no momentum, the same learning rate, batch size and
  number of epochs, no penalty), averaged over 3 seeds. Why 3 points: the test set has 360 rows, so
  one classifier's accuracy near 0.95 has a binomial standard error of about 1.1 points and the
  difference of two about 1.6; scikit-learn's own accuracy over seeds 0..2 spans about 2 points
  here (initialisation and batch order differ from fanfit's, which draws both from the job seed).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration

HIDDEN = (256, 256, 256)
# 8 rounds (16 Batch jobs, each a process that imports torch): in-process, this network reaches
# 0.886 test accuracy and scikit-learn's 0.867 (mean of seeds 0..2), as 12 rounds at lr 0.2 did.
ROUNDS, GLOBAL_BATCH, LR, WORKERS, SEED = 8, 512, 0.3, 2, 0


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    return train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)


def test_an_mlp_job_on_batch_workers_equals_the_reference_and_reaches_sklearns_accuracy(
    local_client, digits
):
    pytest.importorskip("torch")
    from sklearn.neural_network import MLPClassifier

    from fanfit.train.mlp import train_mlp

    X_train, X_test, y_train, y_test = digits
    columns = [f"p{i}" for i in range(X_train.shape[1])]
    frame = pd.DataFrame(X_train, columns=columns).assign(y=y_train.astype(float))

    # WHEN the job runs with both workers on the GPU worker, LB-BSP sizing their batches
    job = local_client.submit_train(frame, model="mlp", hidden=HIDDEN, features=columns,
                                    target="y", workers=WORKERS, gpu_workers=WORKERS,
                                    global_batch=GLOBAL_BATCH, rounds=ROUNDS, lr=LR, seed=SEED,
                                    standardize=True, balance="lb-bsp")  # fmt: skip
    res = job.result(timeout=1500)

    # THEN every worker step of every round ran on Batch
    assert res.n_iter == ROUNDS and len(res.rounds) == ROUNDS
    workers = [w for r in res.rounds for w in r["workers"]]
    assert all(w["resource"] == "gpu:g4dn.xlarge" for w in workers)
    on_cpu = all(w["device"] == "cpu" for w in workers)

    # ... the model equals the in-process reference of the same rounds (same standardisation,
    # seed and batches)
    ref = train_mlp(res.transform(X_train), y_train, 10, HIDDEN, global_batch=GLOBAL_BATCH,
                    n_workers=WORKERS, rounds=ROUNDS, lr=LR, seed=SEED,
                    batches=lambda r: [w["batch"] for w in res.rounds[r]["workers"]])  # fmt: skip
    assert res.params is not None and sorted(res.params) == sorted(ref)
    # CUDA steps are float32 (fanfit.train.mlp): then only ~1e-4 agreement is expected
    atol = 1e-8 if on_cpu else 1e-3
    for key, value in ref.items():
        np.testing.assert_allclose(res.params[key], value, rtol=0, atol=atol, err_msg=key)
    assert res.loss is not None and res.loss[-1] < 0.5 * res.loss[0]

    # ... and its test accuracy is within 3 points of scikit-learn's MLPClassifier trained alike
    accuracy = float(np.mean(res.predict(X_test) == y_test))
    epochs = round(ROUNDS * GLOBAL_BATCH / len(X_train))
    with warnings.catch_warnings():  # max_iter is reached on purpose (ConvergenceWarning)
        warnings.simplefilter("ignore")
        sklearn_acc = [
            MLPClassifier(HIDDEN, solver="sgd", learning_rate_init=LR, momentum=0.0,
                          batch_size=GLOBAL_BATCH, alpha=0.0, max_iter=epochs, random_state=s)
            .fit(res.transform(X_train), y_train)
            .score(res.transform(X_test), y_test)
            for s in range(3)
        ]  # fmt: skip
    print(f"\nmlp on Batch: test accuracy {accuracy:.4f}; scikit-learn {sklearn_acc}")
    assert accuracy >= 0.85
    assert abs(accuracy - float(np.mean(sklearn_acc))) <= 0.03
