"""fanfit's DoubleMLPQ, DoubleMLCVAR and DoubleMLQTE (fanfit.client.doubleml.quantile) without a stack.

GIVEN DoubleML's make_irm_data and a fake client whose "job" runs fanfit's in-process estimator on
the options ``fit()`` sends (what the pipeline computes, fold procedure included), WHEN fanfit's
class and DoubleML's are built from the same seed and fitted, THEN coef, se, the predictions, the
nuisance losses and the QTE's effects are DoubleML's.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

dml = pytest.importorskip("doubleml")

from doubleml.irm.datasets import make_iivm_data, make_irm_data  # noqa: E402
from doubleml_helpers import PartsOnFake, submitted  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402

import fanfit  # noqa: E402
from fanfit import dml as fdml  # noqa: E402
from fanfit import errors  # noqa: E402
from fanfit.client import check_estimate  # noqa: E402

TOL = 1e-9


class FakeJob:
    """A job run here; its predictions as the stack stores them (fold scalars included)."""

    job_id = "est-20260101-000000-00000000"

    def __init__(self, checked) -> None:
        self.checked = checked
        self.res = fdml.estimate_in_process(checked.spec, checked.data, checked.folds)

    def result(self, timeout=None, progress=False):
        r = self.res
        return SimpleNamespace(coef=r.coef, se=r.se, d_cols=list(r.d_cols),
                               execution_arn="arn:fake", timings={})  # fmt: skip

    def predictions(self):
        d_col = self.checked.spec.d_cols[0]
        return {d_col: {k: v[:, :, 0] for k, v in self.res.predictions.items()}}


class FakeClient(PartsOnFake):
    def __init__(self) -> None:
        self.events: list[str] = []
        self.submitted: list[dict] = []

    def submit_estimate(self, data, options=None, **keywords):
        self.events.append("submit")
        checked, sent = submitted(data, options, **keywords)
        self.submitted.append(sent)
        job = FakeJob(checked)
        result, events = job.result, self.events

        def awaited(timeout=None, progress=False):
            events.append("await")
            return result(timeout, progress)

        job.result = awaited
        return job


def _iivm_data():
    np.random.seed(24)
    return make_iivm_data(n_obs=400, dim_x=4, theta=0.5, alpha_x=1.0, return_type="DoubleMLData")


def _data():
    np.random.seed(11)
    return make_irm_data(n_obs=300, dim_x=4, theta=0.5, return_type="DoubleMLData")


@pytest.mark.parametrize(
    ("name", "ml_g", "treatment"),
    [("DoubleMLPQ", LogisticRegression(), 0), ("DoubleMLPQ", LogisticRegression(), 1),
     ("DoubleMLCVAR", LinearRegression(), 1), ("DoubleMLLPQ", LogisticRegression(), 1)],
)  # fmt: skip
def test_pq_cvar_and_lpq_on_the_fake_stack_are_doublemls(name, ml_g, treatment) -> None:
    # GIVEN fanfit's and DoubleML's class, same data, learners and splitting (2 folds x 2 reps)
    data = _iivm_data() if name == "DoubleMLLPQ" else _data()
    kw = {"treatment": treatment, "quantile": 0.45, "n_folds": 2, "n_rep": 2}
    np.random.seed(5)
    ours = getattr(fanfit, name)(data, ml_g, LogisticRegression(), **kw)
    np.random.seed(5)
    theirs = getattr(dml, name)(data, ml_g, LogisticRegression(), **kw)
    # WHEN fitted on the fake stack and in-process
    client = FakeClient()
    ours.fit(client=client)
    theirs.fit()
    # THEN the job was a pq/cvar job with the options, and every number is DoubleML's
    sent = client.submitted[0]
    assert (sent["model"], sent["treatment"], sent["quantiles"]) == (
        name[8:].lower(),
        treatment,
        [0.45],
    )
    for attr in ("coef", "se", "all_coef", "all_se", "psi"):
        np.testing.assert_allclose(getattr(ours, attr), getattr(theirs, attr), rtol=TOL, atol=TOL)
    for key, loss in theirs.nuisance_loss.items():
        np.testing.assert_allclose(ours.predictions[key], theirs.predictions[key], atol=TOL)
        np.testing.assert_allclose(ours.nuisance_loss[key], loss, atol=TOL, err_msg=key)


@pytest.mark.parametrize(
    ("score", "ml_g"),
    [("PQ", LogisticRegression()), ("CVaR", LinearRegression()), ("LPQ", LogisticRegression())],
)
def test_qte_submits_every_part_before_awaiting_and_is_doublemls(score, ml_g) -> None:
    # GIVEN fanfit's and DoubleML's QTE at two quantiles (LPQ: with a binary instrument)
    data = _iivm_data() if score == "LPQ" else _data()
    kw = {"quantiles": [0.3, 0.6], "n_folds": 2, "n_rep": 2, "score": score}
    np.random.seed(6)
    ours = fanfit.DoubleMLQTE(data, ml_g, LogisticRegression(), **kw)
    np.random.seed(6)
    theirs = dml.DoubleMLQTE(data, ml_g, LogisticRegression(), **kw)
    # WHEN fitted on the fake stack and in-process
    client = FakeClient()
    ours.fit(client=client)
    theirs.fit()
    # THEN four jobs (2 quantiles x 2 levels), all submitted before any is awaited
    assert client.events == ["submit"] * 4 + ["await"] * 4
    # AND the effects, their standard errors and confidence intervals are DoubleML's
    for attr in ("coef", "se", "all_coef", "all_se"):
        np.testing.assert_allclose(getattr(ours, attr), getattr(theirs, attr), rtol=TOL, atol=TOL)
    np.testing.assert_allclose(ours.confint().to_numpy(), theirs.confint().to_numpy(), rtol=TOL)
    # AND the bootstrap from one seed is DoubleML's
    np.random.seed(9)
    ours.bootstrap(n_rep_boot=50)
    np.random.seed(9)
    theirs.bootstrap(n_rep_boot=50)
    np.testing.assert_allclose(
        ours.confint(joint=True).to_numpy(), theirs.confint(joint=True).to_numpy(), rtol=TOL
    )


def test_what_the_stack_cannot_do_is_refused_by_name() -> None:
    data = _data()
    # GIVEN a custom kde WHEN constructed THEN UnsupportedArgumentError
    with pytest.raises(errors.UnsupportedArgumentError, match="kde"):
        fanfit.DoubleMLPQ(data, LogisticRegression(), LogisticRegression(), kde=lambda u, w: 0.0)
    with pytest.raises(errors.UnsupportedArgumentError, match="kde"):
        fanfit.DoubleMLQTE(data, LogisticRegression(), LogisticRegression(), kde=lambda u, w: 0.0)


@pytest.mark.parametrize(
    ("quantiles", "match"),
    [("0.2,x", "quantiles must be numbers"), ("1.5", r"in \(0, 1\)"), ("", "quantiles is empty"),
     ("0.2,0.4", "takes one quantile")],
)  # fmt: skip
def test_quantiles_option_is_validated_by_name(quantiles, match) -> None:
    # GIVEN a pq job's options with a bad quantiles value WHEN checked THEN a named error
    frame = _data().data
    with pytest.raises(errors.InvalidJobError, match=match):
        check_estimate(frame, model="pq", y="y", d="d", ml_g="LogisticRegression",
                       ml_m="LogisticRegression", treatment=1, quantiles=quantiles)  # fmt: skip


def test_from_doubleml_runs_an_unfitted_pq_on_the_fake_stack() -> None:
    # GIVEN an unfitted DoubleML PQ (given splitting) and the same model fitted in-process
    data = _data()
    kw = {"treatment": 0, "quantile": 0.55, "n_folds": 2, "n_rep": 2}
    np.random.seed(8)
    unfitted = dml.DoubleMLPQ(data, LogisticRegression(), LogisticRegression(), **kw)
    np.random.seed(8)
    theirs = dml.DoubleMLPQ(data, LogisticRegression(), LogisticRegression(), **kw).fit()
    # WHEN fanfit.from_doubleml runs it on the fake stack
    ours = fanfit.from_doubleml(unfitted, client=FakeClient())
    # THEN it is fanfit's DoubleMLPQ with DoubleML's numbers
    assert isinstance(ours, fanfit.DoubleMLPQ)
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=TOL)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=TOL)
    # AND a custom kde is refused by name
    custom = dml.DoubleMLPQ(data, LogisticRegression(), LogisticRegression(), kde=lambda u, w: 1.0)
    with pytest.raises(errors.UnsupportedArgumentError, match="kde"):
        fanfit.from_doubleml(custom, client=FakeClient())
