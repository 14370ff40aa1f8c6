"""What the DoubleML parity tests share: learners, tolerance, DoubleML's classes, and the check
that two estimates agree (test_dml_parity.py, test_dml_losses.py, test_dml_clusters.py).

Imported by name (``from doubleml_helpers import ...``): pytest puts tests/unit on ``sys.path``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import doubleml as dml
import numpy as np

#: Relative tolerance of fanfit's estimates against DoubleML's (issue 11: parity at 1e-9).
RTOL = 1e-9
#: The covariates of ``make_frame`` (conftest.py).
X_COLS = [f"x{i}" for i in range(5)]

LIN = "LinearRegression"
LOGIT = "LogisticRegression"
RF_REG = 'RandomForestRegressor:{"n_estimators": 5, "max_depth": 3, "random_state": 42}'
RF_CLF = 'RandomForestClassifier:{"n_estimators": 5, "max_depth": 3, "random_state": 42}'

#: DoubleML's class of each model.
DOUBLEML = {
    "plr": dml.DoubleMLPLR,
    "irm": dml.DoubleMLIRM,
    "pliv": dml.DoubleMLPLIV,
    "iivm": dml.DoubleMLIIVM,
}
#: The models whose DoubleML class takes the propensity options (IPW normalisation, clipping).
PROPENSITY_MODELS = ("irm", "iivm")


def submitted(data: Any, options: Any = None, **keywords: Any) -> tuple[Any, dict[str, Any]]:
    """What a fake client's ``submit_estimate`` runs, as :meth:`fanfit.client.Client.submit_estimate`
    takes it: a CheckedEstimate with the options it was checked with (fanfit's DoubleML classes
    check in DoubleML's dtypes), or the data and the options as keywords (checked here).

    Returns
    -------
    checked : fanfit.client.CheckedEstimate
    options : dict
        The options by name (``sent["folds"]``), for the tests to read.
    """
    from fanfit.client import check_estimate
    from fanfit.client.check import CheckedEstimate

    if isinstance(data, CheckedEstimate):
        assert options is not None and not keywords
        return data, {name: getattr(options, name) for name in options.names()}
    return check_estimate(data, **keywords), keywords


class PartsOnFake:
    """What fanfit's multi-part DoubleML classes call on a stack besides ``submit_estimate``:
    :meth:`fanfit.client.Client.submit_parts_job`, here each part through the fake client's own
    ``submit_estimate`` (``parts_submitted`` records the model and the labels)."""

    def submit_parts_job(
        self, model: str, labels: Any, checked: Any, options: Any, *, selects: Any = None,
        data: Any = None,
    ) -> Any:  # fmt: skip
        if not hasattr(self, "parts_submitted"):
            self.parts_submitted: list[tuple[str, list[str]]] = []
        self.parts_submitted.append((model, list(labels)))
        if selects is not None:
            # parts that select their rows: each runs on what the pipeline derives from the one
            # upload (fanfit.jobs.estimate.data.select_part), with the folds it was checked with
            checked, options = _selected(checked, options, selects, data)
        jobs = [self.submit_estimate(c, options=o) for c, o in zip(checked, options, strict=True)]  # type: ignore[attr-defined]
        return _PartsJob(jobs)


def _selected(checked: Any, options: Any, selects: Any, data: Any) -> tuple[list[Any], list[Any]]:
    """Each part's CheckedEstimate and options on the rows and columns it selects from ``data``
    (``(columns, values)``), as Prepare and CrossFit derive them, with the part's folds."""
    import pandas as pd

    from fanfit.client.check import check_doubleml_estimate
    from fanfit.jobs.estimate.data import select_part

    out_checked, out_options = [], []
    for c, o, select in zip(checked, options, selects, strict=True):
        columns, values = select_part(select, data[0], data[1], list(c.spec.x_cols))
        frame = pd.DataFrame(values, columns=columns)
        given = o.replace(data=frame)
        out_checked.append(check_doubleml_estimate(frame, given))
        out_options.append(given)
    return out_checked, out_options


class _PartsJob:
    def __init__(self, jobs: list[Any]) -> None:
        self.jobs = jobs

    def part(self, index: int, label: str = "") -> Any:
        return self.jobs[index]


def numbered_cols(columns: Iterable[str], prefix: str) -> list[str]:
    """The columns named ``prefix`` or ``prefix<digits>`` (``d``, or ``d1, d2, ...``), in order."""
    return [
        c for c in columns if c == prefix or (c.startswith(prefix) and c[len(prefix) :].isdigit())
    ]


def assert_same_estimate(actual: Any, desired: Any, rtol: float = RTOL) -> None:
    """Assert that two estimates (fanfit's DMLResult, a fitted DoubleML object) agree: ``coef``
    and ``se`` (aggregated over repetitions), ``all_coef`` and ``all_se`` (per repetition), each
    to ``rtol`` relative to ``desired`` and no absolute slack (numpy's ``assert_allclose``)."""
    for name in ("coef", "se", "all_coef", "all_se"):
        np.testing.assert_allclose(
            getattr(actual, name), getattr(desired, name), rtol=rtol, atol=0, err_msg=name
        )


def assert_registry_model_is_doublemls(spec: Any, frame: Any, fit_doubleml: Any) -> None:
    """Assert that a registry model's score, aggregate, fits and losses are DoubleML's.

    ``frame`` (a DataFrame) is validated for ``spec`` and folds are drawn from ``spec.seed``;
    ``fit_doubleml(spec, frame, folds)`` returns DoubleML's object fitted on them with
    ``store_predictions=True`` (:func:`fit_on_folds`). From its
    stored predictions, fanfit's score elements equal its ``psi_elements`` at 1e-12 and the
    aggregate its estimate at 1e-12; fanfit's own unit-by-unit fit
    (:func:`fanfit.dml.estimate_in_process`) gives its estimate, predictions (``ml_m`` clipped as
    DoubleML stores it) and ``nuisance_loss`` at :data:`RTOL` (test_dml_apo.py, test_dml_ssm.py).
    """
    from fanfit.dml import (
        aggregate,
        draw_folds,
        estimate_in_process,
        prediction_keys,
        score_elements,
        validate_data,
    )
    from fanfit.dml.losses import nuisance_loss

    data = validate_data(spec, list(frame.columns), frame.to_numpy())
    folds = draw_folds(data.n_obs, spec.n_folds, spec.n_rep, spec.seed)
    obj = fit_doubleml(spec, frame, folds)

    keys = prediction_keys(spec)
    preds = {k: np.asarray(obj.predictions[k], dtype=np.float64) for k in keys}
    for i_rep in range(spec.n_rep):
        psi_a, psi_b = score_elements(spec, data, preds, i_rep, 0)
        np.testing.assert_allclose(psi_a, obj.psi_elements["psi_a"][:, i_rep, 0], rtol=1e-12)
        np.testing.assert_allclose(psi_b, obj.psi_elements["psi_b"][:, i_rep, 0], rtol=1e-12)
    assert_same_estimate(aggregate(spec, data, folds, preds), obj, rtol=1e-12)
    own = estimate_in_process(spec, data, folds)
    assert_same_estimate(own, obj)
    for key in keys:
        ours = own.predictions[key]
        if key == "ml_m":  # DoubleML stores the propensities clipped
            ours = np.clip(ours, spec.trimming_threshold, 1 - spec.trimming_threshold)
        np.testing.assert_allclose(ours, obj.predictions[key], rtol=RTOL, atol=1e-12, err_msg=key)
    loss = nuisance_loss(spec, data, own.predictions)
    for key in keys:
        np.testing.assert_allclose(loss[key], obj.nuisance_loss[key], rtol=RTOL, err_msg=key)


def assert_fit_is_doublemls(ours: Any, theirs: Any, rtol: float = RTOL) -> None:
    """Assert that a fitted fanfit DoubleML class equals DoubleML's own fit: coef, se, and per
    prediction key the predictions, nuisance targets and nuisance losses."""
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=rtol)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=rtol)
    for key, value in theirs.predictions.items():
        np.testing.assert_allclose(ours.predictions[key], value, rtol=rtol, atol=1e-12)
        np.testing.assert_allclose(ours.nuisance_targets[key], theirs.nuisance_targets[key])
        np.testing.assert_allclose(ours.nuisance_loss[key], theirs.nuisance_loss[key], rtol=rtol)


def fit_on_folds(obj: Any, folds: np.ndarray) -> Any:
    """Fit DoubleML's ``obj`` (built with ``draw_sample_splitting=False``) on fanfit's ``folds``,
    its warnings silenced, with ``store_predictions=True``; returns ``obj``."""
    import warnings

    from fanfit.dml import folds_to_smpls

    obj.set_sample_splitting(folds_to_smpls(folds))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj.fit(store_predictions=True)
    return obj


def assert_same_bootstrap(ours: Any, theirs: Any, method: str, n_rep_boot: int, seed: int) -> None:
    """Bootstrap both fitted objects from the same global ``seed`` and assert that their joint
    confidence intervals agree to :data:`RTOL`."""
    np.random.seed(seed)
    ours.bootstrap(method=method, n_rep_boot=n_rep_boot)
    np.random.seed(seed)
    theirs.bootstrap(method=method, n_rep_boot=n_rep_boot)
    np.testing.assert_allclose(ours.confint(joint=True), theirs.confint(joint=True), rtol=RTOL)


def ipw_kwargs(spec: Any) -> dict[str, Any]:
    """DoubleML's constructor keywords of a spec with the propensity options: ``n_folds``,
    ``n_rep``, ``normalize_ipw``, ``ps_processor_config`` (clipping at ``trimming_threshold``) and
    ``draw_sample_splitting=False`` (the folds come from :func:`fit_on_folds`)."""
    from doubleml.utils import PSProcessorConfig

    return {
        "n_folds": spec.n_folds,
        "n_rep": spec.n_rep,
        "normalize_ipw": spec.normalize_ipw,
        "ps_processor_config": PSProcessorConfig(clipping_threshold=spec.trimming_threshold),
        "draw_sample_splitting": False,
    }
