"""Nuisance parameters on a spec (:mod:`fanfit.dml.nuisance_params`): LearnerSpec.with_params,
the checks of DMLSpec.learner_params, each fit unit's learner, and the ``learner_params`` option
(a mapping from Python, a JSON or YAML file from the command line and job files)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fanfit.client.options import EstimateOptions, read_learner_params
from fanfit.dml import DMLSpec, estimate_in_process, validate_data
from fanfit.dml.folds import draw_folds
from fanfit.dml.nuisance_params import fold_params, param_keys, unit_learner
from fanfit.errors import InvalidJobError, InvalidLearnerError
from fanfit.learners import LearnerSpec


def _spec(learner_params=None, **overrides) -> DMLSpec:
    base = {
        "model": "irm", "score": "ATE", "y_col": "y", "d_cols": ("d",), "x_cols": ("x0", "x1"),
        "learners": {"ml_g": "Lasso", "ml_m": "LogisticRegression"}, "n_folds": 3, "n_rep": 2,
        "learner_params": learner_params,
    }  # fmt: skip
    base.update(overrides)
    return DMLSpec(**base)


# ------------------------------------------------------------------ LearnerSpec.with_params
def test_with_params_sets_a_plain_learners_parameters_as_set_params() -> None:
    spec = LearnerSpec.parse('Lasso:{"alpha": 0.5, "max_iter": 500}')
    out = spec.with_params({"alpha": np.float64(0.1), "fit_intercept": np.bool_(False)})
    assert out.params == {"alpha": 0.1, "max_iter": 500, "fit_intercept": False}
    assert type(out.params["alpha"]) is float and type(out.params["fit_intercept"]) is bool
    assert out.build().get_params()["alpha"] == 0.1
    assert spec.with_params({}) is spec


def test_with_params_reaches_pipeline_steps_and_search_estimators() -> None:
    pipe = LearnerSpec.from_estimator(
        __import__("sklearn.pipeline", fromlist=["make_pipeline"]).make_pipeline(
            __import__("sklearn.preprocessing", fromlist=["StandardScaler"]).StandardScaler(),
            __import__("sklearn.linear_model", fromlist=["Lasso"]).Lasso(),
        )
    )
    built = pipe.with_params({"lasso__alpha": 0.25}).build()
    assert built.get_params()["lasso__alpha"] == 0.25
    with pytest.raises(InvalidLearnerError, match=r"STEP__PARAM"):
        pipe.with_params({"alpha": 0.25})


def test_with_params_refuses_unknown_and_non_json_parameters_by_name() -> None:
    spec = LearnerSpec.parse("Lasso")
    with pytest.raises(InvalidLearnerError, match="alpah"):
        spec.with_params({"alpah": 0.1})
    with pytest.raises(InvalidLearnerError, match="alpha"):
        spec.with_params({"alpha": np.array([0.1])})
    with pytest.raises(InvalidLearnerError, match="must be a dict"):
        spec.with_params([("alpha", 0.1)])  # type: ignore[arg-type]


# ------------------------------------------------------------------ DMLSpec.learner_params
def test_each_unit_gets_its_folds_parameters() -> None:
    per_fold = [[{"C": 0.1}, {"C": 0.2}, {"C": 0.3}], [{"C": 1.0}, {"C": 2.0}, {"C": 3.0}]]
    spec = _spec({"ml_g1": {"d": {"alpha": 0.05}}, "ml_m": {"d": per_fold}})
    spec.validate()
    assert param_keys(spec) == {"ml_g0": "ml_g", "ml_g1": "ml_g", "ml_m": "ml_m"}
    assert fold_params(spec, "ml_m", 0, 1, 2) == {"C": 3.0}
    assert fold_params(spec, "ml_g0", 0, 0, 0) == {}
    assert unit_learner(spec, "ml_g1", 0, 1, 2).params["alpha"] == 0.05
    assert unit_learner(spec, "ml_g0", 0, 1, 2) is spec.learners["ml_g"]
    # AND the parameters survive the job's JSON
    again = DMLSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again.learner_params == spec.learner_params


@pytest.mark.parametrize(
    ("given", "match"),
    [
        ({"ml_g": {"d": {"alpha": 0.1}}}, r"nuisance 'ml_g'.*fits ml_g0, ml_g1, ml_m"),
        ({"ml_m": {"t": {"C": 0.1}}}, r"treatment 't'"),
        ({"ml_m": {"d": [[{"C": 0.1}] * 3]}}, r"n_rep=2 lists of n_folds=3"),
        ({"ml_m": {"d": [[{"C": 0.1}] * 3, [{"C": 0.1}] * 2]}}, r"\[1\] must be a list of n_folds=3"),
        ({"ml_m": {"d": [[{"C": 0.1}] * 3, [{"C": 0.1}, 5, {"C": 0.1}]]}}, r"\[1\]\[1\] must be an object"),
        ({"ml_m": "C=0.1"}, r"learner_params\['ml_m'\] must be an object"),
        ([("ml_m", {})], r"learner_params must be an object"),
    ],
)  # fmt: skip
def test_malformed_learner_params_are_named(given, match) -> None:
    with pytest.raises(InvalidJobError, match=match):
        _spec(given).validate()


def test_a_parameter_the_learner_rejects_names_the_nuisance_and_fold() -> None:
    per_fold = [[{"C": 0.1}, {"C": 0.2}, {"Cee": 0.3}], [{"C": 1.0}] * 3]
    with pytest.raises(
        InvalidLearnerError, match=r"learner_params\['ml_m'\]\['d'\]\[0\]\[2\].*Cee"
    ):
        _spec({"ml_m": {"d": per_fold}}).validate()


def test_the_in_process_estimate_uses_the_parameters(make_frame) -> None:
    # GIVEN one IRM spec with and one without a smaller penalty on ml_g1's Lasso
    frame = make_frame("irm", n_obs=200, binary_d=True)
    x_cols = tuple(c for c in frame.columns if c.startswith("x"))
    plain = _spec(x_cols=x_cols)
    tuned = _spec({"ml_g1": {"d": {"alpha": 0.001}}}, x_cols=x_cols)
    data = validate_data(plain, list(frame.columns), frame.to_numpy())
    folds = draw_folds(data.n_obs, 3, 2, 0)
    # WHEN both are estimated THEN ml_g1's predictions differ and ml_g0's do not
    a, b = estimate_in_process(plain, data, folds), estimate_in_process(tuned, data, folds)
    np.testing.assert_array_equal(a.predictions["ml_g0"], b.predictions["ml_g0"])
    assert not np.allclose(a.predictions["ml_g1"], b.predictions["ml_g1"])


# ------------------------------------------------------------------ the option
def test_the_option_reads_json_and_yaml_files(tmp_path) -> None:
    given = {"ml_m": {"d": {"C": 0.5}}, "ml_g1": {"d": {"alpha": 0.1}}}
    (tmp_path / "p.json").write_text(json.dumps(given))
    (tmp_path / "p.yaml").write_text("ml_m:\n  d: {C: 0.5}\nml_g1:\n  d:\n    alpha: 0.1\n")
    assert read_learner_params(tmp_path / "p.json") == given
    assert read_learner_params(str(tmp_path / "p.yaml")) == given
    assert read_learner_params(given) == given and read_learner_params(None) is None
    options = EstimateOptions(
        data="unused.csv", y="y", d="d", x=["x0"], model="irm", ml_g="Lasso",
        ml_m="LogisticRegression", learner_params=str(tmp_path / "p.yaml"),
    )  # fmt: skip
    spec, _ = options.build_spec()
    assert spec.learner_params == given


def test_a_bad_file_is_named(tmp_path) -> None:
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "broken.json").write_text('{"ml_m": ')
    with pytest.raises(InvalidJobError, match="list.yaml must hold an object"):
        read_learner_params(tmp_path / "list.yaml")
    with pytest.raises(InvalidJobError, match="broken.json is not JSON or YAML"):
        read_learner_params(tmp_path / "broken.json")
    with pytest.raises(InvalidJobError, match="cannot read"):
        read_learner_params(tmp_path / "missing.json")
    with pytest.raises(InvalidJobError, match="learner_params must be an object"):
        read_learner_params(3)


def test_a_units_workload_signature_has_its_parameters() -> None:
    # GIVEN ml_m's parameters in fold 2 of repetition 0 only
    from fanfit.dml import FitUnit
    from fanfit.jobs.estimate.data import unit_signature

    per_fold = [[{}, {}, {"C": 0.01}], [{}, {}, {}]]
    plain, tuned = _spec(), _spec({"ml_m": {"d": per_fold}})

    def signature(spec, i_fold):
        return unit_signature(spec, FitUnit(0, 0, 0, i_fold, "ml_m"), 500, 2)

    # THEN that unit's throughput is recorded apart, the other units' with the plain learner's
    assert signature(tuned, 2) != signature(plain, 2)
    assert signature(tuned, 1) == signature(plain, 1)
