"""The estimate job spec: model, score, column roles, resampling and nuisance learners.

Names and defaults are DoubleML 0.11's (``DoubleMLPLR``, ``DoubleMLIRM``, ``DoubleMLPLIV``,
``DoubleMLIIVM``): learners ``ml_l``, ``ml_m``, ``ml_g``, ``ml_r``; scores ``'partialling out'``,
``'IV-type'``, ``'ATE'``, ``'ATTE'``, ``'LATE'``; ``trimming_threshold=0.01`` with the ``'truncate'``
rule, ``normalize_ipw=False``, ``n_folds=5``, ``n_rep=1``, ``n_rep_boot=500``.
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fanfit.dml.external import check_external_predictions, external_columns
from fanfit.dml.models import REGISTRY, model_def
from fanfit.dml.nuisance_params import check_learner_params
from fanfit.errors import InvalidJobError, InvalidLearnerError
from fanfit.learners import LearnerSpec, as_learner_spec

__all__ = [
    "BOOT_METHODS",
    "CRE_APPROACHES",
    "DEFAULT_SUBGROUPS",
    "MAX_CLUSTER_VARS",
    "DEFAULT_SCORE",
    "MODELS",
    "SCORES",
    "DMLSpec",
    "learner_roles",
    "parse_subgroups",
    "required_learners",
]

#: The models, named as fanfit's jobs name them (the :data:`~fanfit.dml.models.REGISTRY` keys).
MODELS = tuple(REGISTRY)

#: Default score per model (DoubleML's constructor defaults).
DEFAULT_SCORE = {name: m.default_score for name, m in REGISTRY.items()}

#: Valid scores per model. PLIV's ``'IV-type'`` needs exactly one instrument (as in DoubleML).
SCORES = {name: m.scores for name, m in REGISTRY.items()}

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
#: (:attr:`DMLSpec.approach`).
CRE_APPROACHES = ("cre_normal", "cre_general")
#: Most repetitions of the sample splitting a job may ask for (the folds are (n_obs, n_rep)).
MAX_N_REP = 100
#: Most bootstrap repetitions (the multiplier weights are (n_rep_boot, n_obs) per repetition).
MAX_N_REP_BOOT = 100_000


def required_learners(model: str, score: str) -> tuple[str, ...]:
    """The learner names (``spec.learners`` keys) a model and score need, in DoubleML's order.

    Parameters
    ----------
    model : str
        One of :data:`MODELS`.
    score : str
        A score valid for ``model``.

    Returns
    -------
    tuple of str
        E.g. ``('ml_l', 'ml_m')`` for PLR with ``'partialling out'``, ``('ml_l', 'ml_m', 'ml_g')``
        for ``'IV-type'`` (the learners of the model's nuisances,
        :attr:`~fanfit.dml.models.ModelDef.nuisances`, with one instrument and every subgroup).

    Raises
    ------
    InvalidJobError
        An unknown model.
    """
    mdef = model_def(model)
    probe = DMLSpec(model, score, "y", ("d",), ("x",), z_cols=("z",), treatment_level=1.0)
    return mdef.required_learners(probe)


def parse_subgroups(value: str | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """IIVM's ``subgroups`` from a dict (DoubleML's form, checked by the spec) or the command
    line's ``"always_takers=false,never_takers=true"`` (``true``/``false``, any case; a key left
    out is true, as in DoubleML's default).

    Returns
    -------
    dict or None
        None for None.

    Raises
    ------
    InvalidJobError
        Naming ``subgroups``: not a dict or string, an unknown key, or a value that is not
        true/false.
    """
    if value is None:
        return None
    if isinstance(value, Mapping):
        return dict(value)
    if not isinstance(value, str):
        raise InvalidJobError(
            "subgroups must be a dict {'always_takers': bool, 'never_takers': bool} or a string "
            f"'always_takers=false,never_takers=true', got {type(value).__name__}"
        )
    out = dict(DEFAULT_SUBGROUPS)
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        key, sep, flag = (t.strip() for t in item.partition("="))
        if not sep or key not in out or flag.lower() not in ("true", "false"):
            raise InvalidJobError(
                f"subgroups: {item!r} is not KEY=true|false with KEY always_takers or "
                "never_takers (e.g. --subgroups always_takers=false)"
            )
        out[key] = flag.lower() == "true"
    return out


def learner_roles(model: str) -> dict[str, str]:
    """``{learner: 'regressor' | 'classifier' | 'either'}`` for a model (see DoubleML's ``_check_learner``)."""
    return dict(model_def(model).roles)


#: The spec's model-only data columns (a model's ``ModelDef.data_options`` names which it reads):
#: DIDCS's time indicator and SSM's selection indicator; and the weight columns of the models
#: that take DoubleML's ``weights`` (``ModelDef.weights``: APO); the given inner folds of a model
#: with nested sample splitting (option ``n_folds_inner``: LPLR).
MODEL_COLUMNS = (
    "t_col", "s_col", "weights_col", "weights_bar_cols", "inner_folds_cols", "d_mean_cols",
)  # fmt: skip

#: The data roles whose dtype a spec records (:attr:`DMLSpec.dtypes`), as DoubleML names its
#: data's arrays: ``y``, ``d``, ``x``, ``z``, ``t`` (DIDCS), ``s`` (SSM).
DTYPE_ROLES = ("y", "d", "x", "z", "t", "s")

#: The dtypes a role may compute in (:attr:`DMLSpec.dtypes`); an unrecorded role is float64.
DTYPES = ("float32", "float64")


def _set_fields(spec: DMLSpec, *names: str) -> dict[str, Any]:
    """The model-only fields among ``names`` that are set (not None), for :meth:`DMLSpec.to_dict`."""
    return {name: getattr(spec, name) for name in names if getattr(spec, name) is not None}


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _as_str_tuple(value: Any) -> Any:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(value)
    return value


def _as_learner(name: str, value: Any) -> Any:
    """A learner of the spec as a :class:`LearnerSpec`: :func:`fanfit.learners.as_learner_spec`
    (a spec, ``'NAME:{json}'``, a dict, or a scikit-learn estimator object), errors naming ``name``."""
    return as_learner_spec(value, name)


@dataclass(frozen=True)
class DMLSpec:
    """Everything an estimate needs except the data and the folds.

    Sequences are stored as tuples and learners as :class:`~fanfit.learners.LearnerSpec` (strings
    and dicts are parsed on construction). Construction does not check consistency; call
    :meth:`validate` (:meth:`from_dict` does).

    Parameters
    ----------
    model : str
        ``'plr'``, ``'irm'``, ``'pliv'`` or ``'iivm'``.
    score : str
        See :data:`SCORES`; :data:`DEFAULT_SCORE` gives DoubleML's default.
    y_col : str
        Outcome column.
    d_cols : tuple of str
        Treatment column(s). PLR and PLIV estimate one coefficient per treatment, using the other
        treatments as covariates (DoubleML's ``use_other_treat_as_covariate=True``); IRM and IIVM
        need exactly one binary treatment.
    x_cols : tuple of str
        Covariates (at least one).
    z_cols : tuple of str
        Instrument(s): PLIV needs at least one (``'IV-type'`` exactly one), IIVM exactly one binary
        instrument, PLR and IRM none.
    n_folds : int
        Number of cross-fitting folds, 2 to :data:`MAX_N_FOLDS` (100). Default 5.
    n_rep : int
        Number of repetitions of the sample splitting, 1 to :data:`MAX_N_REP` (100). Default 1.
    seed : int
        In ``[0, 2**32 - 1]``; seeds the folds (:func:`~fanfit.dml.draw_folds`), the learners'
        ``random_state`` where the user gave none (:func:`~fanfit.dml.unit_seed`) and the bootstrap.
    learners : dict of str to LearnerSpec
        Keys as DoubleML's constructor arguments: ``ml_l``, ``ml_m``, ``ml_g``, ``ml_r``.
    trimming_threshold : float
        IRM/IIVM propensity clipping to ``[t, 1 - t]`` (DoubleML's ``'truncate'`` rule). Default 0.01.
    normalize_ipw : bool
        IRM/IIVM: normalize the inverse probability weights (Hajek). Default False.
    n_rep_boot : int
        Bootstrap replications when ``boot_method`` is set. Default 500.
    boot_method : str or None
        ``'normal'``, ``'Bayes'``, ``'wild'``, or None for no bootstrap (then no joint intervals).
    cluster_cols : tuple of str
        Cluster variable(s), one or two (DoubleML's ``DoubleMLClusterData(cluster_cols=...)``);
        empty for independent rows. With clusters the folds are drawn per cluster variable
        (:func:`~fanfit.dml.draw_cluster_folds`), there are ``n_folds ** len(cluster_cols)``
        cross-fitting folds (:attr:`n_cross_folds`), and the coefficient and its variance are
        DoubleML's cluster-robust ones (:func:`~fanfit.dml.scores.plm_irm.cluster_est_coef`,
        :func:`~fanfit.dml.scores.plm_irm.cluster_var_est`). Cluster ids must be numeric.
    subgroups : dict or None
        IIVM only: ``{"always_takers": bool, "never_takers": bool}`` (DoubleML's ``subgroups``);
        None means :data:`DEFAULT_SUBGROUPS`. ``always_takers=False`` (one-sided noncompliance:
        nobody with ``z == 0`` is treated) does not fit ``ml_r0`` and sets
        :math:`\\hat r(0, X) = 0`; ``never_takers=False`` does not fit ``ml_r1`` and sets
        :math:`\\hat r(1, X) = 1`.
    treatment_level : float or None
        APO only (DoubleMLAPO's ``treatment_level``): the value of the treatment column whose
        average potential outcome is estimated.
    t_col : str or None
        DIDCS only (DoubleML's ``DoubleMLDIDData(t_col=...)``): the binary time column, 0 before
        and 1 after the treatment (repeated cross-sections).
    in_sample_normalization : bool or None
        DID and DIDCS only (DoubleML's ``in_sample_normalization``): Hajek-normalized weights;
        None means DoubleML's default True.
    s_col : str or None
        SSM only (DoubleMLSSMData's ``s_col``): the binary selection column, 1 where the outcome
        is observed; the outcome is used on those rows only.
    weights_col : str or None
        Models with ``ModelDef.weights`` (APO) only: the column of DoubleMLAPO's ``weights``
        (an array, or the dict's ``'weights'``), non-negative, not all zero.
    weights_bar_cols : tuple of str or None
        With ``weights_col`` only: one column per repetition (``n_rep`` of them) of the dict's
        ``'weights_bar'`` (shape (n_obs, n_rep)); None: ``weights_bar`` is ``weights``.
    n_folds_inner : int or None
        LPLR only (DoubleML's ``n_folds_inner``): the number of inner folds each outer fold's
        training rows are split in, at least 2; None: DoubleML's default, 5.
    inner_folds_cols : tuple of str or None
        LPLR only: given inner folds, one data column per (repetition, outer fold), in the order
        ``i_rep * n_folds + i_fold`` (:attr:`fanfit.dml.DMLData.inner_folds`); None: each fold
        unit draws its own from the seed (:func:`fanfit.dml.folds.unit_inner_smpls`).
    d_mean_cols : tuple of str or None
        PLR only: one column per treatment holding its unit (cluster) mean, which ``ml_m`` sees
        after the covariates and no other learner does (DoubleMLPLPR's ``approach='cre_normal'``:
        ``np.column_stack((x, d_mean))``), or which adjusts ``ml_m``'s predictions
        (``'cre_general'``, :attr:`approach`); None: ``ml_m`` sees the covariates.
    approach : str or None
        PLR with ``d_mean_cols`` only, one of :data:`CRE_APPROACHES` (default ``'cre_normal'``).
        ``'cre_general'``: ``ml_m`` sees the covariates alone and its predictions are adjusted
        by unit, :math:`\\hat m^*_{it} = \\hat m_{it} + \bar D_i - \\overline{\\hat m}_i`
        (:func:`fanfit.dml.scores.plm_irm.cre_general_adjustment`; the unit is the one cluster
        column), before the IV-type score's preliminary estimate and the score, as DoubleMLPLPR
        does.
    treatment : int or None
        PQ and CVaR only (DoubleML's ``treatment``): the treatment level, 0 or 1, whose potential
        quantile (or conditional value at risk) is estimated.
    quantile : float or None
        PQ and CVaR only (DoubleML's ``quantile``): the quantile level, in (0, 1).
    learner_params : dict or None
        DoubleML's nuisance parameters (``set_ml_nuisance_params``, ``tune``):
        ``{nuisance: {treatment column: params}}``, params a dict (every repetition and fold) or
        ``n_rep`` lists of ``n_cross_folds`` dicts; every fit unit's learner gets its fold's
        (:mod:`fanfit.dml.nuisance_params`). None: the learners as given.
    external_predictions_cols : dict or None
        DoubleML's ``external_predictions``: ``{prediction key: {treatment column: [column of
        repetition 0, ...]}}``, data columns holding the out-of-fold predictions that replace
        that nuisance's fits (:mod:`fanfit.dml.external`). None: every nuisance is fitted.
    store_models : bool
        DoubleML's ``fit(store_models=True)``: every unit's fitted estimator is kept beside its
        predictions (:mod:`fanfit.learners.persist`, no pickle). Not for models whose fits nest
        inside the folds, nor Torch learners.
    dtypes : dict of str to str, or None
        The dtype each data role computes in, for the roles where it is not float64. Only jobs
        of fanfit's DoubleML classes set it, to the dtypes DoubleML computes their frame in
        (``{"y": "float32", "x": "float32"}`` for a DoubleMLData of the 401(k) Stata file as
        pandas reads it), so that they equal DoubleML's ``fit()``; a job from a file, an
        ``s3://`` object, a job file or a frame handed to the client computes in float64.
        Keys among :data:`DTYPE_ROLES` (``z``, ``t``, ``s`` only where the spec has those
        columns), values among :data:`DTYPES`; None or a missing role: float64 (the default of
        plans written before this field). The data travel as float64 (float32 values are exact in
        float64); :func:`fanfit.dml.validate_data` casts each role's array to its dtype, so every
        learner, start value, search and score sees the same arrays
        (:func:`fanfit.client.check.check_doubleml_estimate`).
    """

    model: str
    score: str
    y_col: str
    d_cols: tuple[str, ...]
    x_cols: tuple[str, ...]
    z_cols: tuple[str, ...] = ()
    n_folds: int = 5
    n_rep: int = 1
    seed: int = 0
    learners: dict[str, LearnerSpec] = field(default_factory=dict)
    trimming_threshold: float = 0.01
    normalize_ipw: bool = False
    n_rep_boot: int = 500
    boot_method: str | None = None
    cluster_cols: tuple[str, ...] = ()
    subgroups: dict[str, bool] | None = None
    treatment_level: float | None = None
    t_col: str | None = None
    in_sample_normalization: bool | None = None
    s_col: str | None = None
    weights_col: str | None = None
    weights_bar_cols: tuple[str, ...] | None = None
    n_folds_inner: int | None = None
    inner_folds_cols: tuple[str, ...] | None = None
    d_mean_cols: tuple[str, ...] | None = None
    approach: str | None = None
    treatment: int | None = None
    quantile: float | None = None
    dtypes: dict[str, str] | None = None
    learner_params: dict[str, Any] | None = None
    external_predictions_cols: dict[str, dict[str, list[str]]] | None = None
    store_models: bool = False

    def __post_init__(self) -> None:
        for name in ("d_cols", "x_cols", "z_cols", "cluster_cols"):
            value = getattr(self, name)
            object.__setattr__(self, name, () if value is None else _as_str_tuple(value))
        for name in ("weights_bar_cols", "inner_folds_cols", "d_mean_cols"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _as_str_tuple(getattr(self, name)))
        if self.d_mean_cols is not None and self.approach is None:
            object.__setattr__(self, "approach", CRE_APPROACHES[0])
        if isinstance(self.learners, dict):
            object.__setattr__(
                self, "learners", {k: _as_learner(k, v) for k, v in self.learners.items()}
            )
            mdef = REGISTRY.get(self.model) if isinstance(self.model, str) else None
            for name, source in (mdef.learner_copies if mdef is not None else {}).items():
                if self.learners.get(name) is None and self.learners.get(source) is not None:
                    self.learners[name] = self.learners[source]  # DoubleML's clone(source)

    # ------------------------------------------------------------------ derived
    @property
    def n_treat(self) -> int:
        """Number of treatment columns (= number of coefficients)."""
        return len(self.d_cols)

    @property
    def used_cols(self) -> tuple[str, ...]:
        """All columns the estimate reads: :attr:`data_cols`, then the columns of the given
        predictions (:func:`fanfit.dml.external.external_columns`)."""
        return (*self.data_cols, *external_columns(self))

    @property
    def data_cols(self) -> tuple[str, ...]:
        """The data's columns the estimate reads: y, d, x, z, the cluster columns, then the
        model's own (in that order)."""
        return (
            self.y_col, *self.d_cols, *self.x_cols, *self.z_cols, *self.cluster_cols,
            *self.extra_cols, *self.model_column("weights_col"),
            *self.model_column("weights_bar_cols"), *self.model_column("inner_folds_cols"),
            *self.model_column("d_mean_cols"),
        )  # fmt: skip

    def model_column(self, name: str) -> tuple[str, ...]:
        """The column(s) of one of :data:`MODEL_COLUMNS` as a tuple: ``(column,)`` (or the
        columns of ``weights_bar_cols``), or ``()`` unset."""
        value = getattr(self, name)
        if isinstance(value, tuple):
            return value
        return (value,) if isinstance(value, str) and value else ()

    @property
    def extra_cols(self) -> tuple[str, ...]:
        """The further data columns the model's ``data_options`` name (DIDCS: ``t_col``)."""
        mdef = REGISTRY.get(self.model) if isinstance(self.model, str) else None
        options = mdef.data_options if mdef is not None else ()
        return tuple(getattr(self, o) for o in options if getattr(self, o, None) is not None)

    @property
    def n_cross_folds(self) -> int:
        """Number of cross-fitting folds (test sets) per repetition: ``n_folds`` without clusters,
        ``n_folds ** len(cluster_cols)`` with them (DoubleML's ``n_folds`` of a model on
        clustered data; ``n_folds`` is then its ``n_folds_per_cluster``)."""
        return int(self.n_folds ** max(len(self.cluster_cols), 1))

    @property
    def always_takers(self) -> bool:
        """IIVM: whether always takers may exist (``subgroups['always_takers']``, default True)."""
        return bool((self.subgroups or DEFAULT_SUBGROUPS)["always_takers"])

    @property
    def never_takers(self) -> bool:
        """IIVM: whether never takers may exist (``subgroups['never_takers']``, default True)."""
        return bool((self.subgroups or DEFAULT_SUBGROUPS)["never_takers"])

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Check the spec for consistency (everything decidable without the data).

        Raises
        ------
        InvalidJobError
            Unknown model or score; missing, empty, duplicated or overlapping columns; instruments
            missing or not allowed for the model; IRM/IIVM with more than one treatment;
            ``n_folds`` outside ``[2, MAX_N_FOLDS]`` (100), ``n_rep`` outside ``[1, MAX_N_REP]``
            (100), ``seed`` outside ``[0, 2**32 - 1]``,
            ``trimming_threshold`` outside ``(0, 0.5)``, bad ``normalize_ipw``, ``n_rep_boot`` or
            ``boot_method``; more than two ``cluster_cols``, ``boot_method`` with
            ``cluster_cols``, or ``n_folds ** len(cluster_cols)`` above ``MAX_N_FOLDS``;
            ``subgroups`` for a model other than IIVM or not of the form
            ``{"always_takers": bool, "never_takers": bool}``; a learner missing for the model and score (the message names it and
            what it estimates) or one the model does not use; ``dtypes`` not an object of the
            spec's roles (:attr:`dtype_roles`) to ``'float32'``/``'float64'``; ``learner_params``
            not of the form :func:`fanfit.dml.nuisance_params.check_learner_params` checks;
            ``external_predictions_cols`` not of the form
            :func:`fanfit.dml.external.check_external_predictions` checks.
        InvalidLearnerError
            A classifier where the model needs a regressor, or the reverse; a nuisance
            parameter its learner does not have or rejects.
        """
        mdef = model_def(self.model)
        valid_scores = mdef.scores
        if self.score not in valid_scores:
            raise InvalidJobError(
                f"Invalid score {self.score!r} for model {self.model!r}; valid scores: "
                + ", ".join(repr(s) for s in valid_scores)
                + "."
            )
        self._validate_columns()
        self._validate_options()
        self._validate_clusters()
        self._validate_model_options()
        self._validate_dtypes()
        mdef.check_spec(self)
        self._validate_learners()
        check_learner_params(self)
        check_external_predictions(self)
        self._validate_store_models()

    def _validate_columns(self) -> None:
        if not isinstance(self.y_col, str) or not self.y_col:
            raise InvalidJobError(f"y_col must be a non-empty column name, got {self.y_col!r}.")
        for name in ("d_cols", "x_cols", "z_cols", "cluster_cols"):
            cols = getattr(self, name)
            if not isinstance(cols, tuple) or not all(isinstance(c, str) and c for c in cols):
                raise InvalidJobError(
                    f"{name} must be a list of non-empty column names, got {cols!r}."
                )
            dupes = sorted({c for c in cols if cols.count(c) > 1})
            if dupes:
                raise InvalidJobError(f"{name} lists {', '.join(dupes)} more than once.")
        if not self.d_cols:
            raise InvalidJobError("d_cols is empty: name at least one treatment column.")
        if not self.x_cols:
            raise InvalidJobError("x_cols is empty: name at least one covariate column.")
        if self.s_col is not None and (not isinstance(self.s_col, str) or not self.s_col):
            raise InvalidJobError(f"s_col must be a non-empty column name, got {self.s_col!r}.")
        roles = {
            "y_col": (self.y_col,),
            "d_cols": self.d_cols,
            "x_cols": self.x_cols,
            "z_cols": self.z_cols,
            "cluster_cols": self.cluster_cols,
            **{name: self.model_column(name) for name in MODEL_COLUMNS},
        }
        if self.t_col is not None and (not isinstance(self.t_col, str) or not self.t_col):
            raise InvalidJobError(f"t_col must be a non-empty column name, got {self.t_col!r}.")
        names = list(roles)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                both = sorted(set(roles[a]) & set(roles[b]))
                if both:
                    raise InvalidJobError(
                        f"Column {', '.join(repr(c) for c in both)} is set as both {a} and {b}; "
                        "each column can have one role only."
                    )

    def _validate_clusters(self) -> None:
        if len(self.cluster_cols) > MAX_CLUSTER_VARS:
            raise InvalidJobError(
                f"cluster_cols names {len(self.cluster_cols)} cluster variables "
                f"({', '.join(self.cluster_cols)}); DoubleML implements one- and two-way clustering "
                f"only: give at most {MAX_CLUSTER_VARS}."
            )
        if self.cluster_cols and self.boot_method is not None:
            raise InvalidJobError(
                f"boot_method={self.boot_method!r} with cluster_cols: the multiplier bootstrap of "
                "clustered data is not implemented; set boot_method to null (the cluster-robust "
                "standard errors and pointwise confidence intervals are computed)."
            )
        if self.cluster_cols and self.n_cross_folds > MAX_N_FOLDS:
            raise InvalidJobError(
                f"n_folds={self.n_folds} with {len(self.cluster_cols)} cluster variables gives "
                f"{self.n_cross_folds} cross-fitting folds (n_folds ** len(cluster_cols)), more "
                f"than {MAX_N_FOLDS}; use n_folds of at most {int(MAX_N_FOLDS**0.5)}."
            )

    def _validate_model_options(self) -> None:
        mdef = model_def(self.model)
        own = (*mdef.options, *mdef.data_options, *mdef.transform_options)
        for option in (
            "subgroups", "treatment_level", "t_col", "in_sample_normalization", "s_col",
            "treatment", "quantile", "n_folds_inner", "d_mean_cols", "approach",
        ):  # fmt: skip
            if getattr(self, option) is not None and option not in own:
                owners = [
                    name
                    for name, m in REGISTRY.items()
                    if option in (*m.options, *m.data_options, *m.transform_options)
                ]
                raise InvalidJobError(
                    f"{option} is an option of model {' or '.join(repr(o) for o in owners)} only, "
                    f"but the model is {self.model!r}; leave {option} unset."
                )
        self._validate_subgroups()
        self._validate_weights(mdef.weights)
        self._validate_inner_folds()
        self._validate_d_mean()
        if self.in_sample_normalization is not None and not isinstance(
            self.in_sample_normalization, bool
        ):
            raise InvalidJobError(
                "in_sample_normalization must be true or false, got "
                f"{self.in_sample_normalization!r}."
            )

    def _validate_dtypes(self) -> None:
        """:attr:`dtypes`: an object of the spec's roles (:meth:`dtype_roles`) to :data:`DTYPES`."""
        if self.dtypes is None:
            return
        if not isinstance(self.dtypes, Mapping):
            raise InvalidJobError(
                f"dtypes must be an object mapping data roles to dtypes, got {self.dtypes!r}."
            )
        roles = self.dtype_roles
        for role, dtype in self.dtypes.items():
            if role not in roles:
                raise InvalidJobError(
                    f"dtypes names role {role!r}; the roles of this spec are "
                    f"{', '.join(repr(r) for r in roles)}."
                )
            if dtype not in DTYPES:
                raise InvalidJobError(
                    f"dtypes[{role!r}] must be {' or '.join(repr(t) for t in DTYPES)}, got {dtype!r}."
                )

    @property
    def dtype_roles(self) -> tuple[str, ...]:
        """The roles of :data:`DTYPE_ROLES` this spec has data for (``z``, ``t``, ``s`` only with
        their columns)."""
        has = {"z": bool(self.z_cols), "t": self.t_col is not None, "s": self.s_col is not None}
        return tuple(r for r in DTYPE_ROLES if has.get(r, True))

    def dtype(self, role: str) -> str:
        """The dtype role ``role`` computes in (:attr:`dtypes`): ``'float32'`` or ``'float64'``."""
        return (self.dtypes or {}).get(role, "float64")

    def _validate_weights(self, takes_weights: bool) -> None:
        """DoubleML's ``weights`` as columns: ``weights_col``, then ``weights_bar_cols``."""
        if self.weights_col is None and self.weights_bar_cols is None:
            return
        if not takes_weights:
            owners = [name for name, m in REGISTRY.items() if m.weights]
            raise InvalidJobError(
                f"weights_col and weights_bar_cols are options of model "
                f"{' or '.join(repr(o) for o in owners)} only, but the model is {self.model!r}; "
                "leave them unset."
            )
        if not isinstance(self.weights_col, str) or not self.weights_col:
            raise InvalidJobError(
                f"weights_col must be a non-empty column name, got {self.weights_col!r}"
                + (" (weights_bar_cols needs it: DoubleML's dict of 'weights' and 'weights_bar')."
                   if self.weights_bar_cols is not None else ".")
            )  # fmt: skip
        bar = self.weights_bar_cols
        if bar is None:
            return
        if not all(isinstance(c, str) and c for c in bar):
            raise InvalidJobError(f"weights_bar_cols must be column names, got {bar!r}.")
        if len(bar) != self.n_rep:
            raise InvalidJobError(
                f"weights_bar_cols names {len(bar)} column(s); DoubleML's weights_bar has one "
                f"column per repetition: give n_rep={self.n_rep}."
            )
        if len(set(bar)) != len(bar):
            raise InvalidJobError(f"weights_bar_cols names a column twice: {list(bar)}.")

    def _validate_inner_folds(self) -> None:
        """``n_folds_inner`` (an integer of at least 2) and ``inner_folds_cols`` (one column per
        repetition and outer fold, only with ``n_folds_inner``)."""
        k = self.n_folds_inner
        if k is not None and (not _is_int(k) or not 2 <= k <= MAX_N_FOLDS):
            raise InvalidJobError(
                f"n_folds_inner must be an integer in [2, {MAX_N_FOLDS}], got {k!r}."
            )
        cols = self.inner_folds_cols
        if cols is None:
            return
        if k is None:
            raise InvalidJobError(
                "inner_folds_cols needs n_folds_inner (the number of inner folds they hold)."
            )
        if not all(isinstance(c, str) and c for c in cols) or len(set(cols)) != len(cols):
            raise InvalidJobError(f"inner_folds_cols must be distinct column names, got {cols!r}.")
        if len(cols) != self.n_rep * self.n_cross_folds:
            raise InvalidJobError(
                f"inner_folds_cols names {len(cols)} column(s); give one per repetition and outer "
                f"fold: n_rep * n_folds = {self.n_rep * self.n_cross_folds}."
            )

    def _validate_store_models(self) -> None:
        """``store_models``: a bool, for a model whose units are plain fits, without Torch
        learners (their fitted state needs pickle)."""
        if not isinstance(self.store_models, bool):
            raise InvalidJobError(f"store_models must be true or false, got {self.store_models!r}.")
        if not self.store_models:
            return
        if model_def(self.model).fold_procedure_for(self) is not None:
            raise InvalidJobError(
                f"store_models: model {self.model!r} with score {self.score!r} fits its nuisances "
                "inside each outer fold, many models per fold; fit without store_models."
            )
        torch = sorted(k for k, v in self.learners.items() if v.requires_gpu)
        if torch:
            raise InvalidJobError(
                f"store_models: learner(s) {', '.join(torch)} are Torch models, whose fitted "
                "state cannot be stored without pickle; fit without store_models."
            )

    def _validate_d_mean(self) -> None:
        """``d_mean_cols``: one distinct column per treatment (a column with two roles is
        refused with the other columns, :meth:`_validate_columns`); ``approach`` one of
        :data:`CRE_APPROACHES`, with them, and ``'cre_general'`` with one cluster column."""
        cols = self.d_mean_cols
        if self.approach is not None and self.approach not in CRE_APPROACHES:
            raise InvalidJobError(
                f"approach must be one of {', '.join(map(repr, CRE_APPROACHES))}, got "
                f"{self.approach!r}."
            )
        if cols is None:
            if self.approach is not None:
                raise InvalidJobError(
                    f"approach {self.approach!r} needs d_mean_cols: one column per treatment "
                    "holding its unit mean."
                )
            return
        if self.approach == "cre_general" and len(self.cluster_cols) != 1:
            raise InvalidJobError(
                "approach 'cre_general' adjusts ml_m by unit: give the unit id as the one "
                f"cluster column, got cluster_cols={list(self.cluster_cols)!r}."
            )
        if not all(isinstance(c, str) and c for c in cols) or len(set(cols)) != len(cols):
            raise InvalidJobError(f"d_mean_cols must be distinct column names, got {cols!r}.")
        if len(cols) != self.n_treat:
            raise InvalidJobError(
                f"d_mean_cols names {len(cols)} column(s); give one per treatment "
                f"({', '.join(self.d_cols)}), in their order."
            )

    def _validate_subgroups(self) -> None:
        if self.subgroups is None:
            return
        keys = set(DEFAULT_SUBGROUPS)
        if not isinstance(self.subgroups, dict) or set(self.subgroups) != keys:
            raise InvalidJobError(
                f"subgroups must be an object with exactly the keys always_takers and never_takers, "
                f"e.g. {{'always_takers': False, 'never_takers': True}}; got {self.subgroups!r}."
            )
        for key in sorted(keys):
            if not isinstance(self.subgroups[key], bool):
                raise InvalidJobError(
                    f"subgroups['{key}'] must be true or false, got {self.subgroups[key]!r}."
                )

    def _validate_options(self) -> None:
        if not _is_int(self.n_folds) or not 2 <= self.n_folds <= MAX_N_FOLDS:
            raise InvalidJobError(
                f"n_folds must be an integer in [2, {MAX_N_FOLDS}], got {self.n_folds!r}."
            )
        if not _is_int(self.n_rep) or not 1 <= self.n_rep <= MAX_N_REP:
            raise InvalidJobError(
                f"n_rep must be an integer in [1, {MAX_N_REP}], got {self.n_rep!r}."
            )
        if not _is_int(self.seed) or not 0 <= self.seed <= _INT_MAX_SEED:
            raise InvalidJobError(f"seed must be an integer in [0, 2**32 - 1], got {self.seed!r}.")
        t = self.trimming_threshold
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not 0 < t < 0.5:
            raise InvalidJobError(f"trimming_threshold must be a number in (0, 0.5), got {t!r}.")
        if not isinstance(self.normalize_ipw, bool):
            raise InvalidJobError(
                f"normalize_ipw must be true or false, got {self.normalize_ipw!r}."
            )
        if not _is_int(self.n_rep_boot) or not 1 <= self.n_rep_boot <= MAX_N_REP_BOOT:
            raise InvalidJobError(
                f"n_rep_boot must be an integer in [1, {MAX_N_REP_BOOT:,}], got {self.n_rep_boot!r}."
            )
        if self.boot_method is not None and self.boot_method not in BOOT_METHODS:
            raise InvalidJobError(
                f"boot_method must be one of {', '.join(repr(m) for m in BOOT_METHODS)} or null, "
                f"got {self.boot_method!r}."
            )

    def _validate_learners(self) -> None:
        if not isinstance(self.learners, dict):
            raise InvalidJobError(
                f"learners must be an object mapping ml_* names to learners, got {self.learners!r}."
            )
        mdef = model_def(self.model)
        needed = required_learners(self.model, self.score)
        for name in needed:
            if name not in self.learners:
                raise InvalidJobError(
                    f"Model {self.model!r} with score {self.score!r} needs learner {name!r} for "
                    f"{mdef.purposes[name]}; given: "
                    f"{', '.join(sorted(self.learners)) or 'none'}. Required: {', '.join(needed)}."
                )
        extra = sorted(set(self.learners) - set(needed))
        if extra:
            raise InvalidJobError(
                f"Model {self.model!r} with score {self.score!r} does not use learner(s) "
                f"{', '.join(repr(e) for e in extra)}; it takes exactly {', '.join(needed)}."
            )
        roles = mdef.roles
        for name in needed:
            spec = self.learners[name]
            if not isinstance(spec, LearnerSpec):
                raise InvalidLearnerError(f"Learner {name} is not a LearnerSpec: {spec!r}.")
            role = roles[name]
            purpose = mdef.purposes[name]
            if role == "regressor" and not spec.is_regressor:
                raise InvalidLearnerError(
                    f"Learner {name} ({spec.name}) must be a regressor for model {self.model!r} "
                    f"({purpose}), but {spec.name} is a classifier."
                )
            if role == "classifier" and not spec.is_classifier:
                raise InvalidLearnerError(
                    f"Learner {name} ({spec.name}) must be a classifier with predict_proba for model "
                    f"{self.model!r} ({purpose}), but {spec.name} is a regressor."
                )
            if role == "either" and not (spec.is_classifier or spec.is_regressor):
                raise InvalidLearnerError(
                    f"Learner {name} ({spec.name}) is neither a regressor nor a classifier."
                )

    # ------------------------------------------------------------------ (de)serialization
    def to_dict(self) -> dict:
        """JSON-safe dict; :meth:`from_dict` reads it back."""
        return {
            "model": self.model,
            "score": self.score,
            "y_col": self.y_col,
            "d_cols": list(self.d_cols),
            "x_cols": list(self.x_cols),
            "z_cols": list(self.z_cols),
            "n_folds": self.n_folds,
            "n_rep": self.n_rep,
            "seed": self.seed,
            "learners": {k: self.learners[k].to_dict() for k in sorted(self.learners)},
            "trimming_threshold": self.trimming_threshold,
            "normalize_ipw": self.normalize_ipw,
            "n_rep_boot": self.n_rep_boot,
            "boot_method": self.boot_method,
            "cluster_cols": list(self.cluster_cols),
            "subgroups": None if self.subgroups is None else dict(self.subgroups),
        } | _set_fields(self, "treatment_level", "t_col", "in_sample_normalization", "s_col",
                        "weights_col", "treatment", "quantile", "n_folds_inner") | (
            {} if self.weights_bar_cols is None else {"weights_bar_cols": list(self.weights_bar_cols)}
        ) | (
            {} if self.inner_folds_cols is None else {"inner_folds_cols": list(self.inner_folds_cols)}
        ) | (
            {} if self.d_mean_cols is None
            else {"d_mean_cols": list(self.d_mean_cols), "approach": self.approach}
        ) | ({"dtypes": dict(sorted(self.dtypes.items()))} if self.dtypes else {}) | (
            {"learner_params": copy.deepcopy(self.learner_params)} if self.learner_params else {}
        ) | (
            {"external_predictions_cols": copy.deepcopy(self.external_predictions_cols)}
            if self.external_predictions_cols
            else {}
        ) | ({"store_models": True} if self.store_models else {})  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict) -> DMLSpec:
        """Build and :meth:`validate` a spec from a dict such as :meth:`to_dict` writes.

        Optional keys take the dataclass defaults; a missing ``score`` takes
        :data:`DEFAULT_SCORE` of the model. Learners may be spec strings or ``{"name", "params"}``
        objects.

        Raises
        ------
        InvalidJobError
            Not a dict, an unknown key (named), a required key missing, or anything :meth:`validate` raises.
        """
        if not isinstance(d, dict):
            raise InvalidJobError(f"A DML spec must be a JSON object, got {type(d).__name__}.")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise InvalidJobError(
                f"Unknown option(s) {', '.join(repr(u) for u in unknown)}; known options: {', '.join(sorted(known))}."
            )
        for key in ("model", "y_col", "d_cols", "x_cols"):
            if key not in d:
                raise InvalidJobError(f"The DML spec has no {key!r}.")
        kwargs = dict(d)
        if kwargs.get("score") is None:
            kwargs["score"] = DEFAULT_SCORE.get(kwargs["model"], "")
        learners = kwargs.get("learners")
        if learners is not None and not isinstance(learners, dict):
            raise InvalidJobError(
                f"learners must be an object mapping ml_* names to learners, got {learners!r}."
            )
        spec = cls(**kwargs)
        spec.validate()
        return spec
