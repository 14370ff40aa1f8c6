"""External predictions of DoubleMLPQ and DoubleMLLPQ (models with a fold procedure).

GIVEN DoubleML's first fit of a model (learners other than the refit's, so that a given prediction
differs from the one the refit would fit) and its predictions of some or all keys, WHEN fanfit
refits with them (its client class through a fake stack, the spec in-process, the pipeline's
steps on moto) and DoubleML refits with ``fit(external_predictions=...)`` on the same folds,
THEN coef, se and the predictions are DoubleML's at 1e-9: PQ skips the given key's fits (with
``ml_m`` given its preliminary propensities are DoubleML's positional pick of the given array),
chains its start values over the repetitions as DoubleML does, and with both keys given runs no
unit and starts its root search from the first start value; LPQ takes all five keys (no unit) and
ignores a subset, as DoubleML 0.11.4 does (it fits every nuisance then).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

dml = pytest.importorskip("doubleml")

from doubleml.irm.datasets import make_iivm_data, make_irm_data  # noqa: E402
from doubleml.utils import DMLDummyClassifier  # noqa: E402
from doubleml_helpers import assert_fit_is_doublemls  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from test_doubleml_quantile_class import FakeClient  # noqa: E402

import fanfit  # noqa: E402
from fanfit import dml as fdml  # noqa: E402
from fanfit import errors  # noqa: E402
from fanfit.dml.scores.lpq import LPQ_KEYS  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning"
)

RTOL = 1e-9
N_OBS, N_FOLDS = 300, 3
PQ_KEYS = ("ml_g", "ml_m")
QUANTILE = {"pq": 0.4, "lpq": 0.5}
CLIP = 1e-2  # DoubleML's default clipping_threshold


def _data(model: str):
    np.random.seed(3 if model == "pq" else 24)
    if model == "lpq":
        return make_iivm_data(
            n_obs=N_OBS, dim_x=4, theta=0.5, alpha_x=1.0, return_type="DoubleMLData"
        )
    return make_irm_data(n_obs=N_OBS, dim_x=4, theta=0.5, return_type="DoubleMLData")


def _doubleml(module, model: str, data, n_rep: int, treatment: int, learners=None):
    cls = getattr(module, "DoubleMLPQ" if model == "pq" else "DoubleMLLPQ")
    ml_g, ml_m = learners or (LogisticRegression(), LogisticRegression())
    return cls(data, ml_g, ml_m, treatment=treatment, quantile=QUANTILE[model], n_folds=N_FOLDS,
               n_rep=n_rep, draw_sample_splitting=False)  # fmt: skip


def _given(model: str, n_rep: int, treatment: int, keys, seed: int = 7):
    """The data, fanfit's folds and DoubleML's ``external_predictions`` of ``keys`` from a first
    fit with other learners (C=0.05) on those folds."""
    data = _data(model)
    folds = fdml.draw_folds(N_OBS, N_FOLDS, n_rep, seed=seed)
    weak = (LogisticRegression(C=0.05), LogisticRegression(C=0.05))
    first = _doubleml(dml, model, data, n_rep, treatment, weak)
    first.set_sample_splitting(fdml.folds_to_smpls(folds))
    first.fit()
    return data, folds, {"d": {k: first.predictions[k][:, :, 0] for k in keys}}


def _theirs(model, data, folds, n_rep, treatment, ext, learners=None):
    theirs = _doubleml(dml, model, data, n_rep, treatment, learners)
    theirs.set_sample_splitting(fdml.folds_to_smpls(folds))
    theirs.fit(external_predictions=ext)
    return theirs


# ------------------------------------------------------------------ client classes (fake stack)
@pytest.mark.parametrize("n_rep", [1, 2])
@pytest.mark.parametrize("treatment", [0, 1])
@pytest.mark.parametrize("key", PQ_KEYS)
def test_pq_refit_with_one_key_given_is_doublemls(key: str, treatment: int, n_rep: int) -> None:
    # GIVEN one key's predictions, its learner DoubleML's placeholder
    data, folds, ext = _given("pq", n_rep, treatment, [key])
    learners = tuple(DMLDummyClassifier() if k == key else LogisticRegression() for k in PQ_KEYS)
    theirs = _theirs("pq", data, folds, n_rep, treatment, ext, learners)
    ours = _doubleml(fanfit, "pq", data, n_rep, treatment, learners)
    ours.set_sample_splitting(fdml.folds_to_smpls(folds))
    # WHEN fanfit's class refits with them
    client = FakeClient()
    ours.fit(client=client, external_predictions=ext)
    # THEN the job took them as columns, its placeholder a dummy no unit fits, every fold ran
    (sent,) = client.submitted
    assert list(sent["external_predictions_cols"]) == [key]
    assert sent[key].name == "DummyClassifier"
    spec = ours.fanfit_job.checked.spec
    assert fdml.n_stages(spec) == (2 if n_rep > 1 else 1)
    assert sum(len(fdml.fit_units(spec, s)) for s in range(fdml.n_stages(spec))) == (
        N_FOLDS * n_rep * fdml.n_stages(spec)
    )
    # and every number is DoubleML's refit's (ml_g's targets and loss NaN when it is given)
    assert_fit_is_doublemls(ours, theirs, RTOL)
    np.testing.assert_array_equal(ours.predictions[key][:, :, 0], ext["d"][key])
    plain = _theirs("pq", data, folds, n_rep, treatment, None)
    assert not np.allclose(ours.coef, plain.coef, rtol=1e-6)  # the given ones were used


@pytest.mark.parametrize(("model", "n_rep"), [("pq", 1), ("pq", 2), ("lpq", 1), ("lpq", 2)])
def test_every_key_given_runs_no_job_and_is_doublemls(model: str, n_rep: int) -> None:
    # GIVEN every key's predictions, the learners DoubleML's placeholders
    keys = PQ_KEYS if model == "pq" else LPQ_KEYS
    data, folds, ext = _given(model, n_rep, 1, keys)
    learners = (DMLDummyClassifier(), DMLDummyClassifier())
    theirs = _theirs(model, data, folds, n_rep, 1, ext, learners)
    ours = _doubleml(fanfit, model, data, n_rep, 1, learners)
    ours.set_sample_splitting(fdml.folds_to_smpls(folds))
    client = FakeClient()
    ours.fit(client=client, external_predictions=ext)
    # THEN nothing is submitted, DoubleML's own fit ran (its root search from its first start)
    assert client.submitted == [] and ours.fanfit_job is None
    assert_fit_is_doublemls(ours, theirs, RTOL)


def test_lpq_ignores_a_subset_as_doubleml_does() -> None:
    # GIVEN LPQ's ml_m_z predictions only
    data, folds, ext = _given("lpq", 2, 1, ["ml_m_z"])
    theirs = _theirs("lpq", data, folds, 2, 1, ext)
    plain = _theirs("lpq", data, folds, 2, 1, None)
    ours = _doubleml(fanfit, "lpq", data, 2, 1)
    ours.set_sample_splitting(fdml.folds_to_smpls(folds))
    client = FakeClient()
    # WHEN fanfit's class refits with them THEN it warns and fits every nuisance, as DoubleML,
    # whose refit is its plain fit
    with pytest.warns(UserWarning, match="ignored and every nuisance is fitted"):
        ours.fit(client=client, external_predictions=ext)
    spec = ours.fanfit_job.checked.spec
    assert len(fdml.fit_units(spec, 0)) == len(fdml.fit_units(spec, 1)) == 2 * N_FOLDS
    np.testing.assert_allclose(theirs.coef, plain.coef, rtol=1e-12)
    assert_fit_is_doublemls(ours, theirs, RTOL)
    # and a placeholder that DoubleML would fit (and fail on) is refused by name
    held = _doubleml(fanfit, "lpq", data, 2, 1, (LogisticRegression(), DMLDummyClassifier()))
    held.set_sample_splitting(fdml.folds_to_smpls(folds))
    with pytest.raises(errors.InvalidLearnerError, match=r"ml_m_z.*placeholders"):
        held.fit(client=client, external_predictions=ext)
    assert len(client.submitted) == 1


def test_cvar_and_qte_still_take_none() -> None:
    data = _data("pq")
    ext = {"d": {"ml_m": np.full((N_OBS, 1), 0.5)}}
    cvar = fanfit.DoubleMLCVAR(data, LogisticRegression(), LogisticRegression(), n_folds=2)
    with pytest.raises(NotImplementedError, match="External predictions not implemented"):
        cvar.fit(client=FakeClient(), external_predictions=ext)
    qte = fanfit.DoubleMLQTE(data, LogisticRegression(), LogisticRegression(), n_folds=2)
    with pytest.raises(errors.UnsupportedArgumentError, match="external_predictions"):
        qte.fit(client=FakeClient(), external_predictions=ext)


# ------------------------------------------------------------------ the job (a dml spec)
def _spec(model: str, n_rep: int, treatment: int, cols) -> fdml.DMLSpec:
    spec = fdml.DMLSpec(
        model=model, score=model.upper(), y_col="y", d_cols=("d",),
        x_cols=tuple(f"X{i}" for i in range(1, 5)), z_cols=("z",) if model == "lpq" else (),
        n_folds=N_FOLDS, n_rep=n_rep, seed=1, normalize_ipw=True, treatment=treatment,
        quantile=QUANTILE[model], external_predictions_cols=cols or None,
        learners={"ml_g": "LogisticRegression", "ml_m": "LogisticRegression"},
    )  # fmt: skip
    spec.validate()
    return spec


def _job(model: str, n_rep: int, treatment: int, keys):
    """The frame with the given columns, the spec naming them, the folds and DoubleML's refit."""
    data, folds, ext = _given(model, n_rep, treatment, keys)
    frame = data.data.copy()
    cols = {}
    for key in keys:
        cols[key] = {"d": [f"given_{key}_{r}" for r in range(n_rep)]}
        for r, col in enumerate(cols[key]["d"]):
            frame[col] = ext["d"][key][:, r]
    theirs = _theirs(model, data, folds, n_rep, treatment, ext)
    return frame, _spec(model, n_rep, treatment, cols), folds, theirs


def _assert_result_is_doublemls(coef, se, preds, theirs, keys) -> None:
    np.testing.assert_allclose(coef, theirs.coef, rtol=RTOL)
    np.testing.assert_allclose(se, theirs.se, rtol=RTOL)
    for key in keys:
        ours = np.asarray(preds[key])
        if key in ("ml_m", "ml_m_z"):  # DoubleML keeps its propensities clipped
            ours = np.clip(ours, CLIP, 1 - CLIP)
        np.testing.assert_allclose(ours, theirs.predictions[key], rtol=RTOL, atol=1e-12)


@pytest.mark.parametrize(
    ("model", "n_rep", "treatment", "keys", "n_units"),
    [
        ("pq", 2, 1, ("ml_m",), 12), ("pq", 2, 0, ("ml_g",), 12), ("pq", 1, 0, ("ml_m",), 3),
        ("pq", 2, 0, PQ_KEYS, 0), ("pq", 1, 1, PQ_KEYS, 0), ("lpq", 2, 1, LPQ_KEYS, 0),
        ("lpq", 1, 1, ("ml_m_z", "ml_g_du_z1"), 3),
    ],
)  # fmt: skip
def test_the_spec_in_process_is_doublemls_refit(model, n_rep, treatment, keys, n_units) -> None:
    frame, spec, folds, theirs = _job(model, n_rep, treatment, keys)
    data = fdml.validate_data(spec, list(frame.columns), frame.to_numpy())
    res = fdml.estimate_in_process(spec, data, folds)
    assert sum(len(fdml.fit_units(spec, s)) for s in range(fdml.n_stages(spec))) == n_units
    all_keys = PQ_KEYS if model == "pq" else LPQ_KEYS
    _assert_result_is_doublemls(res.coef, res.se, res.predictions, theirs, all_keys)


@pytest.mark.parametrize("keys", [("ml_m",), ("ml_g",)])
def test_the_steps_on_moto_equal_doublemls_refit(moto_stack, keys) -> None:
    # GIVEN a PQ spec of two repetitions (two stages, the chain between them) with one key given
    # (with every key given there is no unit: the client runs no job)
    from pipeline_steps import run_estimate

    frame, spec, folds, theirs = _job("pq", 2, 1, keys)
    with moto_stack():
        # WHEN Prepare, Schedule, CrossFit and Aggregate run it
        store, planned, result = run_estimate(
            list(frame.columns), frame.to_numpy(), spec, folds, "pqext"
        )
    # THEN every fold unit ran, the given key's fits skipped, and the estimate is DoubleML's
    assert [p.n_units for p in planned] == [2 * N_FOLDS, 2 * N_FOLDS]
    np.testing.assert_allclose(result["all_coef"]["d"], theirs.all_coef[0], rtol=RTOL)
    np.testing.assert_allclose(result["all_se"]["d"], theirs.all_se[0], rtol=RTOL)


@pytest.mark.parametrize(
    ("model", "given", "match"),
    [
        ("pq", {"ml_x": {"d": ["a", "b"]}}, r"names 'ml_x'; model 'pq'.*predicts ml_g, ml_m"),
        ("lpq", {"ml_m": {"d": ["a", "b"]}}, r"names 'ml_m'; model 'lpq'.*predicts ml_m_z, "),
        ("pq", {"ml_m": {"d": ["a"]}}, r"n_rep=2 column names"),
        ("cvar", {"ml_m": {"d": ["a", "b"]}}, r"'cvar'.*takes no external predictions"),
    ],
)
def test_bad_external_predictions_of_a_quantile_model_are_named(model, given, match) -> None:
    with pytest.raises(errors.InvalidJobError, match=match):
        fdml.DMLSpec(
            model=model, score={"pq": "PQ", "lpq": "LPQ", "cvar": "CVaR"}[model], y_col="y",
            d_cols=("d",), x_cols=("x0",), z_cols=("z",) if model == "lpq" else (), n_rep=2,
            treatment=1, quantile=0.5, external_predictions_cols=given,
            learners={"ml_g": "LinearRegression" if model == "cvar" else "LogisticRegression",
                      "ml_m": "LogisticRegression"},
        ).validate()  # fmt: skip


def test_a_unit_with_its_key_given_fits_nothing_of_it(monkeypatch) -> None:
    # GIVEN PQ's ml_m given in two repetitions: stage 0's units fit nothing at all
    frame, spec, folds, _ = _job("pq", 2, 1, ("ml_m",))
    data = fdml.validate_data(spec, list(frame.columns), frame.to_numpy())
    fitted: list[str] = []
    original = LogisticRegression.fit

    def fit(self, *args, **kwargs):
        fitted.append("fit")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LogisticRegression, "fit", fit)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for unit in fdml.fit_units(spec, 0):
            values, aux = fdml.fit_predict_aux(spec, unit, data, folds)
            assert aux is not None and np.isfinite(aux).all()
            test = np.flatnonzero(folds[:, unit.i_rep] == unit.i_fold)
            np.testing.assert_array_equal(values, data.external["ml_m"][test, unit.i_rep, 0])
    assert fitted == []
