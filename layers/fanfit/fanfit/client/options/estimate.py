"""The options of an estimate job, defined once: :class:`EstimateOptions`, with DoubleML's column
names it takes (:data:`COLUMN_ALIASES`), the models the client runs as several jobs
(:data:`CLIENT_MODELS`) and the nuisance learners' keys (:data:`LEARNER_KEYS`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

from fanfit import dml
from fanfit.client.options.fields import _DATA_HELP, _learner, _option, _Options, _weight
from fanfit.client.options.spec import (
    _as_list,
    build_spec,
    check_apos_options,
    read_learner_params,
    read_mapping_option,
)
from fanfit.client.values import check_budget, check_deadline, check_objective, check_weight
from fanfit.errors import InvalidJobError
from fanfit.sched.sizing import POLICIES

__all__ = ["CLIENT_MODELS", "COLUMN_ALIASES", "LEARNER_KEYS", "EstimateOptions"]


COLUMN_ALIASES = {"y_col": "y", "d_cols": "d", "x_cols": "x", "z_cols": "z", "s_col": "s"}

#: Models the client runs as several registry jobs: ``apos``, one ``apo`` job per level
#: (:mod:`fanfit.client.apos`); ``qte``, one ``pq``/``cvar``/``lpq`` job per quantile and
#: treatment level (:mod:`fanfit.client.qte`).
CLIENT_MODELS = ("apos", "qte")


def _score_help() -> str:
    """``--score``'s help: every model's scores from the registry (the first DoubleML's default),
    then the client models'."""
    from fanfit.dml.models import REGISTRY

    def shown(score: str) -> str:
        return repr(score) if " " in score else score

    scores = [f"{name}: {' | '.join(map(shown, m.scores))}" for name, m in REGISTRY.items()]
    return (
        "; ".join(scores) + " (the first is the default; ssm nonignorable needs --z); apos: APO; "
        "qte: PQ | CVaR | LPQ (default PQ)"
    )


#: The nuisance learners an estimate job names, as DoubleML names them.
#: (LPLR's ``ml_M`` and ``ml_m`` differ in case only: ``--ml-M`` and ``--ml-m`` are two flags.)
LEARNER_KEYS = ("ml_l", "ml_m", "ml_g", "ml_r", "ml_pi", "ml_M", "ml_t", "ml_a")


@dataclass(frozen=True, kw_only=True)
class EstimateOptions(_Options):
    """Every option of an estimate job, named as DoubleML names them (the order of ``--help``).

    Parameters
    ----------
    data : str, path, DataFrame or s3:// URI
        CSV, Parquet or Stata (.dta) file.
    model : str
        :data:`fanfit.dml.MODELS`, the model registry's (:mod:`fanfit.dml.models`), or one of
        :data:`CLIENT_MODELS` (``'apos'``: one ``apo`` job per level, :mod:`fanfit.client.apos`;
        ``'qte'``: one job per quantile and treatment level, :mod:`fanfit.client.qte`).
    score : str, optional
        plr: ``'partialling out'`` | ``'IV-type'``; irm: ``ATE`` | ``ATTE``; iivm: ``LATE``;
        apo: ``APO``; qte: ``PQ`` | ``CVaR`` | ``LPQ`` (DoubleMLQTE's); default DoubleML's.
    y : str
        Outcome column.
    d : str or sequence of str
        Treatment column(s) (comma-separated in a str).
    x : str or sequence of str, optional
        Covariate columns (comma-separated in a str); default None: every column of the data that
        is not y, d or z, as DoubleML's ``x_cols=None`` (resolved by :meth:`with_data_columns`).
    z : str or sequence of str, optional
        Instrument columns (pliv, iivm).
    cluster_cols : str or sequence of str, optional
        One or two cluster columns (numeric ids): DoubleML's ``DoubleMLClusterData`` cluster
        variables; folds are drawn per cluster and the standard errors are cluster-robust.
    s : str, optional
        ssm: the binary selection column (DoubleMLSSMData's ``s_col``), 1 where the outcome is
        observed (required for ssm, refused for the other models).
    weights_col : str, optional
        apo (and apos): the column of DoubleMLAPO's ``weights`` (an array, or the dict's
        ``'weights'``); refused for the other models.
    weights_bar_cols : str or sequence of str, optional
        apo (and apos), with ``weights_col``: the columns of the dict's ``'weights_bar'``, one per
        repetition (``n_rep``).
    ml_l, ml_m, ml_g, ml_r, ml_pi, ml_M, ml_t, ml_a : str, dict, LearnerSpec or estimator, optional
        Nuisance learners (lplr: ``ml_M``, ``ml_t``, ``ml_m`` and optionally ``ml_a``, by default
        ``ml_m``'s): ``"NAME"``, ``"NAME:{json params}"`` or a JSON object from the
        allow-list (:mod:`fanfit.learners`), or a scikit-learn estimator object (a ``Pipeline`` or
        ``GridSearchCV``/``RandomizedSearchCV`` of allowed steps included), converted by
        :func:`fanfit.learners.as_learner_spec`.
    n_folds, n_rep : int
        Folds and repetitions of the cross-fitting.
    n_folds_inner : int, optional
        lplr: the inner folds of each outer fold's training rows (DoubleML's ``n_folds_inner``,
        default 5).
    n_iterations : int, optional
        rdflex: the iterations of the bandwidth fitting, one stage each (``RDFlex.fit``'s
        ``n_iterations``, default 2).
    inner_folds_cols : str or sequence of str, optional
        lplr: given inner folds, one column per repetition and outer fold (``i_rep * n_folds +
        i_fold``), each training row's inner fold and -1 on the fold's test rows; default: each
        fold draws its own from ``seed``.
    seed : int
        Seed of the sample splitting and the learners.
    folds : array or str, optional
        Each row's 0-based test fold, shape (n_obs, n_rep), or a CSV file of it.
    trimming_threshold : float
        Propensity trimming (irm, iivm).
    normalize_ipw : bool
        Normalize the inverse probability weights (irm, iivm), DoubleML's ``normalize_ipw``.
    subgroups : dict or str, optional
        iivm: DoubleML's ``{"always_takers": bool, "never_takers": bool}``, or the command line's
        ``"always_takers=false,never_takers=true"`` (a key left out stays true). Set
        ``always_takers`` false under one-sided noncompliance (nobody with ``z == 0`` treated).
    treatment_level : float, optional
        apo: DoubleMLAPO's ``treatment_level``, the value of the treatment column whose average
        potential outcome is estimated (required for apo, refused for the other models).
    treatment_levels : str or sequence of float, optional
        apos: DoubleMLAPOS's ``treatment_levels`` (``"0,1,2"`` or a list), one ``apo`` job per
        level and their causal contrast against the first (:mod:`fanfit.client.apos`; required
        for apos, refused for the other models; :func:`parse_treatment_levels`).
    t : str, optional
        didcs: the binary time column, 0 before and 1 after the treatment (DoubleML's ``t_col``;
        required for didcs, refused for the other models).
    in_sample_normalization : bool, optional
        did, didcs: DoubleML's ``in_sample_normalization`` (None: its default True); the command
        line's ``--no-in-sample-normalization`` sets it false.
    treatment, quantiles : int; float, str or sequence of float, optional
        pq, cvar, lpq (required there): DoubleML's ``treatment`` (0 or 1) and ``quantile`` in
        (0, 1); ``quantiles`` may be the command line's comma-separated list (one value here).
        qte: DoubleMLQTE's ``quantiles`` (several; ``treatment`` refused, both levels are
        estimated; :mod:`fanfit.client.qte`).
    boot_method : {'normal', 'Bayes', 'wild'}, optional
        Multiplier bootstrap of the joint confidence intervals.
    n_rep_boot : int
        Bootstrap repetitions.
    max_concurrency : int, optional
        Cap on concurrent cross-fitting invocations (default: the account's concurrency on AWS,
        the machine's cores on the local stack).
    sharding : {'auto', 'per-fold', 'per-repetition'}
        ``auto``: shards sized from measured throughput; the others are DoubleML-Serverless's
        fixed layouts.
    units_per_shard : int, optional
        Fixed fits per invocation.
    weight : float
        The job's weight in the fair shares of the account's concurrency, in (0, 100].
    """

    data: Any = _option(help=_DATA_HELP, kind="path")
    model: str = _option("plr", choices=(*dml.MODELS, *CLIENT_MODELS))
    score: str | None = _option(None, help=_score_help())
    y: str = _option(help="outcome column")
    d: str | Sequence[str] = _option(help="treatment column(s), comma-separated", kind="columns")
    x: str | Sequence[str] | None = _option(
        None,
        help="covariate columns, comma-separated; default: every other column of the data "
        "(DoubleML's x_cols=None)",
        kind="columns",
    )
    z: str | Sequence[str] | None = _option(
        None,
        help="instrument column(s) (pliv, iivm, lpq; ssm nonignorable: the one instrument for "
        "selection)",
        kind="columns",
    )
    cluster_cols: str | Sequence[str] | None = _option(
        None,
        kind="columns",
        help="one or two cluster columns (numeric ids): folds drawn per cluster, cluster-robust "
        "standard errors (DoubleML's DoubleMLClusterData)",
    )
    ml_l: Any = _learner("ml_l")
    ml_m: Any = _learner("ml_m")
    ml_g: Any = _learner("ml_g")
    ml_r: Any = _learner("ml_r")
    ml_pi: Any = _learner("ml_pi")
    ml_M: Any = _learner("ml_M")  # noqa: N815 - DoubleMLLPLR's name
    ml_t: Any = _learner("ml_t")
    ml_a: Any = _learner("ml_a")
    n_folds: int = _option(5, kind="int")
    n_rep: int = _option(1, kind="int")
    n_folds_inner: int | None = _option(
        None,
        kind="int",
        help="lplr: inner folds of each outer fold's training rows (DoubleML's n_folds_inner, "
        "default 5)",
    )
    n_iterations: int | None = _option(
        None,
        kind="int",
        help="rdflex: iterations of the bandwidth fitting, one stage each (RDFlex.fit's "
        "n_iterations, default 2)",
    )
    inner_folds_cols: str | Sequence[str] | None = _option(
        None,
        kind="columns",
        metavar="COL[,COL...]",
        help="lplr: given inner folds, one column per repetition and outer fold (in the order "
        "rep 0 fold 0, rep 0 fold 1, ...): each training row's inner fold, -1 on the fold's test "
        "rows (default: drawn from --seed); needs --n-folds-inner and --folds",
    )
    d_mean_cols: str | Sequence[str] | None = _option(
        None,
        kind="columns",
        metavar="COL[,COL...]",
        help="plr: one column per treatment holding its unit mean, which ml_m alone sees after "
        "the covariates (DoubleMLPLPR's approach='cre_normal'), or which adjusts ml_m's "
        "predictions by unit (--approach cre_general)",
    )
    approach: str | None = _option(
        None,
        choices=dml.CRE_APPROACHES,
        help="plr with --d-mean-cols: DoubleMLPLPR's correlated-random-effects approach "
        "(default cre_normal); cre_general adjusts ml_m's predictions by unit, the one "
        "--cluster-cols column",
    )
    seed: int = _option(0, kind="int", help="seed of the sample splitting and learners")
    folds: Any = _option(
        None,
        kind="path",
        help="CSV: one column per repetition, one row per observation, holding the 0-based test "
        "fold of that row",
    )
    trimming_threshold: float = _option(0.01, kind="float")
    normalize_ipw: bool = _option(
        False, kind="bool", help="irm, iivm: normalize the inverse probability weights"
    )
    learner_params: Any = _option(
        None,
        kind="path",
        metavar="FILE",
        help="JSON or YAML: DoubleML's nuisance parameters (set_ml_nuisance_params), "
        "{nuisance: {treatment column: params}}, params one object for every fold or n_rep "
        "lists of n_folds objects",
    )
    store_models: bool = _option(
        False,
        kind="bool",
        help="keep every fit's estimator beside its predictions (DoubleML's store_models; "
        "skops, no pickle): EstimateJob.models()",
    )
    external_predictions_cols: Any = _option(
        None,
        kind="path",
        metavar="FILE",
        help="JSON or YAML: DoubleML's external predictions as data columns, {prediction key: "
        "{treatment column: [column of each repetition]}}; those nuisances are not fitted",
    )
    subgroups: str | Mapping[str, bool] | None = _option(
        None,
        metavar="always_takers=BOOL,never_takers=BOOL",
        help="iivm: which subgroups exist (default both true); always_takers=false under "
        "one-sided noncompliance (nobody with z=0 treated)",
    )
    treatment_level: float | None = _option(
        None,
        kind="float",
        help="apo: the treatment value whose average potential outcome is estimated",
    )
    treatment_levels: str | Sequence[float] | None = _option(
        None,
        kind="numbers",
        metavar="L[,L...]",
        help="apos: the treatment values whose average potential outcomes are estimated, one apo "
        "job per level, and contrasted with the first (DoubleMLAPOS's treatment_levels)",
    )
    t: str | None = _option(
        None, help="didcs: the binary time column (0 before, 1 after; DoubleML's t_col)"
    )
    in_sample_normalization: bool | None = _option(
        None,
        kind="bool",
        help="did, didcs: normalized (Hajek) weights, DoubleML's default; "
        "--no-in-sample-normalization for the unnormalized ones",
    )
    s: str | None = _option(
        None, help="ssm: the binary selection column (1 where the outcome is observed)"
    )
    weights_col: str | None = _option(
        None,
        metavar="COLUMN",
        help="apo, apos: the column of DoubleMLAPO's weights (non-negative; default all 1)",
    )
    weights_bar_cols: str | Sequence[str] | None = _option(
        None,
        kind="columns",
        metavar="COL[,COL...]",
        help="apo, apos: DoubleMLAPO's weights_bar, one column per repetition (needs --weights-col)",
    )
    treatment: int | None = _option(
        None, kind="int", help="pq, cvar, lpq: the treatment level (0 or 1) of the quantile"
    )
    quantiles: str | float | Sequence[float] | None = _option(
        None,
        kind="numbers",
        metavar="Q[,Q...]",
        help="pq, cvar, lpq: the quantile level, a number in (0, 1); qte: the quantile levels of "
        "the effects, comma-separated, one pair of jobs (treatment 0 and 1) each",
    )
    boot_method: str | None = _option(None, choices=("normal", "Bayes", "wild"))
    n_rep_boot: int = _option(500, kind="int")
    max_concurrency: int | None = _option(
        None, kind="int", help="cap on concurrent cross-fitting invocations"
    )
    sharding: str = _option(
        "auto",
        choices=POLICIES,
        help="auto: sized from measured throughput (a probe wave first); per-fold / "
        "per-repetition: DoubleML-Serverless's fixed layouts",
    )
    units_per_shard: int | None = _option(None, kind="int", help="fixed fits per invocation")
    weight: float = _weight()
    deadline: float | None = _option(
        None,
        kind="float",
        metavar="SECONDS",
        help="placement: the least cost whose predicted time is within SECONDS (default: the "
        "least cost within 5 percent of the fastest plan's time)",
        check=check_deadline,
    )
    budget: float | None = _option(
        None,
        kind="float",
        metavar="USD",
        help="placement: the least time whose predicted cost is within USD",
        check=check_budget,
    )

    @classmethod
    def from_keywords(cls, **kwargs: Any) -> Self:
        """Options from keywords, taking DoubleML's ``DoubleMLData`` names as aliases.

        ``y_col``, ``d_cols``, ``x_cols`` and ``z_cols`` (:data:`COLUMN_ALIASES`) stand for ``y``,
        ``d``, ``x`` and ``z``, so that a DoubleML user's column arguments work as they are.

        Raises
        ------
        InvalidJobError
            An option given under both its names (``y`` and ``y_col``).
        TypeError
            An unknown keyword, or ``y`` or ``d`` missing (the dataclass's own check).
        """
        for alias, name in COLUMN_ALIASES.items():
            if alias not in kwargs:
                continue
            if name in kwargs:
                raise InvalidJobError(
                    f"{name} and {alias} name the same option (DoubleML's {alias} is fanfit's "
                    f"{name}); give one of them, not both"
                )
            kwargs[name] = kwargs.pop(alias)
        return cls(**kwargs)

    def with_data_columns(self, columns: Sequence[str]) -> Self:
        """These options with ``x`` defaulted from the data's columns, as DoubleML's ``x_cols=None``.

        Parameters
        ----------
        columns : sequence of str
            The data's columns, in order.

        Returns
        -------
        EstimateOptions
            Unchanged when ``x`` is given; else ``x`` is every column not named as y, d, z (or a
            cluster column), in the data's order.

        Raises
        ------
        InvalidJobError
            ``x`` is None and no column is left for it.
        """
        if self.x is not None:
            return self
        taken = {self.y, *_as_list(self.d), *_as_list(self.z), *_as_list(self.s)}
        taken.update(_as_list(getattr(self, "cluster_cols", None)))
        taken.update(_as_list(getattr(self, "t", None)))
        taken.update(_as_list(self.weights_col) + _as_list(self.weights_bar_cols))
        taken.update(_as_list(self.inner_folds_cols) + _as_list(self.d_mean_cols))
        taken.update(_external_columns(self.external_predictions_cols))
        x = [str(c) for c in columns if str(c) not in taken]
        if not x:
            raise InvalidJobError(
                "x is not given and the data has no column besides y, d and z to use as covariates; "
                "name the covariate columns with x"
            )
        return self.replace(x=x)

    @property
    def learners(self) -> dict[str, Any]:
        """``{"ml_l": ..., "ml_m": ..., "ml_g": ..., "ml_r": ...}``."""
        return {k: getattr(self, k) for k in LEARNER_KEYS}

    def build_spec(self) -> tuple[dml.DMLSpec, list[str]]:
        """The validated spec and the columns it uses: :func:`build_spec` of these options.

        Raises
        ------
        InvalidJobError
            Also ``model='apos'`` (a job per level: :func:`fanfit.client.apos.submit_apos`),
            ``model='qte'`` (:func:`fanfit.client.qte.submit_qte`) and ``treatment_levels`` on
            another model (:func:`check_apos_options`).
        """
        check_apos_options(self.model, self.treatment_levels)
        return build_spec(
            y=self.y, d=self.d, x=self.x, z=self.z, model=self.model, score=self.score,
            learners=self.learners, n_folds=self.n_folds, n_rep=self.n_rep, seed=self.seed,
            trimming_threshold=self.trimming_threshold, boot_method=self.boot_method,
            n_rep_boot=self.n_rep_boot, cluster_cols=self.cluster_cols,
            normalize_ipw=self.normalize_ipw, subgroups=self.subgroups,
            treatment_level=self.treatment_level,
            t=self.t, in_sample_normalization=self.in_sample_normalization, s_col=self.s,
            weights_col=self.weights_col, weights_bar_cols=self.weights_bar_cols,
            treatment=self.treatment, quantiles=self.quantiles, n_folds_inner=self.n_folds_inner,
            n_iterations=self.n_iterations,
            inner_folds_cols=self.inner_folds_cols, d_mean_cols=self.d_mean_cols,
            approach=self.approach,
            learner_params=read_learner_params(self.learner_params),
            store_models=self.store_models,
            external_predictions_cols=read_mapping_option(
                "external_predictions_cols", self.external_predictions_cols
            ),
        )  # fmt: skip

    def check(self) -> tuple[dml.DMLSpec, list[str], float]:
        """Check every option without reading the data.

        In order: the spec (:func:`build_spec`), ``sharding``, ``max_concurrency`` and
        ``units_per_shard``, ``deadline`` and ``budget`` (:func:`check_objective`), then
        ``weight`` (:func:`fanfit.limits.check_weight`).

        Returns
        -------
        (spec, columns, weight) : DMLSpec, list of str, float

        Raises
        ------
        InvalidJobError, fanfit.errors.InvalidLearnerError
            Naming the option.
        """
        spec, columns = self.build_spec()
        if self.sharding not in POLICIES:
            raise InvalidJobError(
                f"sharding must be one of {', '.join(POLICIES)}; got {self.sharding!r}"
            )
        for name in ("max_concurrency", "units_per_shard"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise InvalidJobError(f"{name} must be an integer of at least 1, got {value!r}")
        check_objective(self.deadline, self.budget)
        return spec, columns, check_weight(self.weight)


def _external_columns(value: Any) -> list[str]:
    """The columns an ``external_predictions_cols`` object names (none for a file or a
    malformed object: the spec's check names what is wrong)."""
    if not isinstance(value, Mapping):
        return []
    return [str(c) for by_treat in value.values() if isinstance(by_treat, Mapping)
            for cols in by_treat.values() if isinstance(cols, list | tuple) for c in cols]  # fmt: skip
