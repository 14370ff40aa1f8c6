"""TorchMLPRegressor / TorchMLPClassifier: scikit-learn compatibility, seeding, learning, DML parity."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from sklearn.base import clone, is_classifier, is_regressor
from sklearn.utils.estimator_checks import (
    check_get_params_invariance,
    check_no_attributes_set_in_init,
    check_parameters_default_constructible,
    check_set_params,
)

from fanfit.dml import DMLSpec, draw_folds, estimate_in_process, folds_to_smpls, validate_data
from fanfit.errors import InvalidLearnerError
from fanfit.learners.specs import ALLOWED_LEARNERS, GPU_ONLY_LEARNERS, LearnerSpec
from fanfit.learners.torch_mlp import TorchMLPClassifier, TorchMLPRegressor

torch = pytest.importorskip("torch")

TINY = {"hidden_layer_sizes": (16, 16), "epochs": 20, "batch_size": 64, "lr": 1e-2}
X_COLS = [f"x{i}" for i in range(5)]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # Tiny networks are fastest on one thread, and the machine's cores are shared.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _data(n: int = 400, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=n)
    return X, y


@pytest.mark.parametrize("cls", [TorchMLPRegressor, TorchMLPClassifier])
def test_scikit_learn_parameter_checks(cls) -> None:
    # GIVEN a default instance
    name = cls.__name__
    est = cls()
    # THEN scikit-learn's own checks of get_params/set_params/clone and __init__ pass
    check_parameters_default_constructible(name, est)
    check_no_attributes_set_in_init(name, est)
    check_get_params_invariance(name, est)
    check_set_params(name, est)
    cloned = clone(cls(**TINY, random_state=3))
    assert cloned.get_params() == {**cls().get_params(), **TINY, "random_state": 3}
    assert est.get_params()["hidden_layer_sizes"] == (256, 256, 256)
    assert is_regressor(est) == (cls is TorchMLPRegressor)
    assert is_classifier(est) == (cls is TorchMLPClassifier)


def test_a_seed_makes_fits_identical() -> None:
    # GIVEN the same data and seed twice, and a different seed
    X, y = _data()
    p1 = TorchMLPRegressor(**TINY, random_state=7).fit(X, y).predict(X)
    p2 = TorchMLPRegressor(**TINY, random_state=7).fit(X, y).predict(X)
    p3 = TorchMLPRegressor(**TINY, random_state=8).fit(X, y).predict(X)
    # THEN equal seeds give identical predictions, different seeds do not
    np.testing.assert_array_equal(p1, p2)
    assert not np.array_equal(p1, p3)
    # AND the caller's global torch RNG is left untouched
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    TorchMLPRegressor(**TINY, random_state=7).fit(X, y)
    assert torch.equal(torch.rand(3), expected)


def test_the_regressor_learns_a_nonlinear_function_better_than_a_constant() -> None:
    # GIVEN y = sin(2 x0) + x1^2 + noise, a training and a test set
    X, y = _data(600, seed=1)
    Xt, yt = _data(300, seed=2)
    # WHEN a small MLP fits it
    model = TorchMLPRegressor(**{**TINY, "epochs": 60}, random_state=0).fit(X, y)
    pred = model.predict(Xt)
    # THEN its test MSE is well below the constant predictor's (the variance), R^2 > 0.7
    assert pred.shape == (300,) and pred.dtype == np.float64
    assert np.mean((pred - yt) ** 2) < 0.3 * np.mean((yt - y.mean()) ** 2)
    assert model.score(Xt, yt) > 0.7
    # (device='auto': the GPU where one is, as on the GPU worker)
    assert model.n_features_in_ == 3
    assert model.device_ == ("cuda" if torch.cuda.is_available() else "cpu")


def test_classifier_probabilities_are_in_0_1_and_sum_to_1() -> None:
    # GIVEN three string classes that depend on x0 nonlinearly
    X, y = _data(500, seed=3)
    labels = np.where(y > 1.5, "high", np.where(y > 0.3, "mid", "low"))
    # WHEN the classifier fits
    clf = TorchMLPClassifier(**TINY, random_state=0).fit(X, labels)
    proba = clf.predict_proba(X)
    # THEN probabilities are valid and follow classes_; predictions are labels, better than the
    # majority class
    np.testing.assert_array_equal(clf.classes_, ["high", "low", "mid"])
    assert proba.shape == (500, 3)
    assert ((proba >= 0) & (proba <= 1)).all()
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    majority = max(np.mean(labels == c) for c in clf.classes_)
    assert np.mean(clf.predict(X) == labels) > majority + 0.1
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[proba.argmax(axis=1)])


def test_allow_list_names_them_and_marks_them_for_batch() -> None:
    # GIVEN learner specs as a job writes them (JSON lists for the layer sizes)
    spec = LearnerSpec.parse('TorchMLPRegressor:{"hidden_layer_sizes": [8, 8], "epochs": 3}')
    # THEN they are allow-listed, need Batch, and build with the job's seed
    assert {"TorchMLPRegressor", "TorchMLPClassifier"} <= set(ALLOWED_LEARNERS)
    assert frozenset({"TorchMLPRegressor", "TorchMLPClassifier"}) == GPU_ONLY_LEARNERS
    assert spec.requires_gpu and spec.is_regressor
    assert not LearnerSpec.parse("LassoCV").requires_gpu
    assert spec.build(random_state=5).get_params()["random_state"] == 5
    assert LearnerSpec.parse("TorchMLPClassifier").is_classifier
    # AND bad parameters are named errors
    for bad in ('{"hidden_layer_sizes": [0]}', '{"device": "tpu"}', '{"lr": 0}', '{"epochs": 0}'):
        with pytest.raises(InvalidLearnerError):
            LearnerSpec.parse(f"TorchMLPRegressor:{bad}")


def test_importing_the_learners_does_not_need_torch() -> None:
    # GIVEN a fresh interpreter where `import torch` fails (a finder refusing it: unlike
    # sys.modules['torch'] = None, which SciPy 1.18's array-API helpers trip over)
    code = (
        "import sys\n"
        "class NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "import fanfit.learners, fanfit.dml\n"
        "from fanfit.learners.specs import LearnerSpec\n"
        "from fanfit.errors import InvalidLearnerError\n"
        "est = LearnerSpec.parse('TorchMLPClassifier').build(1)\n"
        "try:\n"
        "    est.fit([[0.0], [1.0]], [0, 1])\n"
        "except InvalidLearnerError as e:\n"
        "    print('needs torch' if 'PyTorch' in str(e) else e)\n"
    )
    # WHEN it imports fanfit's learners and fits a TorchMLP
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    # THEN the import works and the fit raises the named error
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "needs torch"


def test_cuda_without_a_gpu_is_a_named_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    X, y = _data(50)
    with pytest.raises(InvalidLearnerError, match="cuda"):
        TorchMLPRegressor(**TINY, device="cuda").fit(X, y)


def test_plr_with_torch_learners_equals_doubleml(make_frame) -> None:
    import doubleml as dml

    # GIVEN a PLR data set, shared folds, and TorchMLP nuisance learners with a fixed seed
    df = make_frame("plr", n_obs=300, seed=5)
    learner = (
        'TorchMLPRegressor:{"hidden_layer_sizes": [16], "epochs": 15, "batch_size": 64, '
        '"lr": 0.01, "random_state": 3}'
    )
    spec = DMLSpec(
        model="plr",
        score="partialling out",
        y_col="y",
        d_cols=["d"],
        x_cols=X_COLS,
        n_folds=3,
        n_rep=2,
        seed=7,
        learners={"ml_l": learner, "ml_m": learner},
    )
    spec.validate()
    folds = draw_folds(len(df), spec.n_folds, spec.n_rep, spec.seed)
    data = validate_data(spec, list(df.columns), df.to_numpy())
    # WHEN fanfit cross-fits them in process
    ours = estimate_in_process(spec, data, folds)
    obj_data = dml.DoubleMLData(df, "y", ["d"], x_cols=X_COLS)

    def doubleml():
        learners = {k: v.build() for k, v in spec.learners.items()}
        obj = dml.DoubleMLPLR(obj_data, learners["ml_l"], learners["ml_m"], n_folds=3, n_rep=2)
        obj.set_sample_splitting(folds_to_smpls(folds))
        return obj

    external = {"d": {k: v[:, :, 0] for k, v in ours.predictions.items()}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # AND DoubleML 0.11.4 fits with fanfit's predictions as external predictions
        ext = doubleml().fit(external_predictions=external)
        # AND DoubleML fits the same learners itself
        own = doubleml().fit(store_predictions=True)
    # THEN the estimate equals DoubleML's given the same predictions
    np.testing.assert_allclose(ours.coef, ext.coef, rtol=1e-9, atol=0)
    np.testing.assert_allclose(ours.se, ext.se, rtol=1e-9, atol=0)
    np.testing.assert_allclose(ours.all_coef, ext.all_coef, rtol=1e-9, atol=0)
    # AND DoubleML's own fits of the seeded learners reproduce fanfit's predictions
    for key in ("ml_l", "ml_m"):
        np.testing.assert_allclose(
            ours.predictions[key][:, :, 0], own.predictions[key][:, :, 0], rtol=1e-6, atol=1e-6
        )
    np.testing.assert_allclose(ours.coef, own.coef, rtol=1e-5)
