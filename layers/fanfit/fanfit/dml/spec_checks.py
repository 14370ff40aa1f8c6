"""The estimate job spec's checks: everything about a :class:`~fanfit.dml.DMLSpec` decidable
without the data.

One function per concern, each taking the spec (:meth:`fanfit.dml.DMLSpec.validate` calls them in
order): the score (:func:`validate_score`), the column roles (:func:`validate_columns`), the
resampling and score options (:func:`validate_options`), the clusters (:func:`validate_clusters`),
the model-only options (:func:`validate_model_options`: IIVM's subgroups, the weights columns,
LPLR's inner folds, PLR's unit means), the dtypes (:func:`validate_dtypes`), the learners
(:func:`validate_learners`) and ``store_models`` (:func:`validate_store_models`). Here too are the
limits and allowed values they check against (:data:`MAX_N_FOLDS`, :data:`BOOT_METHODS`, ...),
which :mod:`fanfit.dml.spec` re-exports. Each raises :class:`~fanfit.errors.InvalidJobError`;
:func:`validate_learners` raises :class:`~fanfit.errors.InvalidLearnerError` for a learner of the
wrong kind. The model's own rules are its registry entry's ``check_spec``
(:mod:`fanfit.dml.model_checks`).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

from fanfit.dml.model_checks import DMLSpec
from fanfit.dml.models import REGISTRY, model_def
from fanfit.errors import InvalidJobError, InvalidLearnerError
from fanfit.learners import LearnerSpec

# The spec is typed loosely (fanfit.dml.model_checks.DMLSpec): fanfit.dml.spec imports this module,
# and the import graph stays acyclic (tests/unit/test_import_graph.py).

__all__ = [
    "BOOT_METHODS",
    "CRE_APPROACHES",
    "DEFAULT_SUBGROUPS",
    "DTYPES",
    "MAX_CLUSTER_VARS",
    "MAX_N_FOLDS",
    "MAX_N_REP",
    "MAX_N_REP_BOOT",
    "MODEL_COLUMNS",
    "validate_clusters",
    "validate_columns",
    "validate_d_mean",
    "validate_dtypes",
    "validate_inner_folds",
    "validate_learners",
    "validate_model_options",
    "validate_options",
    "validate_score",
    "validate_store_models",
    "validate_subgroups",
    "validate_weights",
]

#: Multiplier bootstrap methods (DoubleML's ``bootstrap(method=...)``).
BOOT_METHODS = ("normal", "Bayes", "wild")

#: Most cluster variables (DoubleML 0.11 implements one- and two-way clustering only).
MAX_CLUSTER_VARS = 2

#: IIVM's subgroups when none are given (DoubleML's ``subgroups=None``): both always takers and
#: never takers may exist.
DEFAULT_SUBGROUPS = {"always_takers": True, "never_takers": True}

_INT_MAX_SEED = 2**32 - 1
#: Most cross-fitting folds a job may ask for (checked before any fold array is allocated).
MAX_N_FOLDS = 100

#: DoubleMLPLPR's correlated-random-effects approaches a ``plr`` job runs with ``d_mean_cols``
#: (:attr:`~fanfit.dml.DMLSpec.approach`).
CRE_APPROACHES = ("cre_normal", "cre_general")
#: Most repetitions of the sample splitting a job may ask for (the folds are (n_obs, n_rep)).
MAX_N_REP = 100
#: Most bootstrap repetitions (the multiplier weights are (n_rep_boot, n_obs) per repetition).
MAX_N_REP_BOOT = 100_000

#: The spec's model-only data columns (a model's ``ModelDef.data_options`` names which it reads):
#: DIDCS's time indicator and SSM's selection indicator; and the weight columns of the models
#: that take DoubleML's ``weights`` (``ModelDef.weights``: APO); the given inner folds of a model
#: with nested sample splitting (option ``n_folds_inner``: LPLR).
MODEL_COLUMNS = (
    "t_col", "s_col", "weights_col", "weights_bar_cols", "inner_folds_cols", "d_mean_cols",
)  # fmt: skip

#: The dtypes a role may compute in (:attr:`~fanfit.dml.DMLSpec.dtypes`); an unrecorded role is
#: float64.
DTYPES = ("float32", "float64")


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def validate_score(spec: DMLSpec) -> None:
    """The model is known and the score one of its scores (``ModelDef.scores``)."""
    valid_scores = model_def(spec.model).scores
    if spec.score not in valid_scores:
        raise InvalidJobError(
            f"Invalid score {spec.score!r} for model {spec.model!r}; valid scores: "
            + ", ".join(repr(s) for s in valid_scores)
            + "."
        )


def validate_columns(spec: DMLSpec) -> None:
    """The column roles: ``y_col``, ``d_cols`` and ``x_cols`` given, every name a non-empty
    string, none listed twice in a role, no column in two roles (:data:`MODEL_COLUMNS` included)."""
    if not isinstance(spec.y_col, str) or not spec.y_col:
        raise InvalidJobError(f"y_col must be a non-empty column name, got {spec.y_col!r}.")
    for name in ("d_cols", "x_cols", "z_cols", "cluster_cols"):
        cols = getattr(spec, name)
        if not isinstance(cols, tuple) or not all(isinstance(c, str) and c for c in cols):
            raise InvalidJobError(f"{name} must be a list of non-empty column names, got {cols!r}.")
        dupes = sorted({c for c in cols if cols.count(c) > 1})
        if dupes:
            raise InvalidJobError(f"{name} lists {', '.join(dupes)} more than once.")
    if not spec.d_cols:
        raise InvalidJobError("d_cols is empty: name at least one treatment column.")
    if not spec.x_cols:
        raise InvalidJobError("x_cols is empty: name at least one covariate column.")
    if spec.s_col is not None and (not isinstance(spec.s_col, str) or not spec.s_col):
        raise InvalidJobError(f"s_col must be a non-empty column name, got {spec.s_col!r}.")
    roles = {
        "y_col": (spec.y_col,),
        "d_cols": spec.d_cols,
        "x_cols": spec.x_cols,
        "z_cols": spec.z_cols,
        "cluster_cols": spec.cluster_cols,
        **{name: spec.model_column(name) for name in MODEL_COLUMNS},
    }
    if spec.t_col is not None and (not isinstance(spec.t_col, str) or not spec.t_col):
        raise InvalidJobError(f"t_col must be a non-empty column name, got {spec.t_col!r}.")
    names = list(roles)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            both = sorted(set(roles[a]) & set(roles[b]))
            if both:
                raise InvalidJobError(
                    f"Column {', '.join(repr(c) for c in both)} is set as both {a} and {b}; "
                    "each column can have one role only."
                )


def validate_options(spec: DMLSpec) -> None:
    """The resampling and score options: ``n_folds``, ``n_rep``, ``seed``, ``trimming_threshold``,
    ``normalize_ipw``, ``n_rep_boot`` and ``boot_method``."""
    if not _is_int(spec.n_folds) or not 2 <= spec.n_folds <= MAX_N_FOLDS:
        raise InvalidJobError(
            f"n_folds must be an integer in [2, {MAX_N_FOLDS}], got {spec.n_folds!r}."
        )
    if not _is_int(spec.n_rep) or not 1 <= spec.n_rep <= MAX_N_REP:
        raise InvalidJobError(f"n_rep must be an integer in [1, {MAX_N_REP}], got {spec.n_rep!r}.")
    if not _is_int(spec.seed) or not 0 <= spec.seed <= _INT_MAX_SEED:
        raise InvalidJobError(f"seed must be an integer in [0, 2**32 - 1], got {spec.seed!r}.")
    t: float = spec.trimming_threshold
    if isinstance(t, bool) or not isinstance(t, numbers.Real) or not 0 < t < 0.5:
        raise InvalidJobError(f"trimming_threshold must be a number in (0, 0.5), got {t!r}.")
    if not isinstance(spec.normalize_ipw, bool):
        raise InvalidJobError(f"normalize_ipw must be true or false, got {spec.normalize_ipw!r}.")
    if not _is_int(spec.n_rep_boot) or not 1 <= spec.n_rep_boot <= MAX_N_REP_BOOT:
        raise InvalidJobError(
            f"n_rep_boot must be an integer in [1, {MAX_N_REP_BOOT:,}], got {spec.n_rep_boot!r}."
        )
    if spec.boot_method is not None and spec.boot_method not in BOOT_METHODS:
        raise InvalidJobError(
            f"boot_method must be one of {', '.join(repr(m) for m in BOOT_METHODS)} or null, "
            f"got {spec.boot_method!r}."
        )


def validate_clusters(spec: DMLSpec) -> None:
    """``cluster_cols``: at most :data:`MAX_CLUSTER_VARS`, no ``boot_method`` with them, and at
    most :data:`MAX_N_FOLDS` cross-fitting folds (``n_folds ** len(cluster_cols)``)."""
    if len(spec.cluster_cols) > MAX_CLUSTER_VARS:
        raise InvalidJobError(
            f"cluster_cols names {len(spec.cluster_cols)} cluster variables "
            f"({', '.join(spec.cluster_cols)}); DoubleML implements one- and two-way clustering "
            f"only: give at most {MAX_CLUSTER_VARS}."
        )
    if spec.cluster_cols and spec.boot_method is not None:
        raise InvalidJobError(
            f"boot_method={spec.boot_method!r} with cluster_cols: the multiplier bootstrap of "
            "clustered data is not implemented; set boot_method to null (the cluster-robust "
            "standard errors and pointwise confidence intervals are computed)."
        )
    if spec.cluster_cols and spec.n_cross_folds > MAX_N_FOLDS:
        raise InvalidJobError(
            f"n_folds={spec.n_folds} with {len(spec.cluster_cols)} cluster variables gives "
            f"{spec.n_cross_folds} cross-fitting folds (n_folds ** len(cluster_cols)), more "
            f"than {MAX_N_FOLDS}; use n_folds of at most {int(MAX_N_FOLDS**0.5)}."
        )


def validate_model_options(spec: DMLSpec) -> None:
    """The model-only options: set only for a model that declares them (``ModelDef.options``,
    ``data_options``, ``transform_options``), then each one's own check."""
    mdef = model_def(spec.model)
    own = (*mdef.options, *mdef.data_options, *mdef.transform_options)
    for option in (
        "subgroups", "treatment_level", "t_col", "in_sample_normalization", "s_col",
        "treatment", "quantile", "n_folds_inner", "n_iterations", "d_mean_cols", "approach",
    ):  # fmt: skip
        if getattr(spec, option) is not None and option not in own:
            owners = [
                name
                for name, m in REGISTRY.items()
                if option in (*m.options, *m.data_options, *m.transform_options)
            ]
            raise InvalidJobError(
                f"{option} is an option of model {' or '.join(repr(o) for o in owners)} only, "
                f"but the model is {spec.model!r}; leave {option} unset."
            )
    validate_subgroups(spec)
    validate_weights(spec, mdef.weights)
    validate_inner_folds(spec)
    validate_d_mean(spec)
    if spec.in_sample_normalization is not None and not isinstance(
        spec.in_sample_normalization, bool
    ):
        raise InvalidJobError(
            f"in_sample_normalization must be true or false, got {spec.in_sample_normalization!r}."
        )


def validate_subgroups(spec: DMLSpec) -> None:
    """IIVM's ``subgroups``: None, or exactly the keys of :data:`DEFAULT_SUBGROUPS` with bools."""
    if spec.subgroups is None:
        return
    keys = set(DEFAULT_SUBGROUPS)
    if not isinstance(spec.subgroups, dict) or set(spec.subgroups) != keys:
        raise InvalidJobError(
            f"subgroups must be an object with exactly the keys always_takers and never_takers, "
            f"e.g. {{'always_takers': False, 'never_takers': True}}; got {spec.subgroups!r}."
        )
    for key in sorted(keys):
        if not isinstance(spec.subgroups[key], bool):
            raise InvalidJobError(
                f"subgroups['{key}'] must be true or false, got {spec.subgroups[key]!r}."
            )


def validate_weights(spec: DMLSpec, takes_weights: bool) -> None:
    """DoubleML's ``weights`` as columns: ``weights_col``, then ``weights_bar_cols``."""
    if spec.weights_col is None and spec.weights_bar_cols is None:
        return
    if not takes_weights:
        owners = [name for name, m in REGISTRY.items() if m.weights]
        raise InvalidJobError(
            f"weights_col and weights_bar_cols are options of model "
            f"{' or '.join(repr(o) for o in owners)} only, but the model is {spec.model!r}; "
            "leave them unset."
        )
    if not isinstance(spec.weights_col, str) or not spec.weights_col:
        raise InvalidJobError(
            f"weights_col must be a non-empty column name, got {spec.weights_col!r}"
            + (" (weights_bar_cols needs it: DoubleML's dict of 'weights' and 'weights_bar')."
               if spec.weights_bar_cols is not None else ".")
        )  # fmt: skip
    bar = spec.weights_bar_cols
    if bar is None:
        return
    if not all(isinstance(c, str) and c for c in bar):
        raise InvalidJobError(f"weights_bar_cols must be column names, got {bar!r}.")
    if len(bar) != spec.n_rep:
        raise InvalidJobError(
            f"weights_bar_cols names {len(bar)} column(s); DoubleML's weights_bar has one "
            f"column per repetition: give n_rep={spec.n_rep}."
        )
    if len(set(bar)) != len(bar):
        raise InvalidJobError(f"weights_bar_cols names a column twice: {list(bar)}.")


def validate_inner_folds(spec: DMLSpec) -> None:
    """``n_folds_inner`` (an integer of at least 2) and ``inner_folds_cols`` (one column per
    repetition and outer fold, only with ``n_folds_inner``)."""
    k = spec.n_folds_inner
    if k is not None and (not _is_int(k) or not 2 <= k <= MAX_N_FOLDS):
        raise InvalidJobError(f"n_folds_inner must be an integer in [2, {MAX_N_FOLDS}], got {k!r}.")
    cols = spec.inner_folds_cols
    if cols is None:
        return
    if k is None:
        raise InvalidJobError(
            "inner_folds_cols needs n_folds_inner (the number of inner folds they hold)."
        )
    if not all(isinstance(c, str) and c for c in cols) or len(set(cols)) != len(cols):
        raise InvalidJobError(f"inner_folds_cols must be distinct column names, got {cols!r}.")
    if len(cols) != spec.n_rep * spec.n_cross_folds:
        raise InvalidJobError(
            f"inner_folds_cols names {len(cols)} column(s); give one per repetition and outer "
            f"fold: n_rep * n_folds = {spec.n_rep * spec.n_cross_folds}."
        )


def validate_d_mean(spec: DMLSpec) -> None:
    """``d_mean_cols``: one distinct column per treatment (a column with two roles is
    refused with the other columns, :func:`validate_columns`); ``approach`` one of
    :data:`CRE_APPROACHES`, with them, and ``'cre_general'`` with one cluster column."""
    cols = spec.d_mean_cols
    if spec.approach is not None and spec.approach not in CRE_APPROACHES:
        raise InvalidJobError(
            f"approach must be one of {', '.join(map(repr, CRE_APPROACHES))}, got "
            f"{spec.approach!r}."
        )
    if cols is None:
        if spec.approach is not None:
            raise InvalidJobError(
                f"approach {spec.approach!r} needs d_mean_cols: one column per treatment "
                "holding its unit mean."
            )
        return
    if spec.approach == "cre_general" and len(spec.cluster_cols) != 1:
        raise InvalidJobError(
            "approach 'cre_general' adjusts ml_m by unit: give the unit id as the one "
            f"cluster column, got cluster_cols={list(spec.cluster_cols)!r}."
        )
    if not all(isinstance(c, str) and c for c in cols) or len(set(cols)) != len(cols):
        raise InvalidJobError(f"d_mean_cols must be distinct column names, got {cols!r}.")
    if len(cols) != spec.n_treat:
        raise InvalidJobError(
            f"d_mean_cols names {len(cols)} column(s); give one per treatment "
            f"({', '.join(spec.d_cols)}), in their order."
        )


def validate_dtypes(spec: DMLSpec) -> None:
    """:attr:`~fanfit.dml.DMLSpec.dtypes`: an object of the spec's roles
    (:attr:`~fanfit.dml.DMLSpec.dtype_roles`) to :data:`DTYPES`."""
    if spec.dtypes is None:
        return
    if not isinstance(spec.dtypes, Mapping):
        raise InvalidJobError(
            f"dtypes must be an object mapping data roles to dtypes, got {spec.dtypes!r}."
        )
    roles = spec.dtype_roles
    for role, dtype in spec.dtypes.items():
        if role not in roles:
            raise InvalidJobError(
                f"dtypes names role {role!r}; the roles of this spec are "
                f"{', '.join(repr(r) for r in roles)}."
            )
        if dtype not in DTYPES:
            raise InvalidJobError(
                f"dtypes[{role!r}] must be {' or '.join(repr(t) for t in DTYPES)}, got {dtype!r}."
            )


def validate_learners(spec: DMLSpec, needed: tuple[str, ...]) -> None:
    """The learners: exactly ``needed`` (:func:`fanfit.dml.spec.required_learners` of the model
    and score), each a :class:`~fanfit.learners.LearnerSpec` of the kind the model's roles ask
    for (``ModelDef.roles``: regressor, classifier or either)."""
    if not isinstance(spec.learners, dict):
        raise InvalidJobError(
            f"learners must be an object mapping ml_* names to learners, got {spec.learners!r}."
        )
    mdef = model_def(spec.model)
    for name in needed:
        if name not in spec.learners:
            raise InvalidJobError(
                f"Model {spec.model!r} with score {spec.score!r} needs learner {name!r} for "
                f"{mdef.purposes[name]}; given: "
                f"{', '.join(sorted(spec.learners)) or 'none'}. Required: {', '.join(needed)}."
            )
    extra = sorted(set(spec.learners) - set(needed))
    if extra:
        raise InvalidJobError(
            f"Model {spec.model!r} with score {spec.score!r} does not use learner(s) "
            f"{', '.join(repr(e) for e in extra)}; it takes exactly {', '.join(needed)}."
        )
    roles = mdef.roles
    for name in needed:
        learner = spec.learners[name]
        if not isinstance(learner, LearnerSpec):
            raise InvalidLearnerError(f"Learner {name} is not a LearnerSpec: {learner!r}.")
        role = roles[name]
        purpose = mdef.purposes[name]
        if role == "regressor" and not learner.is_regressor:
            raise InvalidLearnerError(
                f"Learner {name} ({learner.name}) must be a regressor for model {spec.model!r} "
                f"({purpose}), but {learner.name} is a classifier."
            )
        if role == "classifier" and not learner.is_classifier:
            raise InvalidLearnerError(
                f"Learner {name} ({learner.name}) must be a classifier with predict_proba for model "
                f"{spec.model!r} ({purpose}), but {learner.name} is a regressor."
            )
        if role == "either" and not (learner.is_classifier or learner.is_regressor):
            raise InvalidLearnerError(
                f"Learner {name} ({learner.name}) is neither a regressor nor a classifier."
            )


def validate_store_models(spec: DMLSpec) -> None:
    """``store_models``: a bool, for a model whose units are plain fits, without Torch
    learners (their fitted state needs pickle)."""
    if not isinstance(spec.store_models, bool):
        raise InvalidJobError(f"store_models must be true or false, got {spec.store_models!r}.")
    if not spec.store_models:
        return
    if model_def(spec.model).fold_procedure_for(spec) is not None:
        raise InvalidJobError(
            f"store_models: model {spec.model!r} with score {spec.score!r} fits its nuisances "
            "inside each outer fold, many models per fold; fit without store_models."
        )
    torch = sorted(k for k, v in spec.learners.items() if v.requires_gpu)
    if torch:
        raise InvalidJobError(
            f"store_models: learner(s) {', '.join(torch)} are Torch models, whose fitted "
            "state cannot be stored without pickle; fit without store_models."
        )
