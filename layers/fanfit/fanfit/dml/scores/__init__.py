"""The models' orthogonal scores and their solvers, one module per family.

- :mod:`~fanfit.dml.scores.plm_irm`: the scores linear in the parameter (PLR, PLIV, IRM, IIVM,
  APO), their solution, variance and aggregation over repetitions, shared by every family;
- :mod:`~fanfit.dml.scores.did`: difference in differences (DoubleMLDID, DoubleMLDIDCS);
- :mod:`~fanfit.dml.scores.ssm`: sample selection (DoubleMLSSM);
- :mod:`~fanfit.dml.scores.quantile`: PQ, CVaR and QTE;
- :mod:`~fanfit.dml.scores.lpq`: local potential quantiles (DoubleMLLPQ);
- :mod:`~fanfit.dml.scores.lplr`: logistic partially linear regression (DoubleMLLPLR), its nested
  fits, nonlinear score and root search;
- :mod:`~fanfit.dml.scores.rdd`: regression discontinuity with flexible covariates (RDFlex): its
  first stage's design and each fold's weighted fit (rdrobust runs on the client).

This package re-exports :mod:`~fanfit.dml.scores.plm_irm`'s names (``fanfit.dml.scores.est_coef``,
``var_est``, ...), the module ``fanfit.dml.scores`` was before it became a package.
"""

from fanfit.dml.scores.plm_irm import (
    aggregate_coefs_and_ses,
    apo_score_elements,
    clip_propensity,
    cluster_est_coef,
    cluster_var_est,
    cre_general_adjustment,
    est_coef,
    iivm_score_elements,
    irm_score_elements,
    normalize_ipw_weights,
    pliv_score_elements,
    pliv_theta_initial,
    plr_score_elements,
    plr_theta_initial,
    var_est,
)

__all__ = [
    "aggregate_coefs_and_ses",
    "apo_score_elements",
    "clip_propensity",
    "cluster_est_coef",
    "cre_general_adjustment",
    "cluster_var_est",
    "est_coef",
    "iivm_score_elements",
    "irm_score_elements",
    "normalize_ipw_weights",
    "pliv_score_elements",
    "pliv_theta_initial",
    "plr_score_elements",
    "plr_theta_initial",
    "var_est",
]
