r"""Orthogonal scores, linear in the parameter, and their solution and variance.

Every score here is linear in :math:`\theta`,

.. math::

    \psi(W; \theta, \eta) = \psi_a(W; \eta)\, \theta + \psi_b(W; \eta),

so the DML2 estimate of one repetition solves the empirical moment over all ``n_obs`` out-of-fold
score values, :math:`\hat\theta = -\bar\psi_b / \bar\psi_a`, and its variance is
:math:`\hat\sigma^2 = \hat J^{-2}\, \overline{\psi^2} / N` with :math:`\hat J = \bar\psi_a`
(Chernozhukov et al. 2018, "Double/debiased machine learning for treatment and structural
parameters", The Econometrics Journal 21(1), Definition 3.2 and Theorem 3.2; DoubleML user guide,
"Score functions" and "Variance estimation and confidence intervals").

The formulas, and the order of the floating point operations, are DoubleML 0.11.4's
(``plm/plr.py``, ``irm/irm.py``, ``plm/pliv.py``, ``irm/iivm.py``, ``double_ml_score_mixins.py``,
``utils/_estimation.py``, ``utils/_propensity_score.py``) so that the numbers agree bit for bit.
All arrays are 1-d of shape ``(n_obs,)`` unless stated.
"""

from __future__ import annotations

import numpy as np

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


def plr_score_elements(
    y: np.ndarray,
    d: np.ndarray,
    l_hat: np.ndarray | None,
    m_hat: np.ndarray,
    g_hat: np.ndarray | None,
    score: str,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Score elements of the partially linear regression model (PLR).

    Model :math:`Y = D\theta_0 + g_0(X) + \zeta`, :math:`D = m_0(X) + V`, with
    :math:`\ell_0(X) = E[Y|X]` (Chernozhukov et al. 2018, Section 4.1; DoubleML ``DoubleMLPLR``).
    With :math:`\hat v = D - \hat m(X)`:

    ``'partialling out'`` (Robinson-style residual-on-residual, eq. 4.4):

    .. math::

        \psi_a = -\hat v^2, \qquad \psi_b = \hat v\,(Y - \hat\ell(X)).

    ``'IV-type'`` (eq. 4.3):

    .. math::

        \psi_a = -\hat v\, D, \qquad \psi_b = \hat v\,(Y - \hat g(X)).

    Parameters
    ----------
    y, d : numpy.ndarray, shape (n_obs,)
        Outcome and the active treatment.
    l_hat, m_hat, g_hat : numpy.ndarray, shape (n_obs,)
        Out-of-fold predictions of ``ml_l``, ``ml_m`` and ``ml_g`` (``l_hat`` unused for IV-type,
        ``g_hat`` unused for partialling out; may be None then).
    score : str
        ``'partialling out'`` or ``'IV-type'``.

    Returns
    -------
    psi_a, psi_b : numpy.ndarray, shape (n_obs,)
    """
    v_hat = d - m_hat
    if score == "IV-type":
        psi_a = -np.multiply(v_hat, d)
        psi_b = np.multiply(v_hat, y - g_hat)
    else:
        u_hat = y - l_hat
        psi_a = -np.multiply(v_hat, v_hat)
        psi_b = np.multiply(v_hat, u_hat)
    return psi_a, psi_b


def plr_theta_initial(y: np.ndarray, d: np.ndarray, l_hat: np.ndarray, m_hat: np.ndarray) -> float:
    r"""Preliminary PLR estimate from the partialling-out score, for fitting ``ml_g`` (IV-type).

    .. math::

        \tilde\theta = \frac{\overline{(D - \hat m)(Y - \hat\ell)}}{\overline{(D - \hat m)^2}}

    computed as DoubleML does (``-nanmean(psi_b) / nanmean(psi_a)``). ``ml_g`` is then fitted on
    :math:`Y - \tilde\theta D` (DoubleML ``DoubleMLPLR._nuisance_est``).

    Parameters
    ----------
    y, d, l_hat, m_hat : numpy.ndarray, shape (n_obs,)

    Returns
    -------
    float
    """
    psi_a = -np.multiply(d - m_hat, d - m_hat)
    psi_b = np.multiply(d - m_hat, y - l_hat)
    return float(-np.nanmean(psi_b) / np.nanmean(psi_a))


def cre_general_adjustment(m_hat: np.ndarray, d_mean: np.ndarray, ids: np.ndarray) -> np.ndarray:
    r"""DoubleMLPLPR's correlated-random-effects adjustment of ``ml_m``'s predictions
    (``approach='cre_general'``).

    .. math::

        \hat m^*_{it} = \hat m_{it} + \bar D_i - \overline{\hat m}_i,

    the bars unit means (DoubleML 0.11.4, ``DoubleMLPLPR._nuisance_est``; Clarke and Polselli
    2025, "Double machine learning for static panel models with fixed effects", section 3).
    DoubleML takes the unit means of :math:`\hat m` with a pandas group mean (compensated
    summation); here they are plain sums in row order, which agree to a few units in the last
    place.

    Parameters
    ----------
    m_hat : numpy.ndarray, shape (n_obs,)
        Out-of-fold predictions of ``ml_m`` (on the covariates and their unit means).
    d_mean : numpy.ndarray, shape (n_obs,)
        The unit mean of the treatment on each row (DoubleML's ``d_mean[:, i_treat]``).
    ids : numpy.ndarray, shape (n_obs,)
        The unit of each row (``id_var`` of the transformed data).

    Returns
    -------
    numpy.ndarray, shape (n_obs,)
    """
    _, unit = np.unique(ids, return_inverse=True)
    m_hat = np.asarray(m_hat, dtype=float)
    unit_mean = np.bincount(unit, weights=m_hat) / np.bincount(unit)
    return m_hat + np.asarray(d_mean, dtype=float) - unit_mean[unit]


def clip_propensity(m_hat: np.ndarray, trimming_threshold: float) -> np.ndarray:
    r"""Truncate propensity scores to :math:`[t, 1 - t]` (DoubleML's ``'truncate'`` rule, ``PSProcessor.adjust_ps``).

    Parameters
    ----------
    m_hat : numpy.ndarray, shape (n_obs,)
    trimming_threshold : float
        :math:`t`, in (0, 0.5).

    Returns
    -------
    numpy.ndarray, shape (n_obs,)
    """
    return np.clip(m_hat, a_min=trimming_threshold, a_max=1 - trimming_threshold)


def normalize_ipw_weights(m_hat: np.ndarray, d: np.ndarray) -> np.ndarray:
    r"""Normalized propensities so that the inverse probability weights average to one (Hajek).

    .. math::

        \tilde m = D\, \hat m\, \overline{D/\hat m} + (1 - D)\,\bigl(1 - (1 - \hat m)\,
        \overline{(1 - D)/(1 - \hat m)}\bigr)

    (DoubleML ``utils/_propensity_score._normalize_ipw``).

    Parameters
    ----------
    m_hat, d : numpy.ndarray, shape (n_obs,)

    Returns
    -------
    numpy.ndarray, shape (n_obs,)
    """
    mean_treat1 = np.mean(np.divide(d, m_hat))
    mean_treat0 = np.mean(np.divide(1.0 - d, 1.0 - m_hat))
    return np.multiply(d, np.multiply(m_hat, mean_treat1)) + np.multiply(
        1.0 - d, 1.0 - np.multiply(1.0 - m_hat, mean_treat0)
    )


def irm_score_elements(
    y: np.ndarray,
    d: np.ndarray,
    g_hat0: np.ndarray,
    g_hat1: np.ndarray,
    m_hat: np.ndarray,
    score: str,
    normalize_ipw: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Score elements of the interactive regression model (IRM), binary treatment.

    Model :math:`Y = g_0(D, X) + U`, :math:`D = m_0(X) + V` (Chernozhukov et al. 2018, Section 5.1;
    DoubleML ``DoubleMLIRM``). With :math:`\hat u_j = Y - \hat g(j, X)` and weights
    :math:`\omega, \bar\omega`:

    .. math::

        \psi_b = \omega\,(\hat g(1,X) - \hat g(0,X))
                 + \bar\omega\Bigl(\frac{D\,\hat u_1}{\hat m(X)} - \frac{(1-D)\,\hat u_0}{1-\hat m(X)}\Bigr),
        \qquad \psi_a = -\frac{\omega}{\frac{1}{N}\sum_i \omega_i}.

    ``'ATE'`` (eq. 5.3): :math:`\omega = \bar\omega = 1`, so :math:`\psi_a = -1`.
    ``'ATTE'`` (eq. 5.4): :math:`\omega = D/p`, :math:`\bar\omega = \hat m(X)/p` with
    :math:`p = \overline{D}`.

    Parameters
    ----------
    y, d : numpy.ndarray, shape (n_obs,)
        Outcome and binary treatment.
    g_hat0, g_hat1 : numpy.ndarray, shape (n_obs,)
        Out-of-fold predictions of ``ml_g`` fitted on the untreated / treated training rows.
    m_hat : numpy.ndarray, shape (n_obs,)
        Propensity predictions of ``ml_m``, already clipped (:func:`clip_propensity`).
    score : str
        ``'ATE'`` or ``'ATTE'``.
    normalize_ipw : bool
        Use :func:`normalize_ipw_weights` of ``m_hat``.

    Returns
    -------
    psi_a, psi_b : numpy.ndarray, shape (n_obs,)
    """
    m_hat_adj = normalize_ipw_weights(m_hat, d) if normalize_ipw else m_hat
    u_hat0 = y - g_hat0
    u_hat1 = y - g_hat1
    ones = np.ones(y.shape[0])
    if score == "ATTE":
        subgroup = ones * d
        subgroup_probability = np.mean(subgroup)
        weights = np.divide(subgroup, subgroup_probability)
        weights_bar = np.divide(np.multiply(m_hat_adj, ones), subgroup_probability)
    else:
        weights = ones
        weights_bar = ones
    psi_b = weights * (g_hat1 - g_hat0) + weights_bar * (
        np.divide(np.multiply(d, u_hat1), m_hat_adj)
        - np.divide(np.multiply(1.0 - d, u_hat0), 1.0 - m_hat_adj)
    )
    psi_a = -1.0 * np.divide(weights, np.mean(weights))
    return psi_a, psi_b


def apo_score_elements(
    y: np.ndarray,
    treated: np.ndarray,
    g_hat1: np.ndarray,
    m_hat: np.ndarray,
    normalize_ipw: bool = False,
    weights: np.ndarray | None = None,
    weights_bar: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Score elements of the average potential outcome (APO) at one treatment level.

    Model :math:`Y = g_0(D, X) + U` with a discrete treatment :math:`D`; the APO of level
    :math:`\ell` is :math:`\theta_0 = E[g_0(\ell, X)]`. With :math:`T = 1\{D = \ell\}`,
    :math:`\hat g(\ell, X)` fitted on the rows with :math:`T = 1` and the propensity
    :math:`\hat m(X) = \hat P(T = 1|X)` (DoubleML 0.11.4 ``irm/apo.py``
    ``DoubleMLAPO._score_elements`` and ``_get_weights``; weights :math:`\omega`,
    :math:`\bar\omega`, both 1 by default):

    .. math::

        \psi_a = -\frac{\omega}{\frac{1}{N}\sum_i \omega_i}, \qquad
        \psi_b = \omega\, \hat g(\ell, X) + \bar\omega\, \frac{T\,(Y - \hat g(\ell, X))}{\hat m(X)}.

    DoubleMLAPO's ``weights`` argument: an array is :math:`\omega` (and :math:`\bar\omega =
    \omega`); a dict gives ``weights`` (:math:`\omega`) and ``weights_bar`` (:math:`\bar\omega`,
    one column per repetition, of which the caller passes this repetition's).

    Parameters
    ----------
    y : numpy.ndarray, shape (n_obs,)
    treated : numpy.ndarray, shape (n_obs,)
        :math:`T`, 0.0 / 1.0.
    g_hat1 : numpy.ndarray, shape (n_obs,)
        Out-of-fold ``ml_g_d_lvl1`` predictions.
    m_hat : numpy.ndarray, shape (n_obs,)
        Out-of-fold ``ml_m`` predictions, already clipped (:func:`clip_propensity`).
    normalize_ipw : bool
        Normalize the propensities first (:func:`normalize_ipw_weights`).
    weights : numpy.ndarray of shape (n_obs,), optional
        :math:`\omega`, non-negative; default ones.
    weights_bar : numpy.ndarray of shape (n_obs,), optional
        :math:`\bar\omega` of this repetition; default ``weights``.

    Returns
    -------
    psi_a, psi_b : numpy.ndarray, shape (n_obs,)
    """
    if normalize_ipw:
        m_hat = normalize_ipw_weights(m_hat, treated)
    u_hat = y - g_hat1
    if weights is None:
        weights = np.ones(y.shape[0])
    if weights_bar is None:
        weights_bar = weights
    psi_b = weights * g_hat1 + weights_bar * np.divide(np.multiply(treated, u_hat), m_hat)
    psi_a = -1.0 * np.divide(weights, np.mean(weights))
    return psi_a, psi_b


def pliv_score_elements(
    y: np.ndarray,
    z: np.ndarray,
    d: np.ndarray,
    l_hat: np.ndarray,
    m_hat: np.ndarray,
    r_hat: np.ndarray,
    g_hat: np.ndarray | None,
    score: str,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Score elements of the partially linear IV model (PLIV, DoubleML's default ``partialX``).

    Model :math:`Y - D\theta_0 = g_0(X) + \zeta`, :math:`Z = m_0(X) + V`, with
    :math:`\ell_0(X) = E[Y|X]`, :math:`r_0(X) = E[D|X]` (Chernozhukov et al. 2018, Section 4.2;
    DoubleML ``DoubleMLPLIV``). With :math:`\hat u = Y - \hat\ell(X)`, :math:`\hat w = D - \hat r(X)`,
    :math:`\hat v = Z - \hat m(X)`:

    one instrument, ``'partialling out'``:

    .. math::

        \psi_a = -\hat w\, \hat v, \qquad \psi_b = \hat v\, \hat u;

    one instrument, ``'IV-type'``:

    .. math::

        \psi_a = -\hat v\, D, \qquad \psi_b = \hat v\, (Y - \hat g(X));

    several instruments (``'partialling out'``, 2SLS-like): :math:`\tilde r` is the least squares
    projection (with intercept) of :math:`\hat w` on the columns of :math:`\hat v`, and

    .. math::

        \psi_a = -\hat w\, \tilde r, \qquad \psi_b = \tilde r\, \hat u.

    Parameters
    ----------
    y, d : numpy.ndarray, shape (n_obs,)
    z : numpy.ndarray, shape (n_obs,) for one instrument or (n_obs, n_z)
    l_hat, r_hat : numpy.ndarray, shape (n_obs,)
    m_hat : numpy.ndarray, shape like ``z``
    g_hat : numpy.ndarray of shape (n_obs,) or None
        Only for ``'IV-type'``.
    score : str

    Returns
    -------
    psi_a, psi_b : numpy.ndarray, shape (n_obs,)
    """
    u_hat = y - l_hat
    w_hat = d - r_hat
    v_hat = z - m_hat
    if v_hat.ndim == 2:
        from sklearn.linear_model import LinearRegression

        reg = LinearRegression(fit_intercept=True).fit(v_hat, w_hat)
        r_hat_tilde = reg.predict(v_hat)
        return -np.multiply(w_hat, r_hat_tilde), np.multiply(r_hat_tilde, u_hat)
    if score == "IV-type":
        return -np.multiply(v_hat, d), np.multiply(v_hat, y - g_hat)
    return -np.multiply(w_hat, v_hat), np.multiply(v_hat, u_hat)


def pliv_theta_initial(
    y: np.ndarray,
    z: np.ndarray,
    d: np.ndarray,
    l_hat: np.ndarray,
    m_hat: np.ndarray,
    r_hat: np.ndarray,
) -> float:
    r"""Preliminary PLIV estimate (one instrument) from the partialling-out score, for ``ml_g``.

    .. math::

        \tilde\theta = -\frac{\overline{(Z - \hat m)(Y - \hat\ell)}}{\overline{-(D - \hat r)(Z - \hat m)}}

    ``ml_g`` is then fitted on :math:`Y - \tilde\theta D` (DoubleML ``_nuisance_est_partial_x``).

    Returns
    -------
    float
    """
    psi_a = -np.multiply(d - r_hat, z - m_hat)
    psi_b = np.multiply(z - m_hat, y - l_hat)
    return float(-np.nanmean(psi_b) / np.nanmean(psi_a))


def iivm_score_elements(
    y: np.ndarray,
    z: np.ndarray,
    d: np.ndarray,
    g_hat0: np.ndarray,
    g_hat1: np.ndarray,
    m_hat: np.ndarray,
    r_hat0: np.ndarray,
    r_hat1: np.ndarray,
    normalize_ipw: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Score elements of the interactive IV model (IIVM), local average treatment effect.

    Binary instrument :math:`Z` and treatment :math:`D` (Chernozhukov et al. 2018, Section 5.2;
    DoubleML ``DoubleMLIIVM``, score ``'LATE'``):

    .. math::

        \psi_b = \hat g(1,X) - \hat g(0,X) + \frac{Z (Y - \hat g(1,X))}{\hat m(X)}
                 - \frac{(1-Z)(Y - \hat g(0,X))}{1 - \hat m(X)},

        \psi_a = -\Bigl(\hat r(1,X) - \hat r(0,X) + \frac{Z (D - \hat r(1,X))}{\hat m(X)}
                 - \frac{(1-Z)(D - \hat r(0,X))}{1 - \hat m(X)}\Bigr),

    with :math:`g(z,X) = E[Y|Z=z,X]`, :math:`r(z,X) = E[D|Z=z,X]`, :math:`m(X) = P(Z=1|X)` and
    both subgroups (always and never takers) estimated.

    Parameters
    ----------
    y, z, d : numpy.ndarray, shape (n_obs,)
    g_hat0, g_hat1, r_hat0, r_hat1 : numpy.ndarray, shape (n_obs,)
    m_hat : numpy.ndarray, shape (n_obs,)
        Already clipped (:func:`clip_propensity`).
    normalize_ipw : bool
        As DoubleML 0.11.4, the normalization uses the *treatment* ``d`` as indicator
        (``_normalize_ipw(m_hat, d)`` in ``iivm.py``).

    Returns
    -------
    psi_a, psi_b : numpy.ndarray, shape (n_obs,)
    """
    u_hat0 = y - g_hat0
    u_hat1 = y - g_hat1
    w_hat0 = d - r_hat0
    w_hat1 = d - r_hat1
    m_hat_adj = normalize_ipw_weights(m_hat, d) if normalize_ipw else m_hat
    psi_b = (
        g_hat1
        - g_hat0
        + np.divide(np.multiply(z, u_hat1), m_hat_adj)
        - np.divide(np.multiply(1.0 - z, u_hat0), 1.0 - m_hat_adj)
    )
    psi_a = -1 * (
        r_hat1
        - r_hat0
        + np.divide(np.multiply(z, w_hat1), m_hat_adj)
        - np.divide(np.multiply(1.0 - z, w_hat0), 1.0 - m_hat_adj)
    )
    return psi_a, psi_b


def est_coef(psi_a: np.ndarray, psi_b: np.ndarray) -> float:
    r"""Root of the empirical linear score, :math:`\hat\theta = -\bar\psi_b / \bar\psi_a`.

    Parameters
    ----------
    psi_a, psi_b : numpy.ndarray, shape (n_obs,)

    Returns
    -------
    float
    """
    return -np.mean(psi_b) / np.mean(psi_a)


def var_est(psi: np.ndarray, psi_deriv: np.ndarray) -> float:
    r"""Asymptotic variance of :math:`\hat\theta` (no clustering).

    .. math::

        \hat\sigma^2 = \frac{1}{N \hat J^2}\, \frac{1}{N}\sum_i \psi(W_i; \hat\theta, \hat\eta)^2,
        \qquad \hat J = \frac{1}{N}\sum_i \psi_a(W_i; \hat\eta)

    (Chernozhukov et al. 2018, Theorem 3.2; DoubleML ``utils/_estimation._var_est``).

    Parameters
    ----------
    psi, psi_deriv : numpy.ndarray, shape (n_obs,)

    Returns
    -------
    float
        :math:`\hat\sigma^2` (the squared standard error).
    """
    var_scaling_factor = psi.shape[0]
    j_hat = np.mean(psi_deriv)
    gamma_hat = np.mean(np.square(psi))
    scaling = np.divide(1.0, np.multiply(var_scaling_factor, np.square(j_hat)))
    return np.multiply(scaling, gamma_hat)


def cluster_est_coef(
    psi_a: np.ndarray,
    psi_b: np.ndarray,
    test_sets: list[np.ndarray],
    test_clusters: list[list[np.ndarray]],
) -> float:
    r"""Root of the linear score on clustered data: the fold means weighted by the test clusters.

    .. math::

        \hat\theta = -\frac{\sum_f s_f \sum_{i \in T_f} \psi_b(W_i)}
                            {\sum_f s_f \sum_{i \in T_f} \psi_a(W_i)},
        \qquad s_f = \Bigl(\prod_v |I_{f,v}|\Bigr)^{-1},

    with :math:`T_f` the test rows of cross-fitting fold :math:`f` and :math:`I_{f,v}` its test
    clusters of cluster variable :math:`v` (Chiang, Kato, Ma and Sasaki 2021, "Multiway cluster
    robust double/debiased machine learning", JBES 40(3), eq. (3.3); DoubleML
    ``LinearScoreMixin._est_coef`` with ``DoubleML._est_causal_pars``'s scaling factors).

    Parameters
    ----------
    psi_a, psi_b : numpy.ndarray, shape (n_obs,)
    test_sets : list of numpy.ndarray of int
        Test rows of every fold (DoubleML's ``smpls[i_rep][f][1]``).
    test_clusters : list of list of numpy.ndarray
        Test clusters of every fold, one array per cluster variable (``smpls_cluster[i_rep][f][1]``;
        :func:`~fanfit.dml.folds.cluster_folds_to_smpls`).

    Returns
    -------
    float
    """
    psi_a_subsample_mean = 0.0
    psi_b_subsample_mean = 0.0
    for test_index, clusters in zip(test_sets, test_clusters, strict=True):
        scaling_factor = 1.0 / np.prod(np.array([len(inds) for inds in clusters]))
        psi_a_subsample_mean += scaling_factor * np.sum(psi_a[test_index])
        psi_b_subsample_mean += scaling_factor * np.sum(psi_b[test_index])
    return float(-psi_b_subsample_mean / psi_a_subsample_mean)


def cluster_var_est(
    psi: np.ndarray,
    psi_deriv: np.ndarray,
    test_sets: list[np.ndarray],
    test_clusters: list[list[np.ndarray]],
    cluster_vars: np.ndarray,
    n_folds_per_cluster: int,
) -> tuple[float, int]:
    r"""Cluster-robust variance of :math:`\hat\theta`, one- or two-way (DoubleML ``_var_est``).

    One cluster variable, folds :math:`f = k` with test clusters :math:`I_k`:

    .. math::

        \hat J = \frac{1}{K}\sum_k \frac{1}{|I_k|}\sum_{i \in T_k}\psi_a(W_i), \qquad
        \hat\Gamma = \frac{1}{K}\sum_k \frac{1}{|I_k|}\sum_{c \in I_k}
                      \Bigl(\sum_{i \in c}\psi(W_i)\Bigr)^2, \qquad
        \hat\sigma^2 = \frac{\hat\Gamma}{C\, \hat J^2},

    :math:`C` the number of clusters. Two cluster variables, folds :math:`f = (k, l)` with test
    clusters :math:`I_k, J_l`: :math:`\hat J = K^{-2}\sum_{k,l} (|I_k||J_l|)^{-1} \sum_{i \in T_{kl}}
    \psi_a`, and :math:`\hat\Gamma = K^{-2}\sum_{k,l} \frac{\min(|I_k|, |J_l|)}{(|I_k||J_l|)^2}
    \bigl(\sum_{c \in I_k} (\sum_{i \in T_{kl}, i \in c} \psi_i)^2 + \sum_{c \in J_l}
    (\sum_{i \in T_{kl}, i \in c} \psi_i)^2\bigr)`, :math:`C = \min(C_1, C_2)` (Chiang et al.
    2021, Section 3, the variance estimator of Theorem 3; DoubleML ``utils/_estimation._var_est``).

    DoubleML sums ``np.outer(psi_c, psi_c)``; the square of the cluster sum used here is the
    same number (up to rounding, far below 1e-9) without the ``(n_c, n_c)`` matrix. It relies on
    every cluster lying in one fold of its variable (:func:`~fanfit.dml.folds.validate_cluster_folds`),
    so the rows of a test cluster within the fold's test set are all of DoubleML's rows.

    Parameters
    ----------
    psi, psi_deriv : numpy.ndarray, shape (n_obs,)
        Score and its derivative (``psi_a``) at :math:`\hat\theta`.
    test_sets, test_clusters : list
        As :func:`cluster_est_coef`.
    cluster_vars : numpy.ndarray, shape (n_obs, n_cluster_vars)
        1 or 2 columns.
    n_folds_per_cluster : int
        :math:`K`.

    Returns
    -------
    sigma2_hat : float
        The squared standard error.
    var_scaling_factor : int
        :math:`C`.
    """
    cluster_vars = np.asarray(cluster_vars)
    n_vars = cluster_vars.shape[1]
    codes = []
    for v in range(n_vars):
        uniques, inverse = np.unique(cluster_vars[:, v], return_inverse=True)
        codes.append((uniques.size, inverse.reshape(-1)))
    gamma_hat = 0.0
    j_hat = 0.0
    for test_index, clusters in zip(test_sets, test_clusters, strict=True):
        sizes = [len(c) for c in clusters]
        if n_vars == 1:
            const = 1 / sizes[0]
            weight = sizes[0]
        else:
            const = np.divide(min(sizes[0], sizes[1]), np.square(sizes[0] * sizes[1]))
            weight = sizes[0] * sizes[1]
        psi_test = psi[test_index]
        for n_clusters, inverse in codes:
            sums = np.bincount(inverse[test_index], weights=psi_test, minlength=n_clusters)
            gamma_hat += const * np.sum(np.square(sums))
        j_hat += np.sum(psi_deriv[test_index]) / weight
    if n_vars == 1:
        var_scaling_factor = codes[0][0]
        j = np.divide(j_hat, n_folds_per_cluster)
        gamma_hat = np.divide(gamma_hat, n_folds_per_cluster)
    else:
        var_scaling_factor = min(codes[0][0], codes[1][0])
        j = np.divide(j_hat, np.square(n_folds_per_cluster))
        gamma_hat = np.divide(gamma_hat, np.square(n_folds_per_cluster))
    scaling = np.divide(1.0, np.multiply(var_scaling_factor, np.square(j)))
    return float(np.multiply(scaling, gamma_hat)), int(var_scaling_factor)


def aggregate_coefs_and_ses(
    all_coef: np.ndarray, all_se: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    r"""Aggregate repeated cross-fitting: median estimate, and the standard error read off the median upper bound.

    .. math::

        \hat\theta = \operatorname{med}_r \hat\theta_r, \qquad
        \hat\sigma = \bigl(\operatorname{med}_r(\hat\theta_r + 1.96\,\hat\sigma_r) - \hat\theta\bigr) / 1.96

    (DoubleML 0.11 ``utils/_estimation._aggregate_coefs_and_ses``; Chernozhukov et al. 2018,
    Section 3.4, uses the median for repeated splits.)

    Parameters
    ----------
    all_coef, all_se : numpy.ndarray, shape (n_treat, n_rep)

    Returns
    -------
    coef, se : numpy.ndarray, shape (n_treat,)
    """
    coefs = np.median(all_coef, 1)
    critical_value = 1.96
    all_upper_bounds = all_coef + critical_value * all_se
    agg_upper_bounds = np.median(all_upper_bounds, axis=1)
    ses = (agg_upper_bounds - coefs) / critical_value
    return coefs, ses
