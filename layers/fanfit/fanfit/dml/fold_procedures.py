"""The fold procedures of the quantile models (PQ, CVaR, LPQ): what their registry entries call.

Each model of :mod:`fanfit.dml.models` with a :class:`~fanfit.dml.models.FoldProcedure` takes
from here its ``run`` (one outer fold's nested fits: :func:`fanfit.dml.scores.quantile.pq_fold`,
:func:`fanfit.dml.scores.lpq.lpq_fold`), for PQ and LPQ the three parts of its
:class:`~fanfit.dml.models.FoldSplit` (:func:`fold_prelim`, :func:`fold_root`, :func:`fold_final`:
the same fits cut where the start value enters, run in two stages), ``start`` (the first start
value of the IPW search),
``solve`` (one repetition's estimate, score and derivative) and ``targets`` (the nuisance
targets that depend on a fold's IPW quantile, for the losses), and its spec check; also the
parsing of the ``quantiles`` option (:func:`parse_quantiles`). The maths is
in :mod:`fanfit.dml.scores.quantile` and :mod:`fanfit.dml.scores.lpq`; see the former's docstring
for the nested fits.

**External predictions** (DoubleML's ``fit(external_predictions=...)``, :mod:`fanfit.dml.external`)
follow DoubleML 0.11.4 (:attr:`fanfit.dml.models.FoldProcedure.external`): DoubleMLPQ takes any of ``ml_g``, ``ml_m``
(``irm/pq.py`` ``_nuisance_est``: a given key's fits are skipped, the others run; with both given
nothing is fitted and the start value is not updated), DoubleMLLPQ all five keys or none
(``irm/lpq.py`` ``_nuisance_est``: with some given it fits every nuisance and uses none of
them), DoubleMLCVAR none. A fold unit reads the given predictions of its repetition from
``data.external`` (shape (n_obs, 1, n_treat) there, :func:`fanfit.dml.unit_fits.fit_predict`).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fanfit.dml.model_checks import DMLData, DMLSpec, _one_treatment, column, given_predictions
from fanfit.dml.scores.lpq import (
    lpq_fold,
    lpq_fold_final,
    lpq_fold_prelim,
    lpq_fold_root,
    lpq_solve,
)
from fanfit.dml.scores.plm_irm import est_coef
from fanfit.dml.scores.quantile import (
    cvar_coef_start,
    cvar_g_target,
    cvar_score_elements,
    pq_coef_start,
    pq_fold,
    pq_fold_final,
    pq_fold_prelim,
    pq_fold_root,
    pq_solve,
)
from fanfit.errors import InvalidJobError

__all__ = [
    "KINDS",
    "check_quantile_spec",
    "fold_final",
    "fold_prelim",
    "fold_root",
    "fold_run",
    "fold_solve",
    "fold_start",
    "fold_targets",
    "one_quantile",
    "parse_quantiles",
]

#: The fold procedures here, by model name.
KINDS = ("pq", "cvar", "lpq")

#: The fold scalar every procedure here returns: the fold's preliminary IPW quantile.
THETA_IPW = "theta_ipw"

Preds = Mapping[str, np.ndarray]
Solution = tuple[float, np.ndarray, np.ndarray]


def check_quantile_spec(spec: DMLSpec) -> None:
    """The rules of ``pq``, ``cvar`` and ``lpq``: one binary treatment, ``treatment`` 0 or 1,
    ``quantile`` in (0, 1), no clusters; ``lpq`` one binary instrument, the others none.

    Raises
    ------
    fanfit.errors.InvalidJobError
        Naming the option or column that is wrong.
    """
    _one_treatment(spec, "binary ")
    if spec.model == "lpq" and len(spec.z_cols) != 1:
        raise InvalidJobError(
            f"Model 'lpq' needs exactly one binary instrument column in z_cols, got "
            f"{len(spec.z_cols)}."
        )
    if spec.model != "lpq" and spec.z_cols:
        raise InvalidJobError(
            f"Model {spec.model!r} takes no instruments, but z_cols is {list(spec.z_cols)}; "
            "use model 'lpq' for the compliers' quantile with a binary instrument."
        )
    if spec.cluster_cols:
        raise InvalidJobError(
            f"Model {spec.model!r} does not take cluster_cols (DoubleML's {spec.model.upper()} "
            "has no cluster-robust version); leave cluster_cols empty."
        )
    q = spec.quantile
    if q is None:
        raise InvalidJobError(
            f"Model {spec.model!r} needs quantile, a number in (0, 1) (CLI: --quantiles 0.5)."
        )
    if isinstance(q, bool) or not isinstance(q, numbers.Real) or not 0.0 < float(q) < 1.0:
        raise InvalidJobError(f"quantile must be a number in (0, 1), got {q!r}.")
    if spec.treatment is None or isinstance(spec.treatment, bool) or spec.treatment not in (0, 1):
        raise InvalidJobError(
            f"Model {spec.model!r} needs treatment, 0 or 1 (the treatment level whose potential "
            f"quantile is estimated; CLI: --treatment 1), got {spec.treatment!r}."
        )


def _options(spec: DMLSpec) -> tuple[int, float]:
    assert spec.quantile is not None and spec.treatment is not None
    return int(spec.treatment), float(spec.quantile)


def fold_run(model: str) -> Callable[..., tuple[dict[str, np.ndarray], dict[str, float]]]:
    """The ``run`` of a model's fold procedure (:class:`fanfit.dml.models.FoldProcedure`); PQ's
    skips the fits of a key whose predictions ``data.external`` gives and returns those on the
    test rows (module docstring)."""

    def run(
        spec: DMLSpec,
        data: DMLData,
        train: np.ndarray,
        test: np.ndarray,
        i_treat: int,
        build: Callable[[str], Any],
        start: float,
    ) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        treatment, quantile = _options(spec)
        x, y, d = data.xd(i_treat), data.y, data.d[:, i_treat]
        common = (spec.n_folds, lambda: build("ml_g"), lambda: build("ml_m"))
        ipw = (spec.normalize_ipw, spec.trimming_threshold)
        if model == "lpq":  # LPQ's builders take the nuisance (ml_m_z, ..., ml_g_du_z1)
            z = column(spec, data, "z", i_treat)
            lpq = lpq_fold(
                x, y, d, z, train, test, treatment, quantile, start, spec.n_folds, build, build,
                *ipw,
            )  # fmt: skip
            return dict(lpq.preds), {THETA_IPW: lpq.theta_ipw}
        given = given_predictions(data, i_treat)
        out = pq_fold(
            x, y, d, train, test, treatment, quantile, start, *common, *ipw, cvar=model == "cvar",
            m_given=given.get("ml_m"), g_given=given.get("ml_g"),
        )  # fmt: skip
        return {"ml_g": out.g_hat, "ml_m": out.m_hat}, {THETA_IPW: out.theta_ipw}

    return run


def fold_prelim(
    model: str,
) -> Callable[..., tuple[dict[str, np.ndarray], np.ndarray]]:
    """The ``prelim`` of a model's :class:`~fanfit.dml.models.FoldSplit` (PQ, LPQ): steps 1, 2 and 5
    (:func:`~fanfit.dml.scores.quantile.pq_fold_prelim`, :func:`~fanfit.dml.scores.lpq.
    lpq_fold_prelim`); ``aux`` holds the first half's preliminary propensities, shape
    (1, n_train_1) for PQ, (3, n_train_1) for LPQ. With PQ's ``ml_m`` given (``data.external``)
    nothing is fitted: ``aux`` is the given predictions as DoubleML indexes them
    (:func:`~fanfit.dml.scores.quantile.pq_fold_prelim`)."""

    def prelim(
        spec: DMLSpec,
        data: DMLData,
        train: np.ndarray,
        test: np.ndarray,
        i_treat: int,
        build: Callable[[str], Any],
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        x, d = data.xd(i_treat), data.d[:, i_treat]
        if model == "lpq":
            z = column(spec, data, "z", i_treat)
            return lpq_fold_prelim(x, d, z, train, test, spec.n_folds, build)
        out = pq_fold_prelim(
            x,
            d,
            train,
            test,
            spec.n_folds,
            lambda: build("ml_m"),
            given_predictions(data, i_treat).get("ml_m"),
        )
        return {"ml_m": out.m_hat}, out.m_prelim[None, :]

    return prelim


def fold_root(model: str) -> Callable[..., dict[str, float]]:
    """The ``root`` of a model's :class:`~fanfit.dml.models.FoldSplit`: step 3, the fold's IPW
    quantile from its ``aux`` and a start value (:func:`~fanfit.dml.scores.quantile.pq_fold_root`,
    :func:`~fanfit.dml.scores.lpq.lpq_fold_root`), as ``{'theta_ipw': float}``."""

    def root(
        spec: DMLSpec, data: DMLData, train: np.ndarray, i_treat: int, aux: np.ndarray, start: float
    ) -> dict[str, float]:
        treatment, quantile = _options(spec)
        y, d = data.y, data.d[:, i_treat]
        ipw = (spec.normalize_ipw, spec.trimming_threshold)
        if model == "lpq":
            z = column(spec, data, "z", i_treat)
            theta = lpq_fold_root(y, d, z, train, aux, treatment, quantile, start, *ipw)
        else:
            theta = pq_fold_root(y, d, train, np.ravel(aux), treatment, quantile, start, *ipw)
        return {THETA_IPW: theta}

    return root


def fold_final(model: str) -> Callable[..., dict[str, np.ndarray]]:
    """The ``final`` of a model's :class:`~fanfit.dml.models.FoldSplit`: step 4 from the fold's
    ``theta_ipw`` (:func:`~fanfit.dml.scores.quantile.pq_fold_final`: ``ml_g``, the given
    predictions on the test rows when ``data.external`` has them;
    :func:`~fanfit.dml.scores.lpq.lpq_fold_final`: ``ml_g_du_z0``, ``ml_g_du_z1``)."""

    def final(
        spec: DMLSpec,
        data: DMLData,
        train: np.ndarray,
        test: np.ndarray,
        i_treat: int,
        build: Callable[[str], Any],
        scalars: Mapping[str, float],
    ) -> dict[str, np.ndarray]:
        treatment, quantile = _options(spec)
        x, y, d = data.xd(i_treat), data.y, data.d[:, i_treat]
        theta = np.float64(scalars[THETA_IPW])
        if model == "lpq":
            z = column(spec, data, "z", i_treat)
            return lpq_fold_final(x, y, d, z, train, test, treatment, theta, build)
        build_g = lambda: build("ml_g")  # noqa: E731
        g_given = given_predictions(data, i_treat).get("ml_g")
        g_hat = pq_fold_final(
            x, y, d, train, test, treatment, quantile, theta, build_g, g_given=g_given
        )
        return {"ml_g": g_hat}

    return final


def fold_start(model: str) -> Callable[[DMLSpec, DMLData, int], float]:
    """The first start value of a model's IPW search: :func:`~fanfit.dml.scores.quantile.
    cvar_coef_start` (CVaR), else :func:`~fanfit.dml.scores.quantile.pq_coef_start` (PQ, LPQ)."""
    first = cvar_coef_start if model == "cvar" else pq_coef_start

    def start(spec: DMLSpec, data: DMLData, i_treat: int) -> float:
        treatment, quantile = _options(spec)
        return first(data.y, data.d[:, i_treat], treatment, quantile)

    return start


def _every_key_given(data: DMLData, p: Preds, i_treat: int) -> bool:
    """Whether every prediction key of ``p`` (the repetition's, its fold scalars aside) is given
    for treatment ``i_treat``: ``data.external`` holds the given predictions the model takes
    (:func:`fanfit.dml.external.read_external_predictions` of its ``external_units``; this
    module cannot import :mod:`fanfit.dml.external`, which imports the registry, which imports
    this module)."""
    given = data.external or {}
    keys = [k for k in p if k != THETA_IPW]
    return bool(keys) and all(
        k in given and not np.isnan(given[k][:, :, i_treat]).all() for k in keys
    )


def fold_solve(
    model: str,
) -> Callable[[DMLSpec, DMLData, Preds, int, Mapping[str, float]], Solution]:
    """One repetition's ``(coef, psi, psi_deriv)``: PQ's and LPQ's root search from the mean of
    the fold IPW quantiles (:func:`~fanfit.dml.scores.quantile.pq_solve`,
    :func:`~fanfit.dml.scores.lpq.lpq_solve`), CVaR's linear score with that mean as the
    quantile (:func:`~fanfit.dml.scores.quantile.cvar_score_elements`). With every prediction
    key of the treatment given (:func:`_every_key_given`, as :func:`fanfit.dml.external.
    every_key_given` decides it: no fold ran, there are no fold IPW quantiles) PQ's and LPQ's
    root search starts from :func:`fold_start`'s value,
    as DoubleML 0.11.4's does: its ``_nuisance_est`` then leaves ``_coef_start_val`` at the
    ``__init__`` value (``irm/pq.py``: ``if not g_external or not m_external:
    self._coef_start_val = np.mean(ipw_vec)``; ``irm/lpq.py``: ``if not all(ext_preds)``)."""
    first = fold_start(model)

    def solve(
        spec: DMLSpec, data: DMLData, p: Preds, i_treat: int, means: Mapping[str, float]
    ) -> Solution:
        treatment, quantile = _options(spec)
        y, d = data.y, data.d[:, i_treat]
        mean: Any = np.float64(means[THETA_IPW])
        if model != "cvar" and _every_key_given(data, p, i_treat):
            mean = first(spec, data, i_treat)  # y's dtype, as DoubleML's _coef_start_val
        ipw = (spec.normalize_ipw, spec.trimming_threshold)
        if model == "cvar":
            psi_a, psi_b = cvar_score_elements(
                y, d, p["ml_g"], p["ml_m"], mean, treatment, quantile, *ipw
            )
            coef = est_coef(psi_a, psi_b)
            return coef, psi_a * coef + psi_b, psi_a
        if model == "lpq":
            z = column(spec, data, "z", i_treat)
            sol = lpq_solve(
                y, d, z, p["ml_m_z"], p["ml_m_d_z0"], p["ml_m_d_z1"], p["ml_g_du_z0"],
                p["ml_g_du_z1"], treatment, quantile, mean, *ipw,
            )  # fmt: skip
        else:
            sol = pq_solve(y, d, p["ml_g"], p["ml_m"], treatment, quantile, mean, *ipw)
        return sol.coef, sol.psi, sol.psi_deriv

    return solve


def fold_targets(model: str) -> Callable[[DMLSpec, DMLData, Preds, int], dict[str, np.ndarray]]:
    """The targets of the nuisances fitted to a fold's IPW quantile :math:`\\theta_k` (as DoubleML
    records them, on that fold's test rows): PQ's ``ml_g`` :math:`1\\{Y \\le \\theta_k\\}`, CVaR's
    :func:`~fanfit.dml.scores.quantile.cvar_g_target`, LPQ's ``ml_g_du_z0``/``ml_g_du_z1``
    :math:`1\\{D = d\\}1\\{Y \\le \\theta_k\\}`; ``preds`` holds :data:`THETA_IPW` per row."""

    def targets(spec: DMLSpec, data: DMLData, p: Preds, i_treat: int) -> dict[str, np.ndarray]:
        treatment, quantile = _options(spec)
        theta = np.asarray(p[THETA_IPW], dtype=np.float64)
        y = data.y
        if model == "cvar":
            return {"ml_g": cvar_g_target(y, theta, quantile)}  # type: ignore[arg-type]
        below = (y <= theta).astype(np.float64)
        if model == "lpq":
            du = (data.d[:, i_treat] == treatment) * below
            return {"ml_g_du_z0": du, "ml_g_du_z1": du}
        return {"ml_g": below}

    return targets


def parse_quantiles(value: str | float | Sequence[float] | None) -> tuple[float, ...] | None:
    """Quantile levels from a number, a sequence or the command line's comma-separated string.

    Returns
    -------
    tuple of float or None
        Each in (0, 1); None when ``value`` is None.

    Raises
    ------
    fanfit.errors.InvalidJobError
        An empty list, a value that is not a number, or one outside (0, 1), naming ``quantiles``.
    """
    if value is None:
        return None
    if isinstance(value, str):
        items: list[Any] = [v.strip() for v in value.split(",")]
    elif isinstance(value, int | float) and not isinstance(value, bool):
        items = [value]
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        raise InvalidJobError(f"quantiles must be numbers in (0, 1), got {value!r}")
    if not items or items == [""]:
        raise InvalidJobError("quantiles is empty: give numbers in (0, 1), e.g. 0.25,0.5,0.75")
    out = []
    for item in items:
        try:
            if isinstance(item, bool):
                raise ValueError
            q = float(item)
        except (TypeError, ValueError):
            raise InvalidJobError(f"quantiles must be numbers in (0, 1), got {item!r}") from None
        if not 0.0 < q < 1.0:
            raise InvalidJobError(f"quantiles must be numbers in (0, 1), got {q!r}")
        out.append(q)
    return tuple(out)


def one_quantile(model: str, quantiles: tuple[float, ...] | None) -> float | None:
    """The one quantile of a pq/cvar/lpq job (the spec refuses quantiles for the other models).

    Raises
    ------
    fanfit.errors.InvalidJobError
        Several quantiles, naming the class that takes them (DoubleMLQTE).
    """
    if quantiles is None:
        return None
    if len(quantiles) != 1:
        raise InvalidJobError(
            f"model {model!r} takes one quantile, got {len(quantiles)} ({', '.join(map(str, quantiles))}); "
            "for the effects at several quantiles use fanfit.DoubleMLQTE"
        )
    return quantiles[0]
