"""The result of an estimate: coefficients, inference, multiplier bootstrap and joint intervals."""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fanfit.dml.spec import BOOT_METHODS
from fanfit.errors import InvalidJobError

__all__ = ["DMLResult", "draw_weights", "loss_from_json", "loss_to_json"]


def loss_to_json(loss: dict[str, np.ndarray]) -> dict[str, list[list[float | None]]]:
    """Nuisance losses as JSON: prediction key -> ``n_rep`` lists of ``n_treat`` floats (None for NaN).

    Parameters
    ----------
    loss : dict of str to numpy.ndarray of shape (n_rep, n_treat)

    Returns
    -------
    dict of str to list of list of float or None
    """
    return {
        key: [
            [None if np.isnan(v) else float(v) for v in row]
            for row in np.asarray(arr, dtype=np.float64)
        ]
        for key, arr in loss.items()
    }


def loss_from_json(raw: dict[str, Any] | None) -> dict[str, np.ndarray] | None:
    """Inverse of :func:`loss_to_json` (None stays None; None values become NaN).

    Returns
    -------
    dict of str to numpy.ndarray of shape (n_rep, n_treat), or None
    """
    if raw is None:
        return None
    return {
        key: np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=np.float64)
        for key, rows in raw.items()
    }


def draw_weights(
    method: str, n_rep_boot: int, n_obs: int, rng: np.random.RandomState
) -> np.ndarray:
    r"""Multiplier bootstrap weights :math:`\xi` (DoubleML ``utils/_estimation._draw_weights``).

    ``'Bayes'``: :math:`\xi = E - 1`, :math:`E \sim \mathrm{Exp}(1)`; ``'normal'``:
    :math:`\xi \sim N(0, 1)`; ``'wild'`` (Mammen-type): :math:`\xi = U/\sqrt 2 + (V^2 - 1)/2` with
    :math:`U, V \sim N(0,1)` independent.

    Parameters
    ----------
    method : str
        ``'Bayes'``, ``'normal'`` or ``'wild'``.
    n_rep_boot, n_obs : int
    rng : numpy.random.RandomState
        Drawn from in the same calls as DoubleML draws from ``np.random``, so a ``RandomState(s)``
        reproduces DoubleML after ``np.random.seed(s)``.

    Returns
    -------
    numpy.ndarray, shape (n_rep_boot, n_obs)
    """
    if method == "Bayes":
        return rng.exponential(scale=1.0, size=(n_rep_boot, n_obs)) - 1.0
    if method == "normal":
        return rng.normal(loc=0.0, scale=1.0, size=(n_rep_boot, n_obs))
    if method == "wild":
        xx = rng.normal(loc=0.0, scale=1.0, size=(n_rep_boot, n_obs))
        yy = rng.normal(loc=0.0, scale=1.0, size=(n_rep_boot, n_obs))
        return xx / np.sqrt(2) + (np.power(yy, 2) - 1) / 2
    raise InvalidJobError(
        f"Invalid bootstrap method {method!r}; choose one of {', '.join(repr(m) for m in BOOT_METHODS)}."
    )


def _ci_labels(level: float) -> list[str]:
    alpha = 1 - level
    return [f"{p * 100:.1f} %" for p in (alpha / 2, 1.0 - alpha / 2)]


def _check_level(level: Any) -> float:
    if isinstance(level, bool) or not isinstance(level, numbers.Real) or not 0 < float(level) < 1:
        raise InvalidJobError(f"The confidence level must be a number in (0, 1), got {level!r}.")
    return float(level)


@dataclass
class DMLResult:
    """Estimates and inference of one DML estimate, laid out as DoubleML's.

    Attributes
    ----------
    d_cols : tuple of str
        Treatment names, one per coefficient.
    coef, se, t_stat, pval : numpy.ndarray, shape (n_treat,)
        Aggregated over repetitions as DoubleML 0.11: median ``coef``; ``se`` from the median of
        ``all_coef + 1.96 * all_se``; ``t_stat = coef / se``; ``pval = 2 * Phi(-|t_stat|)``.
    all_coef, all_se : numpy.ndarray, shape (n_treat, n_rep)
        Per repetition.
    n_obs, n_folds, n_rep : int
    model, score : str
    psi, psi_deriv : numpy.ndarray of shape (n_obs, n_rep, n_treat), or None
        Score values :math:`\\psi` and derivatives :math:`\\psi_a` at the estimate (DoubleML's
        ``psi``, ``psi_deriv``); needed by :meth:`bootstrap`, not serialized.
    boot_method : str or None
        Set by :meth:`bootstrap`.
    n_rep_boot : int or None
        Set by :meth:`bootstrap`.
    boot_t_stat : numpy.ndarray of shape (n_rep_boot, n_treat, n_rep), or None
        Bootstrapped t-statistics (DoubleML's ``boot_t_stat``).
    ci_joint_95 : numpy.ndarray of shape (n_treat, 2), or None
        Joint 95% interval kept from a serialized result (:meth:`from_dict`).
    predictions : dict of str to numpy.ndarray of shape (n_obs, n_rep, n_treat), or None
        The out-of-fold predictions the estimate was aggregated from (DoubleML's ``predictions``;
        IRM/IIVM ``ml_m`` before clipping); not serialized.
    nuisance_loss : dict of str to numpy.ndarray of shape (n_rep, n_treat), or None
        Out-of-sample loss of every nuisance learner per repetition and treatment (DoubleML's
        ``nuisance_loss``, :func:`fanfit.dml.losses.nuisance_loss`), keyed by prediction key.
    nuisance_metric : dict of str to str, or None
        The loss of each prediction key: ``'RMSE'`` (regressors) or ``'Log Loss'`` (classifiers),
        :func:`fanfit.dml.losses.loss_metrics`.
    """

    d_cols: tuple[str, ...]
    coef: np.ndarray
    se: np.ndarray
    t_stat: np.ndarray
    pval: np.ndarray
    all_coef: np.ndarray
    all_se: np.ndarray
    n_obs: int
    n_folds: int
    n_rep: int
    model: str
    score: str
    psi: np.ndarray | None = field(default=None, repr=False)
    psi_deriv: np.ndarray | None = field(default=None, repr=False)
    boot_method: str | None = None
    n_rep_boot: int | None = None
    boot_t_stat: np.ndarray | None = field(default=None, repr=False)
    ci_joint_95: np.ndarray | None = field(default=None, repr=False)
    predictions: dict[str, np.ndarray] | None = field(default=None, repr=False)
    nuisance_loss: dict[str, np.ndarray] | None = field(default=None, repr=False)
    nuisance_metric: dict[str, str] | None = field(default=None, repr=False)

    @classmethod
    def from_estimates(
        cls,
        *,
        d_cols: tuple[str, ...],
        all_coef: np.ndarray,
        all_se: np.ndarray,
        psi: np.ndarray | None,
        psi_deriv: np.ndarray | None,
        n_obs: int,
        n_folds: int,
        model: str,
        score: str,
    ) -> DMLResult:
        """Aggregate per-repetition estimates into a result (DoubleML ``fit`` after the loop).

        Parameters
        ----------
        d_cols : tuple of str
        all_coef, all_se : numpy.ndarray, shape (n_treat, n_rep)
        psi, psi_deriv : numpy.ndarray of shape (n_obs, n_rep, n_treat), or None
        n_obs, n_folds : int
        model, score : str

        Returns
        -------
        DMLResult
        """
        from scipy.special import ndtr  # here: Lambda steps that never compute a result skip scipy

        from fanfit.dml.scores.plm_irm import aggregate_coefs_and_ses

        coef, se = aggregate_coefs_and_ses(all_coef, all_se)
        t_stat = coef / se
        pval = 2 * ndtr(-np.abs(t_stat))
        return cls(
            d_cols=tuple(d_cols),
            coef=coef,
            se=se,
            t_stat=t_stat,
            pval=pval,
            all_coef=all_coef,
            all_se=all_se,
            n_obs=int(n_obs),
            n_folds=int(n_folds),
            n_rep=int(all_coef.shape[1]),
            model=model,
            score=score,
            psi=psi,
            psi_deriv=psi_deriv,
        )

    @property
    def n_treat(self) -> int:
        """Number of coefficients."""
        return len(self.d_cols)

    # ------------------------------------------------------------------ inference
    def bootstrap(
        self, method: str = "normal", n_rep_boot: int = 500, seed: int | None = None
    ) -> DMLResult:
        r"""Multiplier bootstrap of the t-statistics (DoubleML ``DoubleMLFramework.bootstrap``).

        For every repetition :math:`r`, with weights :math:`\xi` from :func:`draw_weights`,

        .. math::

            t^*_{b,j,r} = \sum_i \xi_{b,i}\,
            \frac{\psi_{i,j,r} / \bar\psi_{a,j,r}}{N\, \hat\sigma_{j,r}}

        (Chernozhukov, Chetverikov and Kato 2013, "Gaussian approximations and multiplier bootstrap
        for maxima of sums of high-dimensional random vectors"; DoubleML user guide, "Confidence
        bands and multiplier bootstrap").

        Parameters
        ----------
        method : str
            ``'normal'``, ``'Bayes'`` or ``'wild'``.
        n_rep_boot : int
            Bootstrap replications.
        seed : int or None
            Seeds ``numpy.random.RandomState(seed)``; the draws equal DoubleML's after
            ``np.random.seed(seed)`` (one draw of weights per repetition, in order).

        Returns
        -------
        DMLResult
            ``self``, with ``boot_method``, ``n_rep_boot`` and ``boot_t_stat`` set.

        Raises
        ------
        InvalidJobError
            Unknown method, bad ``n_rep_boot``, or no score values (a result read by :meth:`from_dict`).
        """
        if method not in BOOT_METHODS:
            raise InvalidJobError(
                f"Invalid bootstrap method {method!r}; choose one of {', '.join(repr(m) for m in BOOT_METHODS)}."
            )
        if (
            isinstance(n_rep_boot, bool)
            or not isinstance(n_rep_boot, numbers.Integral)
            or n_rep_boot < 1
        ):
            raise InvalidJobError(f"n_rep_boot must be a positive integer, got {n_rep_boot!r}.")
        if self.psi is None or self.psi_deriv is None:
            raise InvalidJobError(
                "This result has no score values (psi), e.g. it was read from JSON; "
                "re-run the aggregation to bootstrap."
            )
        rng = np.random.RandomState(seed)
        # DoubleML construct_framework: scaled psi of shape (n_obs, n_treat, n_rep)
        scaled_psi = np.transpose(np.divide(self.psi, np.mean(self.psi_deriv, axis=0)), (0, 2, 1))
        var_scaling_factors = np.full(self.n_treat, self.n_obs)
        var_scaling = var_scaling_factors.reshape(-1, 1) * self.all_se
        boot_t_stat = np.full((int(n_rep_boot), self.n_treat, self.n_rep), np.nan)
        for i_rep in range(self.n_rep):
            weights = draw_weights(method, int(n_rep_boot), self.n_obs, rng)
            boot_t_stat[:, :, i_rep] = np.matmul(
                weights, np.divide(scaled_psi[:, :, i_rep], var_scaling[:, i_rep])
            )
        self.boot_method = method
        self.n_rep_boot = int(n_rep_boot)
        self.boot_t_stat = boot_t_stat
        self.ci_joint_95 = None
        return self

    def confint(self, joint: bool = False, level: float = 0.95) -> np.ndarray:
        r"""Confidence intervals, pointwise or joint over the treatments.

        Per repetition, :math:`\hat\theta_r \pm c\, \hat\sigma_r`, then the median over repetitions
        of each bound (DoubleML ``DoubleMLFramework.confint``). Pointwise: :math:`c =
        \Phi^{-1}(1 - \alpha/2)`. Joint: :math:`c_r` is the ``level`` quantile of
        :math:`\max_j |t^*_{b,j,r}|` over the bootstrap draws (needs :meth:`bootstrap`).

        Parameters
        ----------
        joint : bool
        level : float
            In (0, 1).

        Returns
        -------
        numpy.ndarray, shape (n_treat, 2)
            Lower and upper bounds.

        Raises
        ------
        InvalidJobError
            ``joint=True`` before :meth:`bootstrap` (or without ``boot_method`` in the spec), or a bad level.
        """
        level = _check_level(level)
        alpha = 1 - level
        if joint:
            if self.boot_t_stat is None:
                if self.ci_joint_95 is not None and level == 0.95:
                    return np.array(self.ci_joint_95, dtype=np.float64)
                raise InvalidJobError(
                    "Joint confidence intervals need the multiplier bootstrap: call bootstrap() "
                    "or set boot_method in the spec."
                )
            max_abs_t = np.amax(np.abs(self.boot_t_stat), axis=1)
            critical_values = np.quantile(a=max_abs_t, q=level, axis=0)
        else:
            from scipy.special import ndtri

            critical_values = np.repeat(ndtri(1.0 - alpha / 2), self.n_rep)
        all_cis = np.stack(
            (
                self.all_coef - self.all_se * critical_values,
                self.all_coef + self.all_se * critical_values,
            ),
            axis=1,
        )
        return np.median(all_cis, axis=2)

    @property
    def summary(self):
        """A pandas DataFrame laid out as DoubleML's ``summary``.

        Columns ``'coef'``, ``'std err'``, ``'t'``, ``'P>|t|'``, ``'2.5 %'``, ``'97.5 %'``; index the
        treatment names. pandas is imported here only (the Lambda layer does not need it otherwise).
        """
        import pandas as pd

        col_names = ["coef", "std err", "t", "P>|t|"]
        stats = np.transpose(np.vstack([self.coef, self.se, self.t_stat, self.pval]))
        df = pd.DataFrame(stats, columns=col_names, index=list(self.d_cols))
        ci = pd.DataFrame(self.confint(), columns=_ci_labels(0.95), index=list(self.d_cols))
        return df.join(ci)

    # ------------------------------------------------------------------ (de)serialization
    def to_dict(self) -> dict:
        """JSON-safe dict of the estimates (score values and bootstrap draws are left out).

        Keys: ``model``, ``score``, ``d_cols``, ``coef``, ``se``, ``t_stat``, ``pval`` (treatment ->
        float), ``ci_95`` (treatment -> ``[low, high]``), ``all_coef``, ``all_se`` (treatment -> list
        over repetitions), ``n_obs``, ``n_folds``, ``n_rep``; after a bootstrap also ``ci_joint_95``,
        ``boot_method`` and ``n_rep_boot``.
        """
        names = list(self.d_cols)

        def per_treat(arr: np.ndarray) -> dict:
            return {t: float(arr[j]) for j, t in enumerate(names)}

        ci = self.confint()
        out: dict[str, Any] = {
            "model": self.model,
            "score": self.score,
            "d_cols": names,
            "coef": per_treat(self.coef),
            "se": per_treat(self.se),
            "t_stat": per_treat(self.t_stat),
            "pval": per_treat(self.pval),
            "ci_95": {t: [float(ci[j, 0]), float(ci[j, 1])] for j, t in enumerate(names)},
            "all_coef": {t: [float(v) for v in self.all_coef[j]] for j, t in enumerate(names)},
            "all_se": {t: [float(v) for v in self.all_se[j]] for j, t in enumerate(names)},
            "n_obs": int(self.n_obs),
            "n_folds": int(self.n_folds),
            "n_rep": int(self.n_rep),
        }
        if self.boot_t_stat is not None or self.ci_joint_95 is not None:
            cj = self.confint(joint=True)
            out["ci_joint_95"] = {
                t: [float(cj[j, 0]), float(cj[j, 1])] for j, t in enumerate(names)
            }
            out["boot_method"] = self.boot_method
            out["n_rep_boot"] = self.n_rep_boot
        if self.nuisance_loss is not None:
            out["nuisance_loss"] = loss_to_json(self.nuisance_loss)
            if self.nuisance_metric is not None:
                out["nuisance_metric"] = dict(self.nuisance_metric)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> DMLResult:
        """Read a result written by :meth:`to_dict` (without score values: no new bootstrap).

        Raises
        ------
        InvalidJobError
            A required key is missing.
        """
        try:
            names = list(d["d_cols"]) if "d_cols" in d else list(d["coef"])

            def arr(key: str) -> np.ndarray:
                return np.array([d[key][t] for t in names], dtype=np.float64)

            all_coef = np.array([d["all_coef"][t] for t in names], dtype=np.float64)
            all_se = np.array([d["all_se"][t] for t in names], dtype=np.float64)
            ci_joint = None
            if d.get("ci_joint_95") is not None:
                ci_joint = np.array([d["ci_joint_95"][t] for t in names], dtype=np.float64)
            return cls(
                d_cols=tuple(names),
                coef=arr("coef"),
                se=arr("se"),
                t_stat=arr("t_stat"),
                pval=arr("pval"),
                all_coef=all_coef,
                all_se=all_se,
                n_obs=int(d["n_obs"]),
                n_folds=int(d["n_folds"]),
                n_rep=int(d["n_rep"]),
                model=d["model"],
                score=d["score"],
                boot_method=d.get("boot_method"),
                n_rep_boot=d.get("n_rep_boot"),
                ci_joint_95=ci_joint,
                nuisance_loss=loss_from_json(d.get("nuisance_loss")),
                nuisance_metric=d.get("nuisance_metric"),
            )
        except (KeyError, TypeError) as exc:
            raise InvalidJobError(f"Not a DML result: missing or malformed {exc}.") from exc
