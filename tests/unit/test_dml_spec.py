"""DMLSpec: validation of models, scores, columns, options and learners; JSON round trip."""

from __future__ import annotations

import json

import pytest

from fanfit.dml import DEFAULT_SCORE, MODELS, DMLSpec, required_learners
from fanfit.errors import InvalidJobError, InvalidLearnerError
from fanfit.learners import LearnerSpec

X = ("x0", "x1")


def _spec(**overrides) -> DMLSpec:
    base = {
        "model": "plr",
        "score": "partialling out",
        "y_col": "y",
        "d_cols": ("d",),
        "x_cols": X,
        "learners": {"ml_l": "LinearRegression", "ml_m": "LinearRegression"},
    }
    base.update(overrides)
    return DMLSpec(**base)


VALID = {
    ("plr", "partialling out"): {"learners": {"ml_l": "Lasso", "ml_m": "LogisticRegression"}},
    ("plr", "IV-type"): {"learners": {"ml_l": "Lasso", "ml_m": "Lasso", "ml_g": "Ridge"}},
    ("irm", "ATE"): {"learners": {"ml_g": "Ridge", "ml_m": "LogisticRegression"}},
    ("irm", "ATTE"): {"learners": {"ml_g": "LogisticRegression", "ml_m": "RandomForestClassifier"}},
    ("pliv", "partialling out"): {
        "z_cols": ("z1", "z2"),
        "learners": {"ml_l": "Lasso", "ml_m": "Lasso", "ml_r": "Lasso"},
    },
    ("pliv", "IV-type"): {
        "z_cols": ("z",),
        "learners": {"ml_l": "Lasso", "ml_m": "Lasso", "ml_r": "Lasso", "ml_g": "Lasso"},
    },
    ("iivm", "LATE"): {
        "z_cols": ("z",),
        "learners": {"ml_g": "Lasso", "ml_m": "LogisticRegression", "ml_r": "LogisticRegression"},
    },
}


@pytest.mark.parametrize(("model", "score"), list(VALID))
def test_every_model_and_score_validates_and_round_trips_through_json(model, score) -> None:
    # GIVEN a valid spec for each model and score
    spec = _spec(model=model, score=score, **VALID[(model, score)])
    spec.validate()
    # WHEN written to JSON and read back
    back = DMLSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    # THEN nothing changed, and the learners needed are DoubleML's
    assert back == spec
    assert set(spec.learners) == set(required_learners(model, score))


def test_construction_normalizes_lists_and_learner_strings() -> None:
    spec = _spec(d_cols=["d"], x_cols=["x0", "x1"], z_cols=None)
    assert spec.d_cols == ("d",) and spec.x_cols == X and spec.z_cols == ()
    assert spec.learners["ml_l"] == LearnerSpec("LinearRegression")


def test_from_dict_takes_the_default_score_and_defaults() -> None:
    # GIVEN a minimal dict without score and options
    spec = DMLSpec.from_dict(
        {
            "model": "irm",
            "y_col": "y",
            "d_cols": ["d"],
            "x_cols": ["x0"],
            "learners": {
                "ml_g": "Ridge",
                "ml_m": {"name": "LogisticRegression", "params": {"C": 0.5}},
            },
        }
    )
    # THEN DoubleML's defaults apply
    assert spec.score == DEFAULT_SCORE["irm"] == "ATE"
    assert (spec.n_folds, spec.n_rep, spec.trimming_threshold, spec.normalize_ipw) == (
        5,
        1,
        0.01,
        False,
    )
    assert (spec.n_rep_boot, spec.boot_method) == (500, None)
    assert spec.learners["ml_m"].params == {"C": 0.5}
    assert MODELS == (
        "plr",
        "irm",
        "pliv",
        "iivm",
        "apo",
        "did",
        "didcs",
        "ssm",
        "pq",
        "cvar",
        "lpq",
        "lplr",
        "rdflex",
    )


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"model": "ols"}, "Unknown model 'ols'"),
        ({"score": "ATE"}, "Invalid score 'ATE' for model 'plr'"),
        ({"n_folds": 1}, "n_folds"),
        ({"n_folds": 2.0}, "n_folds"),
        ({"n_rep": 0}, "n_rep"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**32}, "seed"),
        ({"trimming_threshold": 0.5}, "trimming_threshold"),
        ({"normalize_ipw": "yes"}, "normalize_ipw"),
        ({"n_rep_boot": 0}, "n_rep_boot"),
        ({"boot_method": "poisson"}, "boot_method"),
        ({"d_cols": ()}, "d_cols is empty"),
        ({"x_cols": ()}, "x_cols is empty"),
        ({"y_col": ""}, "y_col"),
        ({"d_cols": ("d", "d")}, "more than once"),
        ({"x_cols": ("x0", "d")}, "'d' is set as both d_cols and x_cols"),
        ({"x_cols": ("x0", "y")}, "'y' is set as both y_col and x_cols"),
        ({"z_cols": ("z",)}, "takes no instruments"),
        ({"d_mean_cols": ("m1", "m2")}, "give one per treatment"),
        ({"d_mean_cols": ("x0",)}, "'x0' is set as both x_cols and d_mean_cols"),
        ({"model": "irm", "score": "ATE", "d_mean_cols": ("m",),
          "learners": {"ml_g": "Lasso", "ml_m": "LogisticRegression"}},
         "d_mean_cols is an option of model 'plr' only"),
        ({"approach": "cre_general"}, "approach 'cre_general' needs d_mean_cols"),
        ({"d_mean_cols": ("m",), "approach": "between"}, "approach must be one of"),
        ({"d_mean_cols": ("m",), "approach": "cre_general"}, "give the unit id as the one cluster"),
    ],
)  # fmt: skip
def test_validate_rejects_bad_options_naming_them(overrides, match) -> None:
    with pytest.raises(InvalidJobError, match=match):
        _spec(**overrides).validate()


def test_missing_learner_is_named_with_what_it_estimates() -> None:
    # GIVEN an IV-type PLR without ml_g
    spec = _spec(score="IV-type")
    # THEN the error names ml_g and its role
    with pytest.raises(InvalidJobError, match=r"needs learner 'ml_g' for E\[Y - D theta\|X\]"):
        spec.validate()


def test_extra_learner_is_refused() -> None:
    spec = _spec(learners={"ml_l": "Lasso", "ml_m": "Lasso", "ml_g": "Lasso"})
    with pytest.raises(InvalidJobError, match="does not use learner.*'ml_g'"):
        spec.validate()


@pytest.mark.parametrize(
    ("model", "extra", "match"),
    [
        (
            "irm",
            {"d_cols": ("d1", "d2"), "learners": {"ml_g": "Ridge", "ml_m": "LogisticRegression"}},
            "exactly one binary treatment",
        ),
        (
            "pliv",
            {"learners": {"ml_l": "Lasso", "ml_m": "Lasso", "ml_r": "Lasso"}},
            "at least one instrument",
        ),
        (
            "iivm",
            {
                "z_cols": ("z1", "z2"),
                "learners": {
                    "ml_g": "Lasso",
                    "ml_m": "LogisticRegression",
                    "ml_r": "LogisticRegression",
                },
            },
            "exactly one binary instrument",
        ),
    ],
)
def test_model_specific_column_rules(model, extra, match) -> None:
    score = DEFAULT_SCORE[model]
    with pytest.raises(InvalidJobError, match=match):
        _spec(model=model, score=score, **extra).validate()


def test_pliv_iv_type_needs_exactly_one_instrument() -> None:
    spec = _spec(
        model="pliv",
        score="IV-type",
        z_cols=("z1", "z2"),
        learners={"ml_l": "Lasso", "ml_m": "Lasso", "ml_r": "Lasso", "ml_g": "Lasso"},
    )
    with pytest.raises(InvalidJobError, match="exactly one instrument"):
        spec.validate()


@pytest.mark.parametrize(
    ("model", "learners", "z_cols", "match"),
    [
        ("irm", {"ml_g": "Ridge", "ml_m": "Ridge"}, (), "ml_m .* must be a classifier"),
        (
            "iivm",
            {"ml_g": "Ridge", "ml_m": "LogisticRegression", "ml_r": "Lasso"},
            ("z",),
            "ml_r .* classifier",
        ),
        (
            "pliv",
            {"ml_l": "Lasso", "ml_m": "Lasso", "ml_r": "LogisticRegression"},
            ("z",),
            "ml_r .* regressor",
        ),
        ("plr", None, (), "ml_g .* must be a regressor"),
    ],
)
def test_classifier_and_regressor_roles_are_checked(model, learners, z_cols, match) -> None:
    # GIVEN a learner of the wrong kind for its role
    if learners is None:
        spec = _spec(
            score="IV-type",
            learners={"ml_l": "Lasso", "ml_m": "Lasso", "ml_g": "LogisticRegression"},
        )
    else:
        spec = _spec(model=model, score=DEFAULT_SCORE[model], learners=learners, z_cols=z_cols)
    # THEN validate says which learner must be what
    with pytest.raises(InvalidLearnerError, match=match):
        spec.validate()


def test_from_dict_rejects_unknown_and_missing_keys() -> None:
    good = _spec().to_dict()
    with pytest.raises(InvalidJobError, match="Unknown option.*'nfolds'"):
        DMLSpec.from_dict({**good, "nfolds": 3})
    without_x = {k: v for k, v in good.items() if k != "x_cols"}
    with pytest.raises(InvalidJobError, match="no 'x_cols'"):
        DMLSpec.from_dict(without_x)
    with pytest.raises(InvalidLearnerError, match="Unknown learner 'SVR'"):
        DMLSpec.from_dict({**good, "learners": {"ml_l": "SVR", "ml_m": "Lasso"}})
    with pytest.raises(InvalidJobError, match="JSON object"):
        DMLSpec.from_dict(["plr"])  # type: ignore[arg-type]


def test_d_mean_cols_are_read_and_seen_by_ml_m_only() -> None:
    # GIVEN DoubleMLPLPR's cre_normal: each treatment's unit mean, a feature of ml_m only
    import numpy as np

    from fanfit.dml import validate_data
    from fanfit.dml.unit_fits import features

    spec = _spec(x_cols=("x0",), d_mean_cols=["m"])
    spec.validate()
    assert spec.d_mean_cols == ("m",) and spec.used_cols[-1] == "m"
    assert DMLSpec.from_dict(json.loads(json.dumps(spec.to_dict()))).d_mean_cols == ("m",)
    # WHEN the data is read THEN ml_m sees x0 and m, ml_l x0 only
    values = np.arange(20.0).reshape(5, 4)
    data = validate_data(spec, ["y", "d", "x0", "m"], values)
    np.testing.assert_array_equal(data.d_mean[:, 0], values[:, 3])
    np.testing.assert_array_equal(features(spec, data, "ml_m", 0), values[:, 2:4])
    np.testing.assert_array_equal(features(spec, data, "ml_l", 0), values[:, 2:3])
    # AND the approach defaults to cre_normal and travels with the spec
    assert spec.approach == "cre_normal"
    assert DMLSpec.from_dict(spec.to_dict()).approach == "cre_normal"


def test_cre_general_adjusts_ml_m_in_the_score_and_its_first_stage() -> None:
    # GIVEN DoubleMLPLPR's cre_general: the unit means of d, the unit as the one cluster column
    import numpy as np

    from fanfit.dml import validate_data
    from fanfit.dml.models import model_def
    from fanfit.dml.scores.plm_irm import plr_score_elements, plr_theta_initial
    from fanfit.dml.unit_fits import features

    spec = _spec(
        x_cols=("x0",), d_mean_cols=["m"], cluster_cols=["id"], approach="cre_general", n_folds=3
    )
    spec.validate()
    rng = np.random.default_rng(0)
    ids = np.repeat([0.0, 1.0, 2.0], 4)
    d = rng.normal(size=12)
    d_mean = np.repeat([d[i * 4 : i * 4 + 4].mean() for i in range(3)], 4)
    values = np.column_stack([rng.normal(size=12), d, rng.normal(size=12), ids, d_mean])
    data = validate_data(spec, ["y", "d", "x0", "id", "m"], values)
    # THEN ml_m sees the covariates alone (the mean is no feature)
    np.testing.assert_array_equal(features(spec, data, "ml_m", 0), values[:, 2:3])
    # AND the score and the preliminary estimate see m* = m + mean_i(d) - mean_i(m)
    p = {"ml_l": rng.normal(size=12), "ml_m": rng.normal(size=12), "ml_g": rng.normal(size=12)}
    unit_m = np.repeat([p["ml_m"][i * 4 : i * 4 + 4].mean() for i in range(3)], 4)
    m_star = p["ml_m"] + d_mean - unit_m
    mdef = model_def("plr")
    assert mdef.theta_initial is not None
    theta = mdef.theta_initial(spec, data, p, 0)
    assert theta == pytest.approx(plr_theta_initial(data.y, d, p["ml_l"], m_star), rel=1e-12)
    psi_a, psi_b = mdef.score_elements(spec, data, p, 0)
    want_a, want_b = plr_score_elements(data.y, d, p["ml_l"], m_star, None, "partialling out")
    np.testing.assert_allclose(psi_a, want_a, rtol=1e-12)
    np.testing.assert_allclose(psi_b, want_b, rtol=1e-12)
