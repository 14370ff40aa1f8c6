"""The estimate job spec: model, score, column roles, resampling and nuisance learners.

Names and defaults are DoubleML 0.11's (``DoubleMLPLR``, ``DoubleMLIRM``, ``DoubleMLPLIV``,
``DoubleMLIIVM``): learners ``ml_l``, ``ml_m``, ``ml_g``, ``ml_r``; scores ``'partialling out'``,
``'IV-type'``, ``'ATE'``, ``'ATTE'``, ``'LATE'``; ``trimming_threshold=0.01`` with the ``'truncate'``
rule, ``normalize_ipw=False``, ``n_folds=5``, ``n_rep=1``, ``n_rep_boot=500``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fanfit.dml.external import check_external_predictions, external_columns
from fanfit.dml.models import REGISTRY, model_def
from fanfit.dml.nuisance_params import check_learner_params
from fanfit.dml.spec_checks import (
    BOOT_METHODS,
    CRE_APPROACHES,
    DEFAULT_SUBGROUPS,
    DTYPES,
    MAX_CLUSTER_VARS,
    MAX_N_FOLDS,
    MAX_N_REP,
    MAX_N_REP_BOOT,
    MODEL_COLUMNS,
    validate_clusters,
    validate_columns,
    validate_dtypes,
    validate_learners,
    validate_model_options,
    validate_options,
    validate_score,
    validate_store_models,
)
from fanfit.errors import InvalidJobError
from fanfit.learners import LearnerSpec, as_learner_spec

__all__ = [
    "BOOT_METHODS",
    "CRE_APPROACHES",
    "DEFAULT_SUBGROUPS",
    "MAX_CLUSTER_VARS",
    "DEFAULT_SCORE",
    "DTYPES",
    "MAX_N_FOLDS",
    "MAX_N_REP",
    "MAX_N_REP_BOOT",
    "MODEL_COLUMNS",
    "MODELS",
    "SCORES",
    "DMLSpec",
    "learner_roles",
    "parse_subgroups",
    "required_learners",
]
# BOOT_METHODS, CRE_APPROACHES, DEFAULT_SUBGROUPS, DTYPES, MAX_* and MODEL_COLUMNS are defined in
# fanfit.dml.spec_checks, beside the checks that enforce them, and re-exported here.

#: The models, named as fanfit's jobs name them (the :data:`~fanfit.dml.models.REGISTRY` keys).
MODELS = tuple(REGISTRY)

#: Default score per model (DoubleML's constructor defaults).
DEFAULT_SCORE = {name: m.default_score for name, m in REGISTRY.items()}

#: Valid scores per model. PLIV's ``'IV-type'`` needs exactly one instrument (as in DoubleML).
SCORES = {name: m.scores for name, m in REGISTRY.items()}


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


#: The data roles whose dtype a spec records (:attr:`DMLSpec.dtypes`), as DoubleML names its
#: data's arrays: ``y``, ``d``, ``x``, ``z``, ``t`` (DIDCS), ``s`` (SSM).
DTYPE_ROLES = ("y", "d", "x", "z", "t", "s")


def _set_fields(spec: DMLSpec, *names: str) -> dict[str, Any]:
    """The model-only fields among ``names`` that are set (not None), for :meth:`DMLSpec.to_dict`."""
    return {name: getattr(spec, name) for name in names if getattr(spec, name) is not None}


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
    n_iterations : int or None
        RDFlex only (``RDFlex.fit(n_iterations=...)``): the iterations of the bandwidth
        fitting, one stage each, at least 1; None: DoubleML's default, 2.
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
    n_iterations: int | None = None
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
        validate_score(self)
        validate_columns(self)
        validate_options(self)
        validate_clusters(self)
        validate_model_options(self)
        validate_dtypes(self)
        model_def(self.model).check_spec(self)
        validate_learners(self, required_learners(self.model, self.score))
        check_learner_params(self)
        check_external_predictions(self)
        validate_store_models(self)

    @property
    def dtype_roles(self) -> tuple[str, ...]:
        """The roles of :data:`DTYPE_ROLES` this spec has data for (``z``, ``t``, ``s`` only with
        their columns)."""
        has = {"z": bool(self.z_cols), "t": self.t_col is not None, "s": self.s_col is not None}
        return tuple(r for r in DTYPE_ROLES if has.get(r, True))

    def dtype(self, role: str) -> str:
        """The dtype role ``role`` computes in (:attr:`dtypes`): ``'float32'`` or ``'float64'``."""
        return (self.dtypes or {}).get(role, "float64")

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
                        "weights_col", "treatment", "quantile", "n_folds_inner",
                        "n_iterations") | (
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
