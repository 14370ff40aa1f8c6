r"""The combined result of a model DoubleML fits as several models: QTE's effects, APOS's contrasts.

DoubleML 0.11.4 combines the models of ``DoubleMLQTE`` and ``DoubleMLAPOS`` through their
``DoubleMLFramework`` (``double_ml_framework.py``): each fitted model gives a framework of its
per-repetition estimates :math:`\hat\theta_r`, standard errors :math:`\hat\sigma_r` and scaled
scores :math:`\tilde\psi_{i,r} = \psi_{i,r} / \overline{\psi_{a,r}}` (``construct_framework``);
a difference of two frameworks (``__sub__``) subtracts estimates and scaled scores and recomputes

.. math::

    \hat\sigma^2_r = \frac{1}{N}\cdot\frac{1}{N}\sum_i \tilde\psi_{i,r}^2 ;

``concat`` stacks frameworks; the aggregation over repetitions is the median
(:func:`fanfit.dml.scores.plm_irm.aggregate_coefs_and_ses`), the p-values the median of the
per-repetition p-values (Chernozhukov et al. 2018, Definition 4.2), the pointwise intervals the
median over repetitions of :math:`\hat\theta_r \pm \Phi^{-1}(0.975)\hat\sigma_r`, and the joint
bands come from the multiplier bootstrap of the t-statistics (``DoubleMLFramework.bootstrap``,
Chernozhukov, Chetverikov and Kato 2013), one draw of weights per repetition.

* ``qte`` (``irm/qte.py`` ``fit``): per quantile the treated model's framework minus the
  control's, concatenated over the quantiles (:func:`qte_combined`);
* ``apos`` (``irm/apos.py``): the levels' frameworks concatenated (``DoubleMLAPOS``'s own), and
  ``causal_contrast(reference_levels)``: each other level's framework minus the reference's
  (:func:`apos_combined`).

The bootstrap draws from ``numpy.random.RandomState(seed)``: the draws equal DoubleML's after
``np.random.seed(seed)`` (:func:`fanfit.dml.result.draw_weights`), so ``np.random.seed(seed);
qte.bootstrap(method, n_rep_boot)`` gives DoubleMLQTE the same joint bands; for APOS the levels'
bands are ``np.random.seed(seed); apos.bootstrap(...)`` and the contrasts' ``np.random.seed(seed);
apos.causal_contrast(ref).bootstrap(...)``.

Pure: arrays in, arrays and small dataclasses out (Aggregate writes :meth:`CombinedEstimate.to_dict`
as ``result.json``'s ``combined``).
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fanfit.dml.result import DMLResult, draw_weights
from fanfit.dml.spec import BOOT_METHODS, DMLSpec
from fanfit.errors import InvalidJobError

__all__ = [
    "COMBINED_MODELS",
    "QTE_SCORES",
    "CombinedEstimate",
    "Framework",
    "PartScores",
    "apos_combined",
    "combine_parts",
    "level_label",
    "qte_combined",
]

#: DoubleMLQTE's scores and the registry model of each of its parts.
QTE_SCORES = {"PQ": "pq", "CVaR": "cvar", "LPQ": "lpq"}
#: The models of several parts whose combined result :func:`combine_parts` computes.
COMBINED_MODELS = ("qte", "apos")
_Z975 = 1.959963984540054  # scipy.special.ndtri(0.975), DoubleML's norm.ppf(0.975)


def level_label(level: float) -> str:
    """A treatment level as DoubleML's names print it: ``1`` for 1.0, ``0.5`` for 0.5."""
    return f"{level:g}"


def _ndtr(x: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr  # here: Lambda steps that never combine skip scipy

    return np.asarray(ndtr(x), dtype=float)


@dataclass(frozen=True)
class PartScores:
    """One part's estimates and score values, as a fitted DoubleML model's framework takes them.

    Attributes
    ----------
    all_coef, all_se : ndarray of shape (n_rep,)
    psi : ndarray of shape (n_obs, n_rep)
        The score at the estimate.
    psi_deriv : ndarray of shape (n_obs, n_rep) or (1, n_rep)
        Its derivative :math:`\\psi_a`, or only its mean over the observations (all a framework
        reads of it).
    """

    all_coef: np.ndarray
    all_se: np.ndarray
    psi: np.ndarray
    psi_deriv: np.ndarray

    @classmethod
    def of(cls, result: DMLResult) -> PartScores:
        """The first treatment's scores of an aggregated part (:func:`fanfit.dml.aggregate`),
        ``psi_deriv`` reduced to its mean (half the memory Aggregate holds across parts).

        Raises
        ------
        InvalidJobError
            The result has no score values (read from JSON).
        """
        if result.psi is None or result.psi_deriv is None:
            raise InvalidJobError("a combined result needs every part's score values (psi)")
        deriv_mean = np.mean(np.asarray(result.psi_deriv[:, :, 0], dtype=float), axis=0)
        return cls(np.asarray(result.all_coef[0], dtype=float),
                   np.asarray(result.all_se[0], dtype=float),
                   np.asarray(result.psi[:, :, 0], dtype=float), deriv_mean[None, :])  # fmt: skip


@dataclass(frozen=True)
class Framework:
    """DoubleML 0.11.4's ``DoubleMLFramework`` without clusters or sensitivity elements.

    Attributes
    ----------
    names : tuple of str, length n_thetas
    all_coef, all_se : ndarray of shape (n_thetas, n_rep)
    scaled_psi : ndarray of shape (n_obs, n_thetas, n_rep)
    boot_t_stat : ndarray of shape (n_rep_boot, n_thetas, n_rep) or None
        After :meth:`bootstrap`.
    """

    names: tuple[str, ...]
    all_coef: np.ndarray
    all_se: np.ndarray
    scaled_psi: np.ndarray
    boot_t_stat: np.ndarray | None = None

    @classmethod
    def of_part(cls, name: str, part: PartScores) -> Framework:
        """``construct_framework`` of one fitted model: scaled scores :math:`\\psi /
        \\overline{\\psi_a}` per repetition, its own standard errors."""
        scaled = np.divide(part.psi, np.mean(part.psi_deriv, axis=0))
        return cls((name,), part.all_coef[None, :], part.all_se[None, :], scaled[:, None, :])

    @property
    def n_obs(self) -> int:
        """Number of observations."""
        return int(self.scaled_psi.shape[0])

    @property
    def coef(self) -> np.ndarray:
        """Median over repetitions, shape (n_thetas,)."""
        from fanfit.dml.scores.plm_irm import aggregate_coefs_and_ses

        return aggregate_coefs_and_ses(self.all_coef, self.all_se)[0]

    @property
    def se(self) -> np.ndarray:
        """DoubleML's aggregated standard error, shape (n_thetas,)."""
        from fanfit.dml.scores.plm_irm import aggregate_coefs_and_ses

        return aggregate_coefs_and_ses(self.all_coef, self.all_se)[1]

    @property
    def t_stat(self) -> np.ndarray:
        """``coef / se``."""
        return np.asarray(self.coef / self.se)

    @property
    def pval(self) -> np.ndarray:
        """Median over repetitions of :math:`2(1 - \\Phi(|t_r|))` (``DoubleMLFramework.pvals``)."""
        all_t = np.abs(self.all_coef / self.all_se)
        return np.asarray(np.median(2.0 * (1.0 - _ndtr(all_t)), axis=1))

    def __sub__(self, other: Framework) -> Framework:
        """``DoubleMLFramework.__sub__``: estimates and scaled scores subtracted, the standard
        errors recomputed from the difference of the scaled scores.

        Raises
        ------
        InvalidJobError
            The frameworks differ in n_obs, n_rep or n_thetas.
        """
        if self.scaled_psi.shape != other.scaled_psi.shape:
            raise InvalidJobError(
                f"frameworks of shapes {self.scaled_psi.shape} and {other.scaled_psi.shape} "
                "(n_obs, n_thetas, n_rep) cannot be subtracted"
            )
        scaled = self.scaled_psi - other.scaled_psi
        all_se = np.sqrt(np.divide(np.mean(np.square(scaled), axis=0), self.n_obs))
        return Framework(self.names, self.all_coef - other.all_coef, all_se, scaled)

    def renamed(self, names: Sequence[str]) -> Framework:
        """The same numbers under other names."""
        return dataclasses.replace(self, names=tuple(names))

    @staticmethod
    def concat(frames: Sequence[Framework]) -> Framework:
        """``double_ml_framework.concat``: the thetas of every framework, in order.

        Raises
        ------
        InvalidJobError
            No framework, or frameworks of other n_obs or n_rep.
        """
        if not frames:
            raise InvalidJobError("concat needs at least one framework")
        shape = frames[0].scaled_psi.shape
        for f in frames[1:]:
            if (f.scaled_psi.shape[0], f.scaled_psi.shape[2]) != (shape[0], shape[2]):
                raise InvalidJobError("frameworks of other n_obs or n_rep cannot be concatenated")
        return Framework(
            tuple(n for f in frames for n in f.names),
            np.concatenate([f.all_coef for f in frames], axis=0),
            np.concatenate([f.all_se for f in frames], axis=0),
            np.concatenate([f.scaled_psi for f in frames], axis=1),
        )

    def bootstrap(self, method: str, n_rep_boot: int, seed: int | None) -> Framework:
        r"""``DoubleMLFramework.bootstrap``: per repetition :math:`r`, weights :math:`\xi`
        (:func:`fanfit.dml.result.draw_weights`) and
        :math:`t^*_{b,j,r} = \sum_i \xi_{b,i} \tilde\psi_{i,j,r} / (N \hat\sigma_{j,r})`.

        Parameters
        ----------
        method : {'normal', 'Bayes', 'wild'}
        n_rep_boot : int
        seed : int or None
            Seeds ``numpy.random.RandomState`` (DoubleML's draws after ``np.random.seed(seed)``).

        Returns
        -------
        Framework
            With ``boot_t_stat``.

        Raises
        ------
        InvalidJobError
            Unknown method or ``n_rep_boot`` not a positive integer.
        """
        check_bootstrap(method, n_rep_boot)
        rng = np.random.RandomState(seed)
        n_thetas, n_rep = self.all_coef.shape
        var_scaling = self.n_obs * self.all_se
        boot = np.full((int(n_rep_boot), n_thetas, n_rep), np.nan)
        for i_rep in range(n_rep):
            weights = draw_weights(method, int(n_rep_boot), self.n_obs, rng)
            boot[:, :, i_rep] = np.matmul(
                weights, np.divide(self.scaled_psi[:, :, i_rep], var_scaling[:, i_rep])
            )
        return dataclasses.replace(self, boot_t_stat=boot)

    def confint(self, joint: bool = False, level: float = 0.95) -> np.ndarray:
        """``DoubleMLFramework.confint``: the median over repetitions of :math:`\\hat\\theta_r \\mp
        c_r\\hat\\sigma_r`, :math:`c` the normal quantile (pointwise) or, joint, the ``level``
        quantile of :math:`\\max_j |t^*_{b,j,r}|` over the draws.

        Returns
        -------
        ndarray of shape (n_thetas, 2)

        Raises
        ------
        InvalidJobError
            ``joint`` before :meth:`bootstrap`, or a level outside (0, 1).
        """
        if not 0.0 < level < 1.0:
            raise InvalidJobError(f"level must be in (0, 1), got {level}")
        if joint:
            if self.boot_t_stat is None:
                raise InvalidJobError("joint confidence bands need the multiplier bootstrap")
            max_abs_t = np.amax(np.abs(self.boot_t_stat), axis=1)
            crit = np.quantile(a=max_abs_t, q=level, axis=0)
        else:
            from scipy.special import ndtri

            crit = np.repeat(ndtri(1.0 - (1.0 - level) / 2), self.all_coef.shape[1])
        all_cis = np.stack((self.all_coef - self.all_se * crit, self.all_coef + self.all_se * crit),
                           axis=1)  # fmt: skip
        return np.asarray(np.median(all_cis, axis=2))

    def to_dict(self) -> dict[str, Any]:
        """``names``, ``coef``, ``se``, ``t_stat``, ``pval``, ``ci_95`` (``[low, high]`` per
        theta), ``all_coef``, ``all_se`` (per theta, n_rep values) and, after a bootstrap,
        ``ci_joint_95``."""
        out: dict[str, Any] = {
            "names": list(self.names), "coef": self.coef.tolist(), "se": self.se.tolist(),
            "t_stat": self.t_stat.tolist(), "pval": self.pval.tolist(),
            "ci_95": self.confint().tolist(), "all_coef": self.all_coef.tolist(),
            "all_se": self.all_se.tolist(),
        }  # fmt: skip
        if self.boot_t_stat is not None:
            out["ci_joint_95"] = self.confint(joint=True).tolist()
        return out


def check_bootstrap(method: Any, n_rep_boot: Any) -> None:
    """DoubleML's ``_check_bootstrap``.

    Raises
    ------
    InvalidJobError
        ``method`` not one of :data:`fanfit.dml.spec.BOOT_METHODS`, or ``n_rep_boot`` not a
        positive integer; naming ``boot_method`` or ``n_rep_boot``.
    """
    if method not in BOOT_METHODS:
        raise InvalidJobError(
            f"boot_method must be one of {', '.join(map(repr, BOOT_METHODS))}, got {method!r}"
        )
    if isinstance(n_rep_boot, bool) or not isinstance(n_rep_boot, numbers.Integral) or (
        n_rep_boot < 1
    ):  # fmt: skip
        raise InvalidJobError(f"n_rep_boot must be a positive integer, got {n_rep_boot!r}")


@dataclass(frozen=True)
class CombinedEstimate:
    """A model's combined result (``result.json``'s ``combined``).

    Attributes
    ----------
    model : str
        ``'qte'`` or ``'apos'``.
    score : str
        ``'PQ'``, ``'CVaR'``, ``'LPQ'`` (qte) or ``'APO'`` (apos).
    effects : Framework
        qte: the quantile treatment effects, one theta per quantile (DoubleMLQTE's framework);
        apos: the levels' average potential outcomes (DoubleMLAPOS's framework).
    contrasts : Framework or None
        apos: ``causal_contrast(reference_level)``, one theta per other level; None for one level
        and for qte.
    quantiles : tuple of float or None
    treatment_levels : tuple of float or None
    reference_level : float or None
    boot_method : str or None
    n_rep_boot : int or None
    seed : int or None
        The bootstrap's seed (the job's).
    """

    model: str
    score: str
    effects: Framework
    contrasts: Framework | None = None
    quantiles: tuple[float, ...] | None = None
    treatment_levels: tuple[float, ...] | None = None
    reference_level: float | None = None
    boot_method: str | None = None
    n_rep_boot: int | None = None
    seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (:class:`fanfit.jobs.documents.estimate.CombinedResult`)."""
        out: dict[str, Any] = {"model": self.model, "score": self.score,
                               "effects": self.effects.to_dict()}  # fmt: skip
        if self.contrasts is not None:
            out["contrasts"] = self.contrasts.to_dict()
        for name in ("quantiles", "treatment_levels"):
            value = getattr(self, name)
            if value is not None:
                out[name] = list(value)
        for name in ("reference_level", "boot_method", "n_rep_boot", "seed"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


def _bootstrapped(
    frame: Framework, method: str | None, n_rep_boot: int, seed: int | None
) -> Framework:
    return frame if method is None else frame.bootstrap(method, n_rep_boot, seed)


def qte_combined(
    quantiles: Sequence[float],
    score: str,
    parts: Sequence[PartScores],
    *,
    boot_method: str | None = None,
    n_rep_boot: int = 500,
    seed: int | None = None,
) -> CombinedEstimate:
    """DoubleMLQTE's effects from its models' scores (DoubleML 0.11.4 ``irm/qte.py`` ``fit``):
    per quantile ``modellist_1[i].framework - modellist_0[i].framework``, concatenated; with
    ``boot_method`` the framework's multiplier bootstrap seeded by ``seed``.

    Parameters
    ----------
    quantiles : sequence of float, length n_quantiles
    score : {'PQ', 'CVaR', 'LPQ'}
    parts : sequence of PartScores, length 2 * n_quantiles
        Per quantile (in order) treatment level 0, then 1.
    boot_method : {'normal', 'Bayes', 'wild'} or None
    n_rep_boot : int
    seed : int or None

    Returns
    -------
    CombinedEstimate
        ``effects`` named by the quantiles (``f"{q:g}"``).

    Raises
    ------
    InvalidJobError
        Not two parts per quantile, parts of other shapes, or a bad bootstrap option.
    """
    n_q = len(quantiles)
    if len(parts) != 2 * n_q or n_q == 0:
        raise InvalidJobError(
            f"model 'qte' needs 2 parts per quantile ({2 * n_q}), got {len(parts)}"
        )
    names = [f"{q:g}" for q in quantiles]
    effects = Framework.concat([
        (Framework.of_part(name, parts[2 * k + 1]) - Framework.of_part(name, parts[2 * k]))
        for k, name in enumerate(names)
    ])  # fmt: skip
    return CombinedEstimate(
        model="qte", score=score, effects=_bootstrapped(effects, boot_method, n_rep_boot, seed),
        quantiles=tuple(float(q) for q in quantiles), boot_method=boot_method,
        n_rep_boot=None if boot_method is None else int(n_rep_boot), seed=seed,
    )  # fmt: skip


def apos_combined(
    levels: Sequence[float],
    parts: Sequence[PartScores],
    *,
    reference: float | None = None,
    boot_method: str | None = None,
    n_rep_boot: int = 500,
    seed: int | None = None,
) -> CombinedEstimate:
    """DoubleMLAPOS's framework and ``causal_contrast(reference)`` from its levels' scores
    (DoubleML 0.11.4 ``irm/apos.py``): the levels' frameworks concatenated, and each other level's
    framework minus the reference level's, named ``"<level> vs <reference>"``; with
    ``boot_method`` each bootstrapped from ``RandomState(seed)``.

    Parameters
    ----------
    levels : sequence of float, length n_levels
    parts : sequence of PartScores, length n_levels
    reference : float, optional
        Default the first level.
    boot_method, n_rep_boot, seed
        As :func:`qte_combined`.

    Returns
    -------
    CombinedEstimate
        ``contrasts`` None for one level.

    Raises
    ------
    InvalidJobError
        Not one part per level, a reference that is not a level, or a bad bootstrap option.
    """
    levels = [float(v) for v in levels]
    if len(parts) != len(levels) or not levels:
        raise InvalidJobError(
            f"model 'apos' needs one part per treatment level ({len(levels)}), got {len(parts)}"
        )
    ref = levels[0] if reference is None else float(reference)
    if ref not in levels:
        raise InvalidJobError(
            f"the reference level {level_label(ref)} is not one of treatment_levels "
            f"{', '.join(map(level_label, levels))}"
        )
    frames = [Framework.of_part(level_label(v), p) for v, p in zip(levels, parts, strict=True)]
    effects = Framework.concat(frames)
    contrasts = None
    if len(levels) > 1:
        i_ref = levels.index(ref)
        contrasts = Framework.concat([
            (frames[i] - frames[i_ref]).renamed([f"{level_label(levels[i])} vs {level_label(ref)}"])
            for i in range(len(levels)) if i != i_ref
        ])  # fmt: skip
        contrasts = _bootstrapped(contrasts, boot_method, n_rep_boot, seed)
    return CombinedEstimate(
        model="apos", score="APO", effects=_bootstrapped(effects, boot_method, n_rep_boot, seed),
        contrasts=contrasts, treatment_levels=tuple(levels), reference_level=ref,
        boot_method=boot_method, n_rep_boot=None if boot_method is None else int(n_rep_boot),
        seed=seed,
    )  # fmt: skip


def combine_parts(
    model: str | None,
    specs: Sequence[DMLSpec],
    parts: Sequence[PartScores],
    *,
    boot_method: str | None = None,
    n_rep_boot: int = 500,
) -> CombinedEstimate | None:
    """The combined result of a job of several parts (what Aggregate writes), or None for a
    model that has none here.

    ``qte``: the quantiles (in the order they first appear) and score from the parts' specs
    (``pq``/``cvar``/``lpq`` parts, one at ``treatment`` 0 and one at 1 of each ``quantile``, in
    any order: ``fanfit estimate`` submits them per quantile, fanfit.DoubleMLQTE level 0's
    first), :func:`qte_combined`; ``apos``: the
    levels from ``treatment_level``, the reference the first, :func:`apos_combined`. The
    bootstrap's seed is the first part's ``seed`` (the job's).

    Parameters
    ----------
    model : str or None
        The job's model (:attr:`fanfit.jobs.documents.estimate.EstimatePlan.model`).
    specs : sequence of DMLSpec
        The parts' specs, in order.
    parts : sequence of PartScores
        Their scores, in the same order.
    boot_method : str or None
    n_rep_boot : int

    Returns
    -------
    CombinedEstimate or None

    Raises
    ------
    InvalidJobError
        Parts that do not make the model (a qte quantile without one part at each level, an
        apos part without a level), or as :func:`qte_combined` / :func:`apos_combined`.
    """
    if model not in COMBINED_MODELS:
        return None
    seed = int(specs[0].seed)
    if model == "qte":
        by_model = {v: k for k, v in QTE_SCORES.items()}
        score = by_model.get(specs[0].model)
        index: dict[tuple[float, int], int] = {}
        for k, s in enumerate(specs):
            key = (s.quantile, s.treatment)
            if s.model != specs[0].model or s.quantile is None or s.treatment not in (0, 1) or (
                key in index
            ):  # fmt: skip
                index = {}
                break
            index[(float(s.quantile), int(s.treatment))] = k  # type: ignore[arg-type]
        quantiles = list(dict.fromkeys(q for q, _ in index))
        if score is None or not index or len(index) != 2 * len(quantiles):
            raise InvalidJobError(
                "model 'qte' needs one pq, cvar or lpq part at treatment 0 and one at treatment 1 "
                "of each quantile"
            )
        ordered = [parts[index[(q, t)]] for q in quantiles for t in (0, 1)]
        return qte_combined(quantiles, score, ordered, boot_method=boot_method,
                            n_rep_boot=n_rep_boot, seed=seed)  # fmt: skip
    if any(s.model != "apo" or s.treatment_level is None for s in specs):
        raise InvalidJobError("model 'apos' needs apo parts, each at one treatment_level")
    levels = [float(s.treatment_level) for s in specs]  # type: ignore[arg-type]
    return apos_combined(levels, parts, boot_method=boot_method, n_rep_boot=n_rep_boot, seed=seed)
