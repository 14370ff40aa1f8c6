"""Parity of fanfit.dml.scores.lplr with DoubleML 0.11.4's DoubleMLLPLR at 1e-12.

GIVEN DoubleML's own fit (its outer and inner splits, drawn with a fixed NumPy seed), on DoubleML's
LPLR generator (``make_lplr_LZZ2020``, continuous and binary treatment) and on the 401(k) data
(participation ``p401`` by eligibility ``e401``), WHEN each outer fold's nested fits are redone by
:func:`lplr_fold` on the same splits and one repetition is solved by :func:`lplr_solve`, THEN the
outer-fold predictions, coef, se and score are DoubleML's, also with ``n_folds_inner`` other than
``n_folds``.
"""

from __future__ import annotations

from pathlib import Path

import doubleml as dml
import numpy as np
import pandas as pd
import pytest
from doubleml.plm.datasets import make_lplr_LZZ2020
from sklearn.linear_model import LinearRegression, LogisticRegression

from fanfit.dml.folds import draw_inner_smpls, ids_to_inner_smpls, inner_smpls_to_ids
from fanfit.dml.scores.lplr import (
    LPLR_KEYS,
    lplr_fold,
    lplr_score,
    lplr_score_deriv,
    lplr_solve,
)
from fanfit.dml.scores.plm_irm import var_est
from fanfit.errors import InvalidFoldsError, InvalidJobError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

TOL = 1e-12
ROOT = Path(__file__).resolve().parents[2]
SIPP_X = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]


def _close(actual, desired, name):
    np.testing.assert_allclose(actual, desired, rtol=TOL, atol=TOL, err_msg=name)


def _lzz_data(treatment: str, seed: int = 3):
    np.random.seed(seed)
    return make_lplr_LZZ2020(n_obs=400, dim_x=14, alpha=0.5, treatment=treatment)


def _sipp_data():
    frame = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta")
    frame = frame[["p401", "e401", *SIPP_X]].astype(float)
    frame[SIPP_X] = (frame[SIPP_X] - frame[SIPP_X].mean()) / frame[SIPP_X].std()
    return dml.DoubleMLData(frame, "p401", "e401", SIPP_X)


def _redo(obj, m_learner) -> tuple[list, list, list]:
    """Every repetition's predictions, coef, se and psi as fanfit computes them on obj's splits."""
    data = obj._dml_data
    x, y, d = (np.asarray(v, dtype=float) for v in (data.x, data.y, data.d))
    proba = m_learner is LogisticRegression
    results = []
    for i_rep in range(obj.n_rep):
        preds = {k: np.full(y.size, np.nan) for k in LPLR_KEYS}
        beta = np.full(y.size, np.nan)
        for i_fold, (train, test) in enumerate(obj.smpls[i_rep]):
            fold = lplr_fold(
                x, y, d, train, test, obj.smpls_inner[i_rep][i_fold], obj.n_folds,
                "nuisance_space", lambda _k: LogisticRegression(), LinearRegression, m_learner,
                lambda _k: m_learner(), proba, proba,
            )  # fmt: skip
            for key, values in fold.preds.items():
                preds[key][test] = values
            beta[test] = fold.beta
        coef, psi, psi_deriv = lplr_solve(
            y, d, preds["ml_m"], preds["ml_a"], preds["ml_t"], beta, "nuisance_space"
        )
        results.append((preds, coef, np.sqrt(var_est(psi, psi_deriv)), psi, psi_deriv))
    return results


@pytest.mark.parametrize(
    ("treatment", "n_folds", "n_folds_inner", "n_rep"),
    [("continuous", 5, 5, 2), ("binary", 3, 4, 1), ("binary", 4, 2, 1)],
)
def test_fold_fits_and_solution_match_doubleml_on_its_generator(
    treatment: str, n_folds: int, n_folds_inner: int, n_rep: int
) -> None:
    # GIVEN DoubleML's LPLR fitted in-process on its generator (its splits and inner splits)
    m_learner = LinearRegression if treatment == "continuous" else LogisticRegression
    data = _lzz_data(treatment)
    theirs = dml.DoubleMLLPLR(
        data, LogisticRegression(), LinearRegression(), m_learner(), n_folds=n_folds,
        n_folds_inner=n_folds_inner, n_rep=n_rep,
    ).fit()  # fmt: skip
    # WHEN fanfit redoes every fold's nested fits on those splits and solves each repetition
    results = _redo(theirs, m_learner)
    # THEN every prediction, coef, se, psi and its derivative are DoubleML's
    for i_rep, (preds, coef, se, psi, psi_deriv) in enumerate(results):
        for key in LPLR_KEYS:
            _close(preds[key], theirs.predictions[key][:, i_rep, 0], f"{key} rep {i_rep}")
        _close(coef, theirs.all_coef[0, i_rep], f"coef rep {i_rep}")
        _close(se, theirs.all_se[0, i_rep], f"se rep {i_rep}")
        _close(psi, theirs.psi[:, i_rep, 0], f"psi rep {i_rep}")
        _close(psi_deriv, theirs.psi_deriv[:, i_rep, 0], f"psi_deriv rep {i_rep}")


def test_fold_fits_and_solution_match_doubleml_on_the_401k_data() -> None:
    # GIVEN DoubleML's LPLR of participation (p401) on eligibility (e401) in the 401(k) data
    # (9,915 rows, standardized covariates), logistic learners for the binary treatment
    np.random.seed(401)
    theirs = dml.DoubleMLLPLR(
        _sipp_data(), LogisticRegression(), LinearRegression(), LogisticRegression(),
        n_folds=3, n_folds_inner=3,
    ).fit()  # fmt: skip
    # WHEN fanfit redoes the folds on DoubleML's splits
    ((preds, coef, se, psi, _),) = _redo(theirs, LogisticRegression)
    # THEN the predictions, coef, se and score are DoubleML's
    for key in LPLR_KEYS:
        _close(preds[key], theirs.predictions[key][:, 0, 0], key)
    _close(coef, theirs.coef[0], "coef")
    _close(se, theirs.se[0], "se")
    _close(psi, theirs.psi[:, 0, 0], "psi")


@pytest.mark.parametrize("score", ["nuisance_space", "instrument"])
def test_score_and_derivative_are_doublemls_at_any_coef(score: str) -> None:
    # GIVEN DoubleML's score elements of a fitted LPLR (its own r_hat and m_hat)
    np.random.seed(7)
    theirs = dml.DoubleMLLPLR(
        _lzz_data("continuous", seed=7), LogisticRegression(), LinearRegression(),
        LinearRegression(), n_folds=3, n_folds_inner=3,
    ).fit()  # fmt: skip
    elements = {k: v[:, 0, 0] for k, v in theirs.psi_elements.items()}
    theirs._score = score  # the score functions branch on it only
    # WHEN fanfit's score and derivative are evaluated at several values of theta
    for coef in (-1.0, 0.0, 0.37, 2.5):
        # THEN they equal DoubleML's _compute_score and _compute_score_deriv
        _close(lplr_score(elements, coef, score), theirs._compute_score(elements, coef), score)
        _close(
            lplr_score_deriv(elements, coef, score),
            theirs._compute_score_deriv(elements, coef),
            f"{score} deriv",
        )


def test_instrument_score_without_weights_and_an_unknown_score_are_refused_by_name() -> None:
    # GIVEN one fold of generated data
    data = _lzz_data("continuous")
    x, y, d = (np.asarray(v, dtype=float) for v in (data.x, data.y, data.d))
    train, test = np.arange(100, y.size), np.arange(100)
    inner = draw_inner_smpls(train, 3, random_state=0)
    builders = (lambda _k: LogisticRegression(), LinearRegression, LinearRegression,
                lambda _k: LinearRegression())  # fmt: skip
    # WHEN the fold runs score 'instrument' without every fold's ml_M weights, or an unknown
    # score, THEN InvalidJobError says why
    with pytest.raises(InvalidJobError, match="every outer fold's ml_M predictions"):
        lplr_fold(x, y, d, train, test, inner, 5, "instrument", *builders, False, False)
    with pytest.raises(InvalidJobError, match="valid scores: 'nuisance_space', 'instrument'"):
        lplr_solve(y, d, y, y, y, y, "IV-type")


def test_drawn_inner_folds_partition_the_training_rows_and_repeat_with_the_seed() -> None:
    # GIVEN an outer fold's training rows
    train = np.arange(3, 103)
    # WHEN inner folds are drawn twice with one seed and once with another
    first, again = draw_inner_smpls(train, 4, 11), draw_inner_smpls(train, 4, 11)
    other = draw_inner_smpls(train, 4, 12)
    # THEN they partition the training rows, repeat with the seed and differ with another
    tests = np.sort(np.concatenate([te for _, te in first]))
    np.testing.assert_array_equal(tests, train)
    for tr, te in first:
        np.testing.assert_array_equal(np.sort(np.concatenate([tr, te])), train)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(first, other, strict=True))
    # ... and go through fold ids and back unchanged (-1 outside the training rows)
    ids = inner_smpls_to_ids(first, 110)
    assert (ids[:3] == -1).all() and (ids[103:] == -1).all()
    back = ids_to_inner_smpls(ids, train, 4)
    for (tr_a, te_a), (tr_b, te_b) in zip(first, back, strict=True):
        np.testing.assert_array_equal(tr_a, tr_b)
        np.testing.assert_array_equal(te_a, te_b)


def test_inner_fold_ids_without_a_fold_for_every_training_row_are_refused() -> None:
    # GIVEN fold ids where a training row has none, and ids leaving an inner fold empty
    train = np.arange(10)
    missing = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, -1])
    empty = np.array([0, 1, 0, 1, 0, 1, 0, 1, 0, 1])
    # WHEN they are read as 3 inner folds THEN InvalidFoldsError names the row or the fold
    with pytest.raises(InvalidFoldsError, match="row 9"):
        ids_to_inner_smpls(missing, train, 3)
    with pytest.raises(InvalidFoldsError, match="Inner fold 2 .* is empty"):
        ids_to_inner_smpls(empty, train, 3)
