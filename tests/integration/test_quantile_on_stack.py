"""fanfit.DoubleMLPQ, DoubleMLCVAR and DoubleMLQTE through the local pipeline equal DoubleML 0.11's.

GIVEN DoubleML's make_irm_data (300 rows), logistic/linear learners and given folds (2 folds x 2
repetitions), WHEN fanfit's class is fitted on the local stack (Prepare -> CrossFit Lambdas, one
per outer fold running the fold's nested fits -> Aggregate; PQ and LPQ in two stages, DoubleML's
chain of start values in Prepare between them) and DoubleML's class in-process, THEN coef, se,
confint, the bootstrap from the same global seed and (PQ, CVaR) nuisance_loss agree to a
relative 1e-9. QTE (score LPQ, make_iivm_data: four ``lpq`` jobs, 2 quantiles x 2 levels,
submitted before any is awaited) likewise for its effects. And ``fanfit estimate --model qte``
(four ``pq`` jobs; the effects computed without DoubleML, by fanfit.client.qte) prints
DoubleMLQTE's effects and joint bands to 1e-9.
"""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
from stack_parity import RTOL, assert_stack_fit_is_doublemls

pytestmark = pytest.mark.integration

N_OBS = 300

# (class, ml_g, keywords)
CASES = {
    "pq": ("DoubleMLPQ", "LogisticRegression", {"treatment": 1, "quantile": 0.5}),
    "cvar": ("DoubleMLCVAR", "LinearRegression", {"treatment": 0, "quantile": 0.4}),
    # QTE of the compliers' quantiles (score LPQ: lpq jobs, with a binary instrument)
    "qte-lpq": ("DoubleMLQTE", "LogisticRegression", {"quantiles": [0.4, 0.6], "score": "LPQ"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_quantile_models_on_the_stack_equal_doubleml(local_client, case: str) -> None:
    import doubleml as dml
    import sklearn.linear_model as lm
    from doubleml.irm.datasets import make_iivm_data, make_irm_data

    import fanfit

    name, ml_g, kwargs = CASES[case]
    # GIVEN DoubleML's IRM data, small learners and given folds (2 x 2)
    np.random.seed(3)
    if case == "qte-lpq":
        data = make_iivm_data(
            n_obs=N_OBS, dim_x=4, theta=0.5, alpha_x=1.0, return_type="DoubleMLData"
        )
    else:
        data = make_irm_data(n_obs=N_OBS, dim_x=4, theta=0.5, return_type="DoubleMLData")
    smpls = fanfit.dml.folds_to_smpls(fanfit.dml.draw_folds(N_OBS, 2, 2, seed=19))
    args = (data, getattr(lm, ml_g)(), lm.LogisticRegression())
    options = {"n_folds": 2, "n_rep": 2, "draw_sample_splitting": False, **kwargs}
    ours = getattr(fanfit, name)(*args, **options)
    theirs = getattr(dml, name)(*args, **options)
    ours.set_sample_splitting(smpls)
    theirs.set_sample_splitting(smpls)

    # WHEN fanfit's class is fitted on the stack and DoubleML's in-process
    ours.fit(client=local_client, seed=0)
    theirs.fit()

    # THEN the numbers are DoubleML's
    if case != "qte-lpq":
        assert_stack_fit_is_doublemls(ours, theirs, case)
        return
    assert [r.model for r in ours.fanfit_results] == ["lpq"] * 4
    for attr in ("coef", "se", "all_coef", "all_se"):
        np.testing.assert_allclose(getattr(ours, attr), getattr(theirs, attr), rtol=RTOL)
    np.testing.assert_allclose(ours.confint(), theirs.confint(), rtol=RTOL)
    np.random.seed(31)
    ours.bootstrap(method="normal", n_rep_boot=200)
    np.random.seed(31)
    theirs.bootstrap(method="normal", n_rep_boot=200)
    np.testing.assert_allclose(ours.confint(joint=True), theirs.confint(joint=True), rtol=RTOL)


def test_the_qte_command_on_the_stack_equals_doubleml(local_client, tmp_path, monkeypatch,
                                                      capsys) -> None:  # fmt: skip
    import doubleml as dml
    import sklearn.linear_model as lm
    from doubleml.irm.datasets import make_irm_data

    import fanfit
    from fanfit import cli
    from fanfit.cli import common

    # GIVEN DoubleML's IRM data as a CSV, and the CLI on the session's stack
    np.random.seed(5)
    frame = make_irm_data(n_obs=N_OBS, dim_x=4, theta=0.5, return_type="DataFrame")
    path = tmp_path / "irm.csv"
    frame.to_csv(path, index=False)
    monkeypatch.setattr(common, "stack_client", lambda args: contextlib.nullcontext(local_client))
    capsys.readouterr()  # what the fixtures printed
    # WHEN fanfit estimate --model qte runs at two quantiles (2 folds, one repetition)
    rc = cli.main(["estimate", "--data", str(path), "--model", "qte", "--y", "y", "--d", "d",
                   "--quantiles", "0.4,0.6", "--ml-g", "LogisticRegression", "--ml-m",
                   "LogisticRegression", "--normalize-ipw", "--n-folds", "2", "--seed", "7",
                   "--boot-method", "normal", "--n-rep-boot", "200", "--output", "json",
                   "-q"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert [(p["model"], p["quantile"], p["treatment"]) for p in out["parts"]] == [
        ("pq", 0.4, 0), ("pq", 0.4, 1), ("pq", 0.6, 0), ("pq", 0.6, 1)]  # fmt: skip
    # THEN the effects are DoubleMLQTE's on the jobs' folds (every job has the seed's folds)
    data = dml.DoubleMLData(frame, "y", "d")
    theirs = dml.DoubleMLQTE(data, lm.LogisticRegression(), lm.LogisticRegression(),
                             quantiles=[0.4, 0.6], n_folds=2, draw_sample_splitting=False)  # fmt: skip
    theirs.set_sample_splitting(fanfit.dml.folds_to_smpls(fanfit.dml.draw_folds(N_OBS, 2, 1, 7)))
    theirs.fit()
    np.random.seed(7)
    theirs.bootstrap(method="normal", n_rep_boot=200)
    for key, attr in (("coef", "coef"), ("se", "se"), ("pval", "pval"), ("all_coef", "all_coef")):
        np.testing.assert_allclose(out[key], getattr(theirs, attr), rtol=RTOL, err_msg=key)
    np.testing.assert_allclose(out["ci_95"], theirs.confint().to_numpy(), rtol=RTOL)
    np.testing.assert_allclose(out["ci_joint_95"], theirs.confint(joint=True).to_numpy(), rtol=RTOL)
