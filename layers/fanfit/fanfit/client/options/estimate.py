"""User options: the estimate options defined once (:class:`EstimateOptions`), and type checks.

:class:`EstimateOptions` holds every option of an estimate job with its type, default, help text,
command-line flag and check: :meth:`fanfit.client.Client.submit_estimate`,
:func:`fanfit.client.check_estimate`, the ``fanfit estimate`` parser (built from it by
:func:`fanfit.cli.estimate.add_parser`), its ``--config`` job files (:mod:`fanfit.cli.config`) and
``--dry-run`` all read it, so an option is added or changed here only.

The spec builders (:func:`build_spec`, :func:`fanfit.client.train.build_train_spec`) take options
from Python callers, the CLI and YAML configs; a value of the wrong type (``learners=0``, ``d=0``,
``lr=None``, ``features=0``) must be a named :class:`fanfit.errors.InvalidJobError` naming the
option, never a ``TypeError`` or ``AttributeError`` from deep inside.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from fanfit import dml, limits
from fanfit.client.values import (
    check_budget,
    check_columns,
    check_deadline,
    check_int,
    check_learners,
    check_number,
    check_objective,
    check_str,
    check_weight,
    shown_value,
)
from fanfit.dml.fold_procedures import one_quantile, parse_quantiles
from fanfit.dml.spec import parse_subgroups
from fanfit.errors import InvalidJobError
from fanfit.sched.sizing import POLICIES

__all__ = [
    "CLIENT_MODELS",
    "COLUMN_ALIASES",
    "LEARNER_KEYS",
    "EstimateOptions",
    "OptionInfo",
    "TrainOptions",
    "build_spec",
    "check_apos_options",
    "check_columns",
    "check_int",
    "check_learners",
    "check_number",
    "check_str",
    "check_budget",
    "check_deadline",
    "check_objective",
    "check_weight",
    "parse_treatment_levels",
    "read_learner_params",
]


COLUMN_ALIASES = {"y_col": "y", "d_cols": "d", "x_cols": "x", "z_cols": "z", "s_col": "s"}

#: Models the client runs as several registry jobs: ``apos``, one ``apo`` job per level
#: (:mod:`fanfit.client.apos`); ``qte``, one ``pq``/``cvar``/``lpq`` job per quantile and
#: treatment level (:mod:`fanfit.client.qte`).
CLIENT_MODELS = ("apos", "qte")

#: The nuisance learners an estimate job names, as DoubleML names them.
#: (LPLR's ``ml_M`` and ``ml_m`` differ in case only: ``--ml-M`` and ``--ml-m`` are two flags.)
LEARNER_KEYS = ("ml_l", "ml_m", "ml_g", "ml_r", "ml_pi", "ml_M", "ml_t", "ml_a")


@dataclass(frozen=True)
class OptionInfo:
    """How one option is shown and checked outside Python: its flag, help, parsing and check.

    Attributes
    ----------
    name : str
        The keyword (``n_folds``); also the config-file key and the argparse destination.
    default : Any
        The default (:data:`dataclasses.MISSING` for a required option).
    help : str or None
        The flag's help text.
    kind : str
        ``'str'``, ``'int'``, ``'float'``, ``'bool'`` (a flag without a value), ``'columns'``
        (one name or a list), ``'ints'`` (one integer, a list, or ``"1,2,3"``), ``'numbers'`` (one
        number, a list, or ``"0.25,0.5"``), ``'learner'`` or
        ``'path'`` (a file; relative to a config file's directory).
    choices : tuple or None
        The values the command line and config files accept.
    metavar : str or None
        The flag's metavar.
    check : callable or None
        A range check ``check(value, name) -> value`` run on the command line and config files
        with the flag or the key as ``name`` (``weight``: :func:`fanfit.limits.check_weight`).
    """

    name: str
    default: Any
    help: str | None = None
    kind: str = "str"
    choices: tuple[Any, ...] | None = None
    metavar: str | None = None
    check: Callable[[Any, str], Any] | None = None

    @property
    def flag(self) -> str:
        """The long flag: ``--n-folds`` for ``n_folds``."""
        return "--" + self.name.replace("_", "-")

    @property
    def required(self) -> bool:
        """Whether the option has no default."""
        return self.default is dataclasses.MISSING


def _option(
    default: Any = dataclasses.MISSING,
    *,
    help: str | None = None,  # noqa: A002 - argparse's name
    kind: str = "str",
    choices: Sequence[Any] | None = None,
    metavar: str | None = None,
    check: Callable[[Any, str], Any] | None = None,
) -> Any:
    """A field of :class:`EstimateOptions` with its :class:`OptionInfo` (name filled in later)."""
    info = {"help": help, "kind": kind, "choices": None if choices is None else tuple(choices),
            "metavar": metavar, "check": check}  # fmt: skip
    return field(default=default, metadata={"option": info})


def _weight() -> Any:
    return _option(
        limits.DEFAULT_WEIGHT,
        kind="float",
        metavar="W",
        help="the job's weight in the fair shares of the account's concurrency when jobs run at "
        "once: a number in (0, 100], default 1",
        check=limits.check_weight,
    )


#: ``--data`` of every job kind.
_DATA_HELP = "CSV, Parquet or Stata (.dta) file, or s3:// URI"


def _learner(name: str) -> Any:
    return _option(
        None,
        kind="learner",
        metavar="SPEC",
        help=f"learner {name}: a scikit-learn class name, optionally NAME:{{json params}}, or a "
        'JSON object such as {"name": "Pipeline", "params": {"steps": ["StandardScaler", "Lasso"]}}',
    )


class _Options:
    """What an options model gives its users: its options' :class:`OptionInfo` and names."""

    @classmethod
    def infos(cls) -> tuple[OptionInfo, ...]:
        """Every option's :class:`OptionInfo`, in the order of the fields (and of ``--help``)."""
        return tuple(
            OptionInfo(name=f.name, default=f.default, **f.metadata["option"])
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The options' names, in order."""
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


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
    score: str | None = _option(
        None,
        help="plr: 'partialling out' | 'IV-type'; irm: ATE | ATTE; iivm: LATE; apo: APO; "
        "ssm: missing-at-random | nonignorable (with --z); qte: PQ | CVaR | LPQ (default PQ)",
    )
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
    inner_folds_cols: str | Sequence[str] | None = _option(
        None,
        kind="columns",
        metavar="COL[,COL...]",
        help="lplr: given inner folds, one column per repetition and outer fold (in the order "
        "rep 0 fold 0, rep 0 fold 1, ...): each training row's inner fold, -1 on the fold's test "
        "rows (default: drawn from --seed); needs --n-folds-inner and --folds",
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
        taken.update(_as_list(self.inner_folds_cols))
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
            inner_folds_cols=self.inner_folds_cols,
            learner_params=read_learner_params(self.learner_params),
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


@dataclass(frozen=True, kw_only=True)
class TrainOptions(_Options):
    """Every option of a train job (the order of ``--help``); the spec is built from them by
    :func:`fanfit.client.train.build_train_spec`, whose parameters they are, plus ``data`` and
    ``weight`` (see :func:`fanfit.client.train.submit_train`)."""

    data: Any = _option(help=_DATA_HELP, kind="path")
    model: str = _option(help="kmeans | logreg | linreg | mlp")
    features: str | Sequence[str] = _option(help="feature columns, comma-separated", kind="columns")
    target: str | None = _option(
        None, help="target column (logreg, mlp: class labels; linreg: values)"
    )
    hidden: str | Sequence[int] | None = _option(
        None, metavar="H[,H...]", help="mlp: hidden layer widths, e.g. 256,256,256"
    )
    workers: int = _option(4, kind="int", help="workers per round (1..40)")
    worker_memory: int | str | Sequence[int] | None = _option(
        None,
        kind="ints",
        metavar="MB[,MB...]",
        help="memory of every worker, or one per worker (e.g. 1769,1769,885,885)",
    )
    gpu_workers: int = _option(
        0, kind="int", help="how many of the workers run on the GPU worker (AWS Batch)"
    )
    global_batch: int | None = _option(
        None, kind="int", help="samples per SGD round, split over the workers"
    )
    rounds: int = _option(10, kind="int", help="most rounds")
    balance: str = _option(
        "uniform", help="uniform | lb-bsp (Chen et al. 2021) | static (--worker-batches)"
    )
    worker_batches: str | Sequence[int] | None = _option(
        None,
        kind="ints",
        metavar="B[,B...]",
        help="static: each worker's batch, summing to --global-batch",
    )
    sync: str = _option("bsp", help="bsp | ds-sync (Wang et al. 2020)")
    group_size: int = _option(2, kind="int", help="DS-Sync group size")
    n_clusters: int | None = _option(None, kind="int", help="K-Means' k")
    lr: float = _option(0.1, kind="float", help="SGD learning rate")
    l2: float = _option(0.0, kind="float", help="SGD L2 penalty")
    tol: float = _option(
        0.0, kind="float", help="K-Means: absolute tolerance on the squared centre shift"
    )
    seed: int = _option(0, kind="int")
    standardize: bool = _option(False, kind="bool", help="scale features to unit variance")
    weight: float = _weight()

    def spec_options(self) -> dict[str, Any]:
        """The options of :func:`fanfit.client.train.build_train_spec`: all but ``data`` and
        ``weight``."""
        return {k: getattr(self, k) for k in self.names() if k not in ("data", "weight")}


# ---------------------------------------------------------------- apos (fanfit.client.apos)
def parse_treatment_levels(value: Any, name: str = "treatment_levels") -> tuple[float, ...]:
    """DoubleMLAPOS's ``treatment_levels`` from ``"0,1,2"`` or a sequence of numbers.

    Parameters
    ----------
    value : str or sequence of numbers
        Comma-separated levels (the command line's and job files' form), or a list or tuple.
    name : str
        The option's name in the messages.

    Returns
    -------
    tuple of float
        The levels, in the given order.

    Raises
    ------
    InvalidJobError
        Naming ``name``: nothing given, a level that is not a finite number, or a level given
        twice (DoubleML's ``treatment_levels`` must be unique).
    """
    if isinstance(value, str):
        items: list[Any] = [v.strip() for v in value.split(",")]
    elif isinstance(value, Sequence) or hasattr(value, "tolist"):
        items = list(value.tolist() if hasattr(value, "tolist") else value)
    else:
        items = [value]
    if not items or items == [""]:
        raise InvalidJobError(f"{name} must name at least one treatment level, e.g. 0,1,2")
    levels: list[float] = []
    for item in items:
        if isinstance(item, str):
            try:
                level = float(item)
            except ValueError:
                level = math.nan
        elif isinstance(item, numbers.Real) and not isinstance(item, bool):
            level = float(item)
        else:
            level = math.nan
        if not math.isfinite(level):
            raise InvalidJobError(
                f"{name} must be numbers separated by commas, e.g. 0,1,2; {shown_value(item)} is not "
                "a finite number"
            )
        if level in levels:
            raise InvalidJobError(f"{name} names level {level:g} twice; give each level once")
        levels.append(level)
    return tuple(levels)


def check_apos_options(model: Any, treatment_levels: Any) -> None:
    """``treatment_levels`` belongs to model ``apos``, which is not one job.

    Raises
    ------
    InvalidJobError
        ``treatment_levels`` given with another model, or ``model='apos'`` or ``'qte'`` given to
        a single job's spec (:func:`fanfit.client.apos.submit_apos` runs apos, one ``apo`` job
        per level; :func:`fanfit.client.qte.submit_qte` runs qte).
    """
    if model == "qte":
        raise InvalidJobError(
            "model 'qte' runs one 'pq', 'cvar' or 'lpq' job per quantile and treatment level: "
            "submit it with fanfit.client.qte.submit_qte (fanfit estimate --model qte), or use "
            "fanfit.DoubleMLQTE"
        )
    if model == "apos":
        raise InvalidJobError(
            "model 'apos' runs one 'apo' job per treatment level: submit it with "
            "fanfit.client.apos.submit_apos (fanfit estimate --model apos), or use "
            "fanfit.DoubleMLAPOS"
        )
    if treatment_levels is not None:
        raise InvalidJobError(
            "treatment_levels is an option of model 'apos' only (model 'apo' takes one "
            "treatment_level)"
        )


def _as_list(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [c.strip() for c in value.split(",") if c.strip()]
    return [str(c) for c in value]


def build_spec(
    *,
    y: str,
    d: str | Sequence[str],
    x: Sequence[str] | str | None,
    z: str | Sequence[str] | None,
    model: str,
    score: str | None,
    learners: Mapping[str, Any],
    n_folds: int,
    n_rep: int,
    seed: int,
    trimming_threshold: float = 0.01,
    boot_method: str | None = None,
    n_rep_boot: int = 500,
    cluster_cols: str | Sequence[str] | None = None,
    normalize_ipw: bool = False,
    subgroups: str | Mapping[str, Any] | None = None,
    treatment_level: float | None = None,
    t: str | None = None,
    in_sample_normalization: bool | None = None,
    s_col: str | None = None,
    weights_col: str | None = None,
    weights_bar_cols: str | Sequence[str] | None = None,
    treatment: int | None = None,
    quantiles: str | float | Sequence[float] | None = None,
    n_folds_inner: int | None = None,
    inner_folds_cols: str | Sequence[str] | None = None,
    learner_params: Mapping[str, Any] | None = None,
) -> tuple[dml.DMLSpec, list[str]]:
    """Build and validate a :class:`fanfit.dml.DMLSpec` from user options.

    ``subgroups`` may be a dict (DoubleML's, both keys) or the command line's string
    (:func:`parse_subgroups`).

    Returns
    -------
    (spec, columns) : DMLSpec, list of str
        The spec and the data columns it uses (y, d, x, z, then the cluster columns).

    Raises
    ------
    fanfit.errors.InvalidJobError, InvalidLearnerError
        Also for an option of the wrong type (``learners=0``, ``d=0``), naming it.
    """
    check_str("y", y)
    check_columns("d", d)
    if x is None:
        raise InvalidJobError(
            "x is not given: name the covariate columns, or let the data's other columns be used "
            "(EstimateOptions.with_data_columns, which check_estimate applies)"
        )
    check_columns("x", x)
    check_columns("z", z, optional=True)
    check_str("model", model)
    check_str("score", score, optional=True)
    check_str("boot_method", boot_method, optional=True)
    parsed = check_learners(learners)
    for name, value in (("n_folds", n_folds), ("n_rep", n_rep), ("seed", seed),
                        ("n_rep_boot", n_rep_boot)):  # fmt: skip
        check_int(name, value)
    if n_folds_inner is not None:
        check_int("n_folds_inner", n_folds_inner)
    check_columns("inner_folds_cols", inner_folds_cols, optional=True)
    check_number("trimming_threshold", trimming_threshold)
    if treatment_level is not None:
        check_number("treatment_level", treatment_level)
    check_columns("cluster_cols", cluster_cols, optional=True)
    check_str("s", s_col, optional=True)
    if not isinstance(normalize_ipw, bool):
        raise InvalidJobError(
            f"normalize_ipw must be True or False, got {shown_value(normalize_ipw)}"
        )
    check_str("t", t, optional=True)
    check_str("weights_col", weights_col, optional=True)
    check_columns("weights_bar_cols", weights_bar_cols, optional=True)
    if in_sample_normalization is not None and not isinstance(in_sample_normalization, bool):
        raise InvalidJobError(
            f"in_sample_normalization must be True or False, got {shown_value(in_sample_normalization)}"
        )
    model = str(model).lower()
    quantile = one_quantile(model, parse_quantiles(quantiles))
    spec = dml.DMLSpec(
        model=model,
        score=score or dml.DEFAULT_SCORE.get(model, ""),
        y_col=y,
        d_cols=tuple(_as_list(d)),
        x_cols=tuple(_as_list(x)),
        z_cols=tuple(_as_list(z)),
        n_folds=int(n_folds),
        n_rep=int(n_rep),
        seed=int(seed),
        learners=parsed,
        trimming_threshold=float(trimming_threshold),
        n_rep_boot=int(n_rep_boot),
        boot_method=boot_method,
        cluster_cols=tuple(_as_list(cluster_cols)),
        normalize_ipw=normalize_ipw,
        subgroups=parse_subgroups(subgroups),
        treatment_level=None if treatment_level is None else float(treatment_level),
        t_col=t,
        in_sample_normalization=in_sample_normalization,
        s_col=s_col,
        weights_col=weights_col,
        weights_bar_cols=None if weights_bar_cols is None else tuple(_as_list(weights_bar_cols)),
        treatment=treatment,  # the spec names a value that is not 0 or 1
        quantile=quantile,
        n_folds_inner=None if n_folds_inner is None else int(n_folds_inner),
        inner_folds_cols=None if inner_folds_cols is None else tuple(_as_list(inner_folds_cols)),
        learner_params=None if learner_params is None else dict(learner_params),
    )
    spec.validate()
    columns = list(spec.used_cols)
    return spec, columns


def read_learner_params(value: Any) -> dict[str, Any] | None:
    """The ``learner_params`` option as :attr:`fanfit.dml.DMLSpec.learner_params` takes it.

    Parameters
    ----------
    value : mapping, str, os.PathLike or None
        The parameters themselves (Python), or a JSON or YAML file of them (the command line,
        job files): ``{nuisance: {treatment column: params}}``, DoubleML's names
        (``set_ml_nuisance_params``).

    Returns
    -------
    dict or None
        The parameters (checked against the model by :meth:`fanfit.dml.DMLSpec.validate`).

    Raises
    ------
    fanfit.errors.InvalidJobError
        A file that cannot be read or parsed, or one whose top level is not an object, naming it.
    """
    if value is None or isinstance(value, Mapping):
        return None if value is None else dict(value)
    if not isinstance(value, str | os.PathLike):
        raise InvalidJobError(
            "learner_params must be an object {nuisance: {treatment column: params}} or a JSON "
            f"or YAML file of one, got {shown_value(value)}"
        )
    import yaml  # a JSON document is YAML too

    try:
        with open(value, encoding="utf-8") as fh:
            loaded = yaml.safe_load(fh)
    except OSError as exc:
        raise InvalidJobError(f"learner_params: cannot read {value}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise InvalidJobError(f"learner_params: {value} is not JSON or YAML: {exc}") from exc
    if not isinstance(loaded, Mapping):
        raise InvalidJobError(
            f"learner_params: {value} must hold an object {{nuisance: {{treatment column: "
            f"params}}}}, got {type(loaded).__name__}"
        )
    return dict(loaded)


def with_option_parameters(function: Any, options: type[_Options]) -> inspect.Signature:
    """``function``'s signature with its ``**kwargs`` written out as the options' keywords.

    The methods that take options as keywords (:meth:`fanfit.client.Client.estimate` and friends)
    accept exactly the fields of ``options``; giving them this signature (``__signature__``) lets
    ``help()``, Jupyter and IDEs that ask :func:`inspect.signature` show every option with its
    default, while the fields stay defined once, on the options model.

    Parameters
    ----------
    function : callable
        A function whose last parameter is ``**kwargs``.
    options : type
        :class:`EstimateOptions` or :class:`TrainOptions`.

    Returns
    -------
    inspect.Signature
        The parameters of ``function`` before ``**kwargs``, then one keyword-only parameter per
        field of ``options`` not already among them (defaults as the model's; a field without one
        has none).
    """
    signature = inspect.signature(function)
    params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    taken = {p.name for p in params}
    for f in dataclasses.fields(options):  # type: ignore[arg-type]
        if f.name in taken:
            continue
        default = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        params.append(
            inspect.Parameter(
                f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=f.type
            )
        )
    return signature.replace(parameters=params)
