"""Double/debiased machine learning with repeated cross-fitting, in pure numpy and scikit-learn.

Semantics are DoubleML 0.11.4's (the models of :data:`fanfit.dml.models.REGISTRY`: their scores,
learners, propensity clipping, repeated cross-fitting aggregation, multiplier bootstrap). Cross-fitting is split into independent
:class:`FitUnit` s so that a pipeline can fan them out; :func:`estimate_in_process` runs them all
here. References: Chernozhukov et al. (2018), The Econometrics Journal 21(1), C1-C68; Bach et al.
(2022), "DoubleML - An object-oriented implementation of double machine learning in Python", JMLR 23.
"""

from fanfit.dml.data import DMLData, check_columns, check_noncompliance, validate_data
from fanfit.dml.estimate import aggregate, estimate_in_process, fit_stage, score_elements
from fanfit.dml.external import put_external_predictions
from fanfit.dml.folds import (
    cluster_folds_to_smpls,
    cluster_train_mask,
    draw_cluster_folds,
    draw_folds,
    folds_to_smpls,
    read_folds_csv,
    smpls_to_folds,
    validate_cluster_folds,
    validate_folds,
)
from fanfit.dml.result import DMLResult
from fanfit.dml.spec import (
    BOOT_METHODS,
    CRE_APPROACHES,
    DEFAULT_SCORE,
    DEFAULT_SUBGROUPS,
    MODELS,
    SCORES,
    DMLSpec,
    required_learners,
)
from fanfit.dml.unit_fits import (
    UnitResult,
    fit_predict,
    fit_predict_aux,
    fit_predict_units,
    stage_inputs,
)
from fanfit.dml.units import (
    FitUnit,
    check_preds,
    draw_spec_folds,
    fit_units,
    fold_means,
    fold_scalar_keys,
    init_preds,
    learner_name,
    n_stages,
    prediction_keys,
    put_predictions,
    train_mask,
    unit_seed,
    validate_spec_folds,
)

__all__ = [
    "BOOT_METHODS",
    "CRE_APPROACHES",
    "DEFAULT_SCORE",
    "DEFAULT_SUBGROUPS",
    "MODELS",
    "SCORES",
    "DMLData",
    "DMLResult",
    "DMLSpec",
    "FitUnit",
    "UnitResult",
    "aggregate",
    "check_columns",
    "check_noncompliance",
    "check_preds",
    "cluster_folds_to_smpls",
    "cluster_train_mask",
    "draw_cluster_folds",
    "draw_folds",
    "draw_spec_folds",
    "estimate_in_process",
    "fit_predict",
    "fit_predict_aux",
    "fit_predict_units",
    "fit_stage",
    "fit_units",
    "fold_means",
    "fold_scalar_keys",
    "folds_to_smpls",
    "init_preds",
    "learner_name",
    "n_stages",
    "prediction_keys",
    "put_external_predictions",
    "put_predictions",
    "read_folds_csv",
    "required_learners",
    "score_elements",
    "smpls_to_folds",
    "stage_inputs",
    "train_mask",
    "unit_seed",
    "validate_cluster_folds",
    "validate_data",
    "validate_folds",
    "validate_spec_folds",
]
