"""The model registry's entries: one :class:`~fanfit.dml.model_types.ModelDef` per DoubleML model.

Each entry's nuisance fits, score function (``psi_a``, ``psi_b``; the formulas are in
:mod:`fanfit.dml.scores`, one module per family), preliminary estimate and checks, as
DoubleML 0.11 declares them; :mod:`fanfit.dml.models` looks them up (:func:`fanfit.dml.models.
model_def`) and describes what an entry holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fanfit.dml import fold_procedures
from fanfit.dml.model_checks import (
    DMLData,
    DMLSpec,
    _check_apo,
    _check_did,
    _check_didcs,
    _check_iivm,
    _check_irm,
    _check_pliv,
    _check_plr,
    _check_ssm,
    _data_apo,
    _data_didcs,
    _data_iivm,
    _data_plr,
    column,
)
from fanfit.dml.model_types import (
    FOLD_TARGET,
    RESIDUAL,
    FoldProcedure,
    FoldSplit,
    ModelDef,
    Nuisance,
    Preds,
)
from fanfit.dml.scores.did import did_cs_score_elements, did_score_elements
from fanfit.dml.scores.lplr import (
    BETA,
    LPLR_SCORES,
    check_lplr_spec,
    lplr_final,
    lplr_inner_keys,
    lplr_instrument_weights,
    lplr_prelim,
    lplr_root,
    lplr_run,
    lplr_solve_fold_means,
    lplr_start,
    lplr_targets,
)
from fanfit.dml.scores.plm_irm import (
    apo_score_elements,
    cre_general_adjustment,
    iivm_score_elements,
    irm_score_elements,
    pliv_score_elements,
    pliv_theta_initial,
    plr_score_elements,
    plr_theta_initial,
)
from fanfit.dml.scores.rdd import RDFLEX_SCORES, check_rdflex_spec, iteration_keys, n_iterations
from fanfit.dml.scores.ssm import (
    ssm_nonignorable_run,
    ssm_score_elements,
    ssm_solve,
    ssm_start,
    ssm_targets,
)
from fanfit.errors import InvalidJobError

__all__ = ["REGISTRY"]


# --------------------------------------------------------------------------- nuisances
def _plr_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    # DoubleMLPLPR's cre_normal: ml_m also sees the treatment's unit mean (cre_general adjusts
    # its predictions instead, _plr_m_hat)
    m_features = "xm" if spec.approach == "cre_normal" else "x"
    out = [Nuisance("ml_l", "ml_l", "y"), Nuisance("ml_m", "ml_m", "d", features=m_features)]
    if spec.score == "IV-type":
        out.append(Nuisance("ml_g", "ml_g", RESIDUAL, stage=1))
    return tuple(out)


def _irm_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    return (
        Nuisance("ml_g0", "ml_g", "y", rows=("d", 0.0)),
        Nuisance("ml_g1", "ml_g", "y", rows=("d", 1.0)),
        Nuisance("ml_m", "ml_m", "d"),
    )


def _pliv_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    if len(spec.z_cols) > 1:
        return (
            Nuisance("ml_l", "ml_l", "y"),
            Nuisance("ml_r", "ml_r", "d"),
            *(Nuisance(f"ml_m_{z}", "ml_m", f"z:{z}") for z in spec.z_cols),
        )
    out = [
        Nuisance("ml_l", "ml_l", "y"),
        Nuisance("ml_m", "ml_m", "z"),
        Nuisance("ml_r", "ml_r", "d"),
    ]
    if spec.score == "IV-type":
        out.append(Nuisance("ml_g", "ml_g", RESIDUAL, stage=1))
    return tuple(out)


def _iivm_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    out = [
        Nuisance("ml_g0", "ml_g", "y", rows=("z", 0.0)),
        Nuisance("ml_g1", "ml_g", "y", rows=("z", 1.0)),
        Nuisance("ml_m", "ml_m", "z"),
    ]
    # DoubleML sets r(0, X) = 0 without always takers and r(1, X) = 1 without never takers
    if spec.always_takers:
        out.append(Nuisance("ml_r0", "ml_r", "d", rows=("z", 0.0)))
    if spec.never_takers:
        out.append(Nuisance("ml_r1", "ml_r", "d", rows=("z", 1.0)))
    return tuple(out)


def _apo_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    # DoubleML 0.11.4 irm/apo.py _nuisance_est: ml_g_d_lvl0 on (d, x) of the rows off the level
    # (used by its sensitivity analysis only), ml_g_d_lvl1 on x of the rows at the level,
    # ml_m on x of all rows with target 1{d == level}
    return (
        Nuisance("ml_g_d_lvl0", "ml_g", "y", rows=("treated", 0.0), features="dx"),
        Nuisance("ml_g_d_lvl1", "ml_g", "y", rows=("treated", 1.0)),
        Nuisance("ml_m", "ml_m", "treated"),
    )


def _did_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    # DoubleML 0.11.4 did/did.py _nuisance_est (fanfit.dml.scores.did.did_learners): ml_g0 and
    # ml_g1 on the rows with d == 0 / d == 1 for both scores, ml_m on all rows (observational)
    out = [
        Nuisance("ml_g0", "ml_g", "y", rows=("d", 0.0)),
        Nuisance("ml_g1", "ml_g", "y", rows=("d", 1.0)),
    ]
    if spec.score == "observational":
        out.append(Nuisance("ml_m", "ml_m", "d"))
    return tuple(out)


def _didcs_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    # DoubleML 0.11.4 did/did_cs.py _nuisance_est (fanfit.dml.scores.did.did_cs_learners):
    # ml_g_d{a}_t{b} on the rows with d == a and t == b, ml_m on all rows (observational)
    out = [
        Nuisance(f"ml_g_d{a}_t{b}", "ml_g", "y", rows=("d", float(a)), also=(("t", float(b)),))
        for a, b in ((0, 0), (0, 1), (1, 0), (1, 1))
    ]
    if spec.score == "observational":
        out.append(Nuisance("ml_m", "ml_m", "d"))
    return tuple(out)


def _ssm_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    # DoubleML 0.11.4 irm/ssm.py _nuisance_est, missing at random: ml_pi on (x, d) of all rows
    # with target s, ml_m on x with target d, ml_g_d0/ml_g_d1 on x of the rows with d == 0/1 and
    # s == 1 (_get_cond_smpls_2d); params_names order ml_g_d0, ml_g_d1, ml_pi, ml_m.
    # 'nonignorable': the same keys, targets and loss rows (DoubleML records the same targets);
    # the fold procedure (_SSM_NONIGNORABLE) fits them on the halves of each fold's training rows
    # with (x, d, z) for ml_pi and (x, ml_pi's predictions) for the others
    return (
        Nuisance("ml_g_d0", "ml_g", "y", rows=("d", 0.0), also=(("s", 1.0),), loss_all_rows=True),
        Nuisance("ml_g_d1", "ml_g", "y", rows=("d", 1.0), also=(("s", 1.0),), loss_all_rows=True),
        Nuisance("ml_pi", "ml_pi", "s", features="xd"),
        Nuisance("ml_m", "ml_m", "d"),
    )


# --------------------------------------------------------------------------- scores
def _plr_adjusted(spec: DMLSpec, data: DMLData, p: Preds, i_treat: int) -> Preds:
    """PLR's predictions as DoubleML keeps them: DoubleMLPLPR's ``'cre_general'`` adjusts
    ``ml_m``'s by unit (the one cluster column; ``spec.approach``), else as fitted."""
    if spec.approach != "cre_general":
        return p
    if data.d_mean is None or data.cluster_vars is None:
        raise InvalidJobError(
            "approach 'cre_general' needs d_mean_cols and the unit cluster column."
        )
    m_star = cre_general_adjustment(p["ml_m"], data.d_mean[:, i_treat], data.cluster_vars[:, 0])
    return {**p, "ml_m": m_star}


def _plr_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    g_hat = p["ml_g"] if spec.score == "IV-type" else None
    p = _plr_adjusted(spec, data, p, i_treat)
    return plr_score_elements(data.y, data.d[:, i_treat], p["ml_l"], p["ml_m"], g_hat, spec.score)


def _irm_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    d = data.d[:, i_treat]
    return irm_score_elements(
        data.y, d, p["ml_g0"], p["ml_g1"], p["ml_m"], spec.score, spec.normalize_ipw
    )


def _pliv_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    column(spec, data, "z", i_treat)  # names the missing instrument data
    assert data.z is not None
    if len(spec.z_cols) > 1:
        z = np.asfortranarray(data.z)  # DoubleML's z is a DataFrame's .values
        m_hat = np.full((data.n_obs, len(spec.z_cols)), np.nan)
        for j, col in enumerate(spec.z_cols):
            m_hat[:, j] = p[f"ml_m_{col}"]
    else:
        z = data.z[:, 0]
        m_hat = p["ml_m"]
    g_hat = p["ml_g"] if spec.score == "IV-type" else None
    d = data.d[:, i_treat]
    return pliv_score_elements(data.y, z, d, p["ml_l"], m_hat, p["ml_r"], g_hat, spec.score)


def _iivm_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    z = column(spec, data, "z", i_treat)
    d = data.d[:, i_treat]
    r_hat0 = p["ml_r0"] if spec.always_takers else np.zeros_like(d)
    r_hat1 = p["ml_r1"] if spec.never_takers else np.ones_like(d)
    return iivm_score_elements(
        data.y, z, d, p["ml_g0"], p["ml_g1"], p["ml_m"], r_hat0, r_hat1, spec.normalize_ipw
    )


def _apo_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    treated = column(spec, data, "treated", i_treat)
    return apo_score_elements(
        data.y, treated, p["ml_g_d_lvl1"], p["ml_m"], spec.normalize_ipw, data.weights,
        data.weights_bar,
    )  # fmt: skip


def _in_sample_normalization(spec: DMLSpec) -> bool:
    return spec.in_sample_normalization is not False  # DoubleML's default True


def _did_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    return did_score_elements(
        data.y, data.d[:, i_treat], p["ml_g0"], p["ml_g1"], p.get("ml_m"), spec.score,
        _in_sample_normalization(spec), spec.trimming_threshold,
    )  # fmt: skip


def _didcs_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    t = column(spec, data, "t", i_treat)
    return did_cs_score_elements(
        data.y, data.d[:, i_treat], t, p["ml_g_d0_t0"], p["ml_g_d0_t1"], p["ml_g_d1_t0"],
        p["ml_g_d1_t1"], p.get("ml_m"), spec.score,
        _in_sample_normalization(spec), spec.trimming_threshold,
    )  # fmt: skip


def _ssm_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    s = column(spec, data, "s", i_treat)
    return ssm_score_elements(
        data.y, data.d[:, i_treat], s, p["ml_g_d0"], p["ml_g_d1"], p["ml_pi"], p["ml_m"],
        spec.normalize_ipw, spec.trimming_threshold,
    )  # fmt: skip


def _plr_theta(spec: DMLSpec, data: DMLData, p: Preds, i_treat: int) -> float:
    p = _plr_adjusted(spec, data, p, i_treat)
    return plr_theta_initial(data.y, data.d[:, i_treat], p["ml_l"], p["ml_m"])


def _pliv_theta(spec: DMLSpec, data: DMLData, p: Preds, i_treat: int) -> float:
    z = column(spec, data, "z", i_treat)
    return pliv_theta_initial(data.y, z, data.d[:, i_treat], p["ml_l"], p["ml_m"], p["ml_r"])


# --------------------------------------------------------------------------- PQ, CVaR, LPQ
# (fold procedures, fanfit.dml.fold_procedures: the nested fits of the module docstring of
# fanfit.dml.scores.quantile, one unit per fold)
def _quantile_nuisances(g_stage: int) -> Callable[[DMLSpec], tuple[Nuisance, ...]]:
    # DoubleML 0.11.4 irm/pq.py and irm/cvar.py: ml_g fitted on the second half's rows with
    # d == treatment (target FOLD_TARGET: it depends on the fold's IPW quantile), ml_m on all rows;
    # PQ fits ml_g in stage 1 (its FoldSplit's final), CVaR everything in stage 0
    def nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
        level = float(spec.treatment if spec.treatment is not None else 1)
        return (
            Nuisance("ml_g", "ml_g", FOLD_TARGET, rows=("d", level), stage=g_stage),
            Nuisance("ml_m", "ml_m", "d"),
        )

    return nuisances


def _lpq_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    # DoubleML 0.11.4 irm/lpq.py, params_names order: ml_m_z on all rows, ml_m_d_z0/z1 and
    # ml_g_du_z0/z1 on the rows with z == 0 / z == 1 (ml_g_du_*: 1{d == treatment} 1{y <= q_k},
    # stage 1: its FoldSplit's final)
    return (
        Nuisance("ml_m_z", "ml_m", "z"),
        Nuisance("ml_m_d_z0", "ml_m", "d", rows=("z", 0.0)),
        Nuisance("ml_m_d_z1", "ml_m", "d", rows=("z", 1.0)),
        Nuisance("ml_g_du_z0", "ml_g", FOLD_TARGET, rows=("z", 0.0), stage=1),
        Nuisance("ml_g_du_z1", "ml_g", FOLD_TARGET, rows=("z", 1.0), stage=1),
    )


def _nonlinear_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    raise InvalidJobError(
        f"Model {spec.model!r} has no (psi_a, psi_b) score elements of fixed predictions: "
        "its fold procedure's solve gives coef, psi and psi_deriv (fanfit.dml.aggregate)."
    )


def _quantile_model(name: str, doubleml_class: str, score: str, **declared: Any) -> ModelDef:
    return ModelDef(
        name=name,
        doubleml_class=doubleml_class,
        scores=(score,),
        score_elements=_nonlinear_score,
        check_spec=fold_procedures.check_quantile_spec,
        doubleml_learners=("ml_g", "ml_m"),
        options=("treatment", "quantile"),
        ipw_options=True,
        doubleml_client_class=doubleml_class,
        fold_procedure=FoldProcedure(
            # DoubleML 0.11.4's external predictions: PQ any key, LPQ all or none, CVaR none
            external={"pq": "some", "lpq": "all"}.get(name, ""),
            run=fold_procedures.fold_run(name),
            start=fold_procedures.fold_start(name),
            scalars=(fold_procedures.THETA_IPW,),
            chained=name != "cvar",  # DoubleML's CVaR restarts every repetition from its start
            solve=fold_procedures.fold_solve(name),
            targets=fold_procedures.fold_targets(name),
            # PQ and LPQ: two stages, the chain of IPW searches in between; CVaR never chains
            # and runs its whole fold in one unit, one stage
            split=None
            if name == "cvar"
            else FoldSplit(
                prelim=fold_procedures.fold_prelim(name),
                root=fold_procedures.fold_root(name),
                final=fold_procedures.fold_final(name),
            ),
        ),
        **declared,
    )


#: What PQ and CVaR declare alike besides their learners' roles and purposes.
_PQ_COMMON: dict[str, Any] = {
    "binary": ("d",),
    "clipped": ("ml_m",),
    "propensity_group": "d",
}


#: SSM's ``'nonignorable'`` score: one unit per fold runs ml_pi on one half of the fold's
#: training rows, then ml_m and ml_g_d0/ml_g_d1 on the other (fanfit.dml.scores.ssm).
_SSM_NONIGNORABLE = FoldProcedure(
    run=ssm_nonignorable_run,
    start=ssm_start,
    scalars=(),
    chained=False,
    solve=ssm_solve,
    targets=ssm_targets,
    scores=("nonignorable",),
)


# --------------------------------------------------------------------------- LPLR
def _lplr_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    # DoubleML 0.11.4 plm/lplr.py, params_names order less the inner keys: ml_m on the training
    # rows with y == 0 ('nuisance_space'), ml_a on all of them, ml_t on the logit of the inner
    # ml_M predictions (FOLD_TARGET: not recorded by DoubleML), ml_M of y on (d, x); all inside
    # one unit per fold (fanfit.dml.scores.lplr). 'instrument': ml_m on every training row,
    # weighted by every fold's ml_M, in a second stage (the split of _LPLR)
    if spec.score == "instrument":
        m_fit = Nuisance("ml_m", "ml_m", "d", stage=1)
    else:
        m_fit = Nuisance("ml_m", "ml_m", "d", rows=("y", 0.0))
    return (
        m_fit,
        Nuisance("ml_a", "ml_a", "d"),
        Nuisance("ml_t", "ml_t", FOLD_TARGET),
        Nuisance("ml_M", "ml_M", "y", features="dx"),
    )


#: LPLR: one unit per outer fold runs its inner cross-fitting of ml_M and ml_a, then ml_t and
#: ml_m (fanfit.dml.scores.lplr.lplr_fold); the fold's slope beta travels as a fold scalar.
#: Score 'instrument' runs in two stages: ml_a, ml_t, ml_M (and beta, as the aux array) first,
#: then ml_m weighted by M_hat (1 - M_hat) of every fold's ml_M (FoldSplit.sample_weights).
_LPLR = FoldProcedure(
    run=lplr_run,
    start=lplr_start,
    scalars=(BETA,),
    chained=False,
    solve=lplr_solve_fold_means,
    targets=lplr_targets,
    split=FoldSplit(
        prelim=lplr_prelim,
        root=lplr_root,
        final=lplr_final,
        sample_weights=lplr_instrument_weights,
    ),
    split_scores=("instrument",),
    inner_folds=True,
    # DoubleML 0.11.4's external predictions: any key, ml_M and ml_a with their inner ones; the
    # units run even with every key given (each fold's beta comes from the inner predictions)
    external="some",
    external_keys=lplr_inner_keys,
    given_skips_units=False,
)


# --------------------------------------------------------------------------- RDFlex
def _rdflex_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    # DoubleML 0.11.4 rdd/rdd.py fit(): every iteration cross-fits ml_g (fuzzy: and ml_m) on
    # (Z, X) with that iteration's kernel weights, one stage each (fanfit.dml.scores.rdd)
    out = []
    for iteration in range(n_iterations(spec)):
        keys = iteration_keys(spec, iteration)
        out.append(Nuisance(keys[0], "ml_g", "y", features="zx", stage=iteration))
        if len(keys) > 1:
            out.append(Nuisance(keys[1], "ml_m", "d", features="zx", stage=iteration))
    return tuple(out)


def _client_estimate(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    raise InvalidJobError(
        f"Model {spec.model!r} has no score elements: its estimate is rdrobust's on the "
        "residuals, computed on the client (ModelDef.client_inputs)."
    )


# --------------------------------------------------------------------------- the registry
_IV_TYPE_G = "E[Y - D theta|X] (IV-type score)"

#: What DoubleMLDID and DoubleMLDIDCS declare alike: scores, learners, the clipped propensity
#: (DoubleML's ``clipping_threshold``), ``in_sample_normalization`` and DoubleMLDIDData.
_DID_COMMON: dict[str, Any] = {
    "scores": ("observational", "experimental"),
    "roles": {"ml_g": "either", "ml_m": "classifier"},
    "clipped": ("ml_m",),
    "propensity_group": "d",
    "doubleml_learners": ("ml_g",),
    "doubleml_optional": ("ml_m",),
    "options": ("in_sample_normalization",),
    "doubleml_data": "DoubleMLDIDData",
    "clipping_keyword": "clipping_threshold",
}

#: Every model fanfit runs, by ``spec.model``.
REGISTRY: dict[str, ModelDef] = {
    m.name: m
    for m in (
        ModelDef(
            name="plr",
            doubleml_class="DoubleMLPLR",
            scores=("partialling out", "IV-type"),
            roles={"ml_l": "either", "ml_m": "either", "ml_g": "regressor"},
            purposes={"ml_l": "E[Y|X]", "ml_m": "E[D|X]", "ml_g": _IV_TYPE_G},
            nuisances=_plr_nuisances,
            score_elements=_plr_score,
            check_spec=_check_plr,
            check_data=_data_plr,
            theta_initial=_plr_theta,
            doubleml_learners=("ml_l", "ml_m"),
            doubleml_optional=("ml_g",),
            transform_options=("d_mean_cols", "approach"),
            adjusted_preds=_plr_adjusted,
        ),
        ModelDef(
            name="irm",
            doubleml_class="DoubleMLIRM",
            scores=("ATE", "ATTE"),
            roles={"ml_g": "either", "ml_m": "classifier"},
            purposes={"ml_g": "E[Y|D,X]", "ml_m": "P(D=1|X)"},
            nuisances=_irm_nuisances,
            score_elements=_irm_score,
            check_spec=_check_irm,
            binary=("d",),
            clipped=("ml_m",),
            propensity_group="d",
            doubleml_learners=("ml_g", "ml_m"),
            ipw_options=True,
        ),
        ModelDef(
            name="pliv",
            doubleml_class="DoubleMLPLIV",
            scores=("partialling out", "IV-type"),
            roles={
                "ml_l": "regressor",
                "ml_m": "regressor",
                "ml_r": "regressor",
                "ml_g": "regressor",
            },
            purposes={"ml_l": "E[Y|X]", "ml_m": "E[Z|X]", "ml_r": "E[D|X]", "ml_g": _IV_TYPE_G},
            nuisances=_pliv_nuisances,
            score_elements=_pliv_score,
            check_spec=_check_pliv,
            theta_initial=_pliv_theta,
            doubleml_learners=("ml_l", "ml_m", "ml_r"),
            doubleml_optional=("ml_g",),
        ),
        ModelDef(
            name="iivm",
            doubleml_class="DoubleMLIIVM",
            scores=("LATE",),
            roles={"ml_g": "either", "ml_m": "classifier", "ml_r": "classifier"},
            purposes={"ml_g": "E[Y|Z,X]", "ml_m": "P(Z=1|X)", "ml_r": "P(D=1|Z,X)"},
            nuisances=_iivm_nuisances,
            score_elements=_iivm_score,
            check_spec=_check_iivm,
            binary=("d", "z"),
            check_data=_data_iivm,
            clipped=("ml_m",),
            propensity_group="z",
            doubleml_learners=("ml_g", "ml_m", "ml_r"),
            options=("subgroups",),
            ipw_options=True,
        ),
        ModelDef(
            name="apo",
            doubleml_class="DoubleMLAPO",
            scores=("APO",),
            roles={"ml_g": "either", "ml_m": "classifier"},
            purposes={"ml_g": "E[Y|D,X]", "ml_m": "P(D=treatment_level|X)"},
            nuisances=_apo_nuisances,
            score_elements=_apo_score,
            check_spec=_check_apo,
            check_data=_data_apo,
            clipped=("ml_m",),
            propensity_group="treated",
            doubleml_learners=("ml_g", "ml_m"),
            options=("treatment_level",),
            weights=True,
            ipw_options=True,
        ),
        ModelDef(
            name="did",
            doubleml_class="DoubleMLDID",
            purposes={"ml_g": "E[Y1 - Y0|D,X]", "ml_m": "P(D=1|X)"},
            nuisances=_did_nuisances,
            score_elements=_did_score,
            check_spec=_check_did,
            binary=("d",),
            **_DID_COMMON,
        ),
        ModelDef(
            name="didcs",
            doubleml_class="DoubleMLDIDCS",
            purposes={"ml_g": "E[Y|D,T,X]", "ml_m": "P(D=1|X)"},
            nuisances=_didcs_nuisances,
            score_elements=_didcs_score,
            check_spec=_check_didcs,
            binary=("d", "t"),
            check_data=_data_didcs,
            data_options={"t_col": "t_col"},
            **_DID_COMMON,
        ),
        ModelDef(
            name="ssm",
            doubleml_class="DoubleMLSSM",
            scores=("missing-at-random", "nonignorable"),
            roles={"ml_g": "either", "ml_pi": "classifier", "ml_m": "classifier"},
            purposes={
                "ml_g": "E[Y|D,S=1,X] (nonignorable: E[Y|D,S=1,X,pi])",
                "ml_pi": "P(S=1|D,X) (nonignorable: P(S=1|D,X,Z))",
                "ml_m": "P(D=1|X) (nonignorable: P(D=1|X,pi))",
            },
            nuisances=_ssm_nuisances,
            score_elements=_ssm_score,
            check_spec=_check_ssm,
            binary=("d", "s"),
            clipped=("ml_m",),
            propensity_group="d",
            doubleml_learners=("ml_g", "ml_pi", "ml_m"),
            ipw_options=True,
            data_options={"s_col": "s_col"},
            doubleml_client_class="DoubleMLSSM",
            fold_procedure=_SSM_NONIGNORABLE,
        ),
        _quantile_model(
            "pq",
            "DoubleMLPQ",
            "PQ",
            roles={"ml_g": "classifier", "ml_m": "classifier"},
            purposes={"ml_g": "P(Y <= q_ipw|D=d,X)", "ml_m": "P(D=1|X)"},
            nuisances=_quantile_nuisances(g_stage=1),
            **_PQ_COMMON,
        ),
        _quantile_model(
            "cvar",
            "DoubleMLCVAR",
            "CVaR",
            roles={"ml_g": "regressor", "ml_m": "classifier"},
            purposes={"ml_g": "E[max(q, (Y - tau q)/(1 - tau))|D=d,X]", "ml_m": "P(D=1|X)"},
            nuisances=_quantile_nuisances(g_stage=0),
            **_PQ_COMMON,
        ),
        _quantile_model(
            "lpq",
            "DoubleMLLPQ",
            "LPQ",
            roles={"ml_g": "classifier", "ml_m": "classifier"},
            purposes={"ml_g": "P(D=d, Y <= q_ipw|Z=z,X)", "ml_m": "P(Z=1|X), P(D=1|Z=z,X)"},
            nuisances=_lpq_nuisances,
            binary=("d", "z"),
            clipped=("ml_m_z",),
            propensity_group="z",
        ),
        ModelDef(
            name="lplr",
            doubleml_class="DoubleMLLPLR",
            scores=LPLR_SCORES,
            roles={"ml_M": "classifier", "ml_t": "regressor", "ml_m": "either", "ml_a": "either"},
            purposes={
                "ml_M": "P(Y=1|D,X)",
                "ml_t": "E[logit P(Y=1|D,X)|X]",
                "ml_m": "E[D|X] (rows with Y=0)",
                "ml_a": "E[D|X]",
            },
            nuisances=_lplr_nuisances,
            score_elements=_nonlinear_score,
            check_spec=check_lplr_spec,
            binary=("y",),
            doubleml_learners=("ml_M", "ml_t", "ml_m"),
            doubleml_optional=("ml_a",),
            options=("n_folds_inner",),
            doubleml_client_class="DoubleMLLPLR",
            fold_procedure=_LPLR,
            learner_copies={"ml_a": "ml_m"},
        ),
        ModelDef(
            name="rdflex",
            doubleml_class="RDFlex",
            scores=RDFLEX_SCORES,
            roles={"ml_g": "either", "ml_m": "classifier"},
            purposes={
                "ml_g": "E[Y|score=cutoff+-,X] (with kernel weights)",
                "ml_m": "P(D=1|score=cutoff+-,X) (fuzzy design)",
            },
            nuisances=_rdflex_nuisances,
            score_elements=_client_estimate,
            check_spec=check_rdflex_spec,
            binary=("d",),
            doubleml_learners=("ml_g",),
            doubleml_optional=("ml_m",),
            options=("n_iterations",),
            doubleml_data="DoubleMLRDDData",
            doubleml_client_class="RDFlex",
            client_inputs=True,
        ),
    )
}
