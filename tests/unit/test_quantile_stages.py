"""PQ and LPQ in two stages for any n_rep > 1: the start-independent fits, DoubleML's chain, the rest.

Stage 0 runs each fold's preliminary and ``ml_m`` fits for every repetition side by side and keeps
the fold's preliminary propensities (an auxiliary array); Prepare of stage 1 runs DoubleML's chain
of IPW searches from them (repetition r starts from the mean of repetition r - 1's fold
quantiles); stage 1 fits ``ml_g`` from each fold's quantile. The result must be the one-call
fold procedure's (``pq_fold``/``lpq_fold``, equal to DoubleML at 1e-12 in test_quantile_fold.py)
with the chained start values, and through the pipeline's steps (moto) DoubleML's own. With one
repetition there is no chain and each fold's unit runs the whole fold in one stage.
"""

from __future__ import annotations

import doubleml
import numpy as np
import pytest
from doubleml.irm.datasets import make_iivm_data, make_irm_data
from sklearn.linear_model import LogisticRegression

from fanfit import dml, storage
from fanfit.dml.fold_procedures import THETA_IPW
from fanfit.dml.model_types import FoldProcedure
from fanfit.dml.models import model_def
from fanfit.dml.scores.lpq import LPQ_KEYS, lpq_fold
from fanfit.dml.scores.quantile import pq_coef_start, pq_fold
from fanfit.errors import InvalidJobError

TOL = 1e-12
N_OBS, N_FOLDS, N_REP = 300, 2, 3
X_COLS = tuple(f"X{i}" for i in range(1, 5))
#: The quantile of each model's data here (PQ's IPW search at 0.5 lands on min Y with these data)
QUANTILE = {"pq": 0.4, "lpq": 0.5}


def _spec(model: str) -> dml.DMLSpec:
    spec = dml.DMLSpec(
        model=model, score=model.upper(), y_col="y", d_cols=("d",), x_cols=X_COLS,
        z_cols=("z",) if model == "lpq" else (), n_folds=N_FOLDS, n_rep=N_REP, seed=1,
        learners={"ml_g": "LogisticRegression", "ml_m": "LogisticRegression"},
        normalize_ipw=True, treatment=1, quantile=QUANTILE[model],
    )  # fmt: skip
    spec.validate()
    return spec


def _frame(model: str):
    np.random.seed(24 if model == "lpq" else 3)
    if model == "lpq":
        return make_iivm_data(
            n_obs=N_OBS, dim_x=4, theta=0.5, alpha_x=1.0, return_type="DoubleMLData"
        )
    return make_irm_data(n_obs=N_OBS, dim_x=4, theta=0.5, return_type="DoubleMLData")


@pytest.mark.parametrize("model", ["pq", "lpq"])
def test_two_stages_and_the_chain_equal_the_one_call_fold_procedure(model: str) -> None:
    # GIVEN a PQ / LPQ spec with 3 repetitions, its data and folds
    spec = _spec(model)
    frame = _frame(model)
    data = dml.validate_data(spec, list(frame.data.columns), frame.data.to_numpy())
    folds = dml.draw_folds(N_OBS, N_FOLDS, N_REP, seed=7)
    # WHEN stage 0 runs every fold of every repetition, the chain runs between the stages
    # (stage_inputs), and stage 1 runs every fold again
    assert dml.n_stages(spec) == 2
    preds, aux = dml.init_preds(spec, N_OBS), {}
    for unit in dml.fit_units(spec, 0):
        values, aux[unit.key] = dml.fit_predict_aux(spec, unit, data, folds)
        dml.put_predictions(preds, unit, folds, values, spec)
    inputs = dml.stage_inputs(spec, 1, data, folds, preds, aux)
    for unit in dml.fit_units(spec, 1):
        values, none = dml.fit_predict_aux(spec, unit, data, folds, inputs)
        assert none is None
        dml.put_predictions(preds, unit, folds, values, spec)
    # THEN every prediction and fold quantile is the one-call procedure's, repetition r started
    # from the mean of repetition r - 1's fold quantiles (DoubleML's _coef_start_val)
    x, y, d = data.xd(0), data.y, data.d[:, 0]
    q = QUANTILE[model]
    start = pq_coef_start(y, d, 1, q)
    for i_rep in range(N_REP):
        thetas = []
        for i_fold in range(N_FOLDS):
            test = np.flatnonzero(folds[:, i_rep] == i_fold)
            train = np.flatnonzero(folds[:, i_rep] != i_fold)
            common = (N_FOLDS, LogisticRegression, LogisticRegression)
            if model == "lpq":  # its builders take the nuisance's key
                z = data.z[:, 0]
                keyed = (N_FOLDS, lambda _k: LogisticRegression(), lambda _k: LogisticRegression())
                out = lpq_fold(x, y, d, z, train, test, 1, q, start, *keyed)
                want, theta = out.preds, out.theta_ipw
            else:
                pq = pq_fold(x, y, d, train, test, 1, q, start, *common)
                want, theta = {"ml_g": pq.g_hat, "ml_m": pq.m_hat}, pq.theta_ipw
            for key in LPQ_KEYS if model == "lpq" else ("ml_g", "ml_m"):
                got = preds[key][test, i_rep, 0]
                np.testing.assert_allclose(got, want[key], rtol=TOL, atol=TOL, err_msg=key)
            assert inputs["fold_scalars"][THETA_IPW][0][i_rep][i_fold] == pytest.approx(
                theta, abs=TOL
            )
            np.testing.assert_allclose(preds[THETA_IPW][test, i_rep, 0], theta, atol=TOL)
            thetas.append(theta)
        start = float(np.mean(thetas))


def test_one_repetition_runs_each_whole_fold_in_one_stage_and_equals_doubleml() -> None:
    # GIVEN a PQ spec with one repetition (no chain to run) and DoubleML's PQ on the same folds
    spec = dml.DMLSpec.from_dict({**_spec("pq").to_dict(), "n_rep": 1})
    frame = _frame("pq")
    data = dml.validate_data(spec, list(frame.data.columns), frame.data.to_numpy())
    folds = dml.draw_folds(N_OBS, N_FOLDS, 1, seed=7)
    theirs = doubleml.DoubleMLPQ(
        frame, LogisticRegression(), LogisticRegression(), treatment=1, quantile=QUANTILE["pq"],
        n_folds=N_FOLDS, n_rep=1, draw_sample_splitting=False,
    )  # fmt: skip
    theirs.set_sample_splitting(dml.folds_to_smpls(folds))
    theirs.fit()
    # WHEN fanfit plans and runs it
    res = dml.estimate_in_process(spec, data, folds)
    # THEN one stage of one unit per fold fits every key, and the estimate is DoubleML's
    assert dml.n_stages(spec) == 1
    assert dml.prediction_keys(spec, 0) == ("ml_g", "ml_m")
    assert len(dml.fit_units(spec, 0)) == N_FOLDS
    np.testing.assert_allclose(res.all_coef, theirs.all_coef, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(res.all_se, theirs.all_se, rtol=1e-9, atol=1e-9)


def test_the_chain_needs_every_stage_0_auxiliary_array() -> None:
    # GIVEN a PQ spec whose stage 0 ran, but one unit's auxiliary array is lost
    spec = _spec("pq")
    frame = _frame("pq")
    data = dml.validate_data(spec, list(frame.data.columns), frame.data.to_numpy())
    folds = dml.draw_folds(N_OBS, N_FOLDS, N_REP, seed=7)
    units = dml.fit_units(spec, 0)
    aux = {u.key: dml.fit_predict_aux(spec, u, data, folds)[1] for u in units}
    del aux[units[-1].key]
    # WHEN stage 1's inputs are computed THEN the error names the unit
    with pytest.raises(InvalidJobError, match=f"auxiliary array of unit {units[-1].key}"):
        dml.stage_inputs(spec, 1, data, folds, {}, aux)
    # AND a stage-1 unit without the fold scalars is refused by name
    with pytest.raises(InvalidJobError, match="needs stage_inputs with 'fold_scalars'"):
        dml.fit_predict(spec, dml.fit_units(spec, 1)[0], data, folds, {})
    # AND preliminary propensities of the wrong length (another fold's) are refused
    with pytest.raises(InvalidJobError, match="its first half has"):
        fp = model_def("pq").fold_procedure
        assert fp is not None and fp.split is not None
        train = np.flatnonzero(folds[:, 0] != 0)
        fp.split.root(spec, data, train, 0, np.zeros((1, 3)), 0.0)


def test_a_chained_fold_procedure_without_split_is_refused() -> None:
    # GIVEN CVaR's procedure WHEN declared chained without a split THEN the registry refuses it
    fp = model_def("cvar").fold_procedure
    assert fp is not None and fp.split is None and not fp.chained
    with pytest.raises(ValueError, match="chained fold procedure needs split"):
        FoldProcedure(fp.run, fp.start, fp.scalars, True, fp.solve, fp.targets)


# --------------------------------------------------------------------------- the steps on moto
def _run_steps(frame, spec: dml.DMLSpec, folds: np.ndarray, job_id: str):
    """Prepare, Schedule, CrossFit and Aggregate as the state machine runs them."""
    from pipeline_steps import run_estimate

    return run_estimate(list(frame.data.columns), frame.data.to_numpy(), spec, folds, job_id)


def test_pq_steps_on_moto_run_two_stages_and_equal_doubleml(moto_stack) -> None:
    # GIVEN a PQ job with 3 repetitions (given folds) and DoubleML's PQ on the same folds
    spec = _spec("pq")
    frame = _frame("pq")
    folds = dml.draw_folds(N_OBS, N_FOLDS, N_REP, seed=7)
    theirs = doubleml.DoubleMLPQ(
        frame, LogisticRegression(), LogisticRegression(), treatment=1, quantile=QUANTILE["pq"],
        n_folds=N_FOLDS, n_rep=N_REP, draw_sample_splitting=False,
    )  # fmt: skip
    theirs.set_sample_splitting(dml.folds_to_smpls(folds))
    theirs.fit()
    with moto_stack():
        # WHEN Prepare, Schedule, CrossFit and Aggregate run it step by step
        store, planned, result = _run_steps(frame, spec, folds, "pq-two-stages")
        # THEN it has two stages of n_rep x n_folds units each
        assert [p.n_units for p in planned] == [N_REP * N_FOLDS] * 2
        assert [p.has_next_stage for p in planned] == [True, False]
        # AND stage 0's shards store each unit's preliminary propensities beside its predictions
        names = {
            name
            for key in store.list_keys(storage.preds_prefix("pq-two-stages", 0))
            for name in store.get_arrays(key)
        }
        for unit in dml.fit_units(spec, 0):
            assert {unit.key, storage.aux_array_name(unit.key)} <= names
        # AND stage 1's inputs hold every fold's IPW quantile (treatment x repetition x fold)
        inputs = store.get_json(storage.stage_inputs_key("pq-two-stages", 1))
        assert np.shape(inputs["fold_scalars"][THETA_IPW]) == (1, N_REP, N_FOLDS)
    # AND every repetition's estimate and standard error is DoubleML's
    assert result["model"] == "pq"
    np.testing.assert_allclose(result["all_coef"]["d"], theirs.all_coef[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(result["all_se"]["d"], theirs.all_se[0], rtol=1e-9, atol=1e-9)
