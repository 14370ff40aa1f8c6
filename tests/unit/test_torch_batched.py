"""Batched TorchMLP fits (fanfit.learners.torch_batched): equal to the solo fits, memory-planned,
without per-step host synchronisation, with a measured step mode."""

from __future__ import annotations

import numpy as np
import pytest

from fanfit.errors import InvalidLearnerError
from fanfit.learners.torch_batched import (
    STEP_MODES,
    BatchedFit,
    choose_step_mode,
    fit_bytes,
    fit_predict_batched,
    plan_batch,
)
from fanfit.learners.torch_mlp import TorchMLPClassifier, TorchMLPRegressor

torch = pytest.importorskip("torch")

SMALL = {"hidden_layer_sizes": (16, 16), "epochs": 8, "batch_size": 64, "lr": 1e-2}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # Tiny networks are fastest on one thread, and the machine's cores are shared.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _fold_fits(n_obs: int = 321, n_folds: int = 5, n_rep: int = 2, seed: int = 0, classify=False):
    """Cross-fitting's fits of one learner: every (repetition, fold), each on the rows outside its
    fold (folds differ in size by one), predicting its fold; seeds as distinct as the units'."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_obs, 4))
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=n_obs)
    if classify:
        y = (y > np.median(y)).astype(int)
    fits = []
    for i_rep in range(n_rep):
        fold = rng.permutation(np.arange(n_obs) % n_folds)
        for i_fold in range(n_folds):
            train, test = np.flatnonzero(fold != i_fold), np.flatnonzero(fold == i_fold)
            fits.append(BatchedFit(X[train], y[train], X[test], 1000 * i_rep + i_fold))
    return fits


def _solo(est, fit, proba=False):
    solo = est.set_params(random_state=fit.random_state).fit(fit.x_train, fit.y_train)
    return solo.predict_proba(fit.x_test) if proba else solo.predict(fit.x_test)


def _max_rel(a, b) -> float:
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-12)))


def test_batched_regressor_fits_equal_their_solo_fits_in_float64() -> None:
    # GIVEN ten cross-fitting fits (5 folds x 2 repetitions; training rows 256 and 257, so some
    # fits take one more step per epoch than others: 257 rows with batch 64 are 5 steps, 256 are 4)
    fits = _fold_fits()
    assert {len(f.x_train) for f in fits} == {256, 257}
    est = TorchMLPRegressor(**SMALL, weight_decay=1e-3, dtype="float64", device="cpu")
    # WHEN they are trained as one batched model
    run = fit_predict_batched(est, fits)
    # THEN each fit's predictions equal its solo fit's to 1e-9 relative, in one batch
    assert run.batches == [len(fits)] and run.step_mode == "eager" and run.device == "cpu"
    for fit, pred in zip(fits, run.predictions):
        solo = _solo(est, fit)
        assert pred.shape == solo.shape == (len(fit.x_test),)
        assert _max_rel(pred, solo) < 1e-9
    # AND the fits differ from one another (their own seeds and rows)
    assert not np.allclose(run.predictions[0][:10], run.predictions[5][:10])


def test_batched_classifier_probabilities_equal_their_solo_fits_in_float64() -> None:
    # GIVEN classifier fits of one architecture
    fits = _fold_fits(n_rep=1, classify=True, seed=3)
    est = TorchMLPClassifier(**SMALL, dtype="float64", device="cpu")
    # WHEN batched
    run = fit_predict_batched(est, fits)
    # THEN each fit's class probabilities and classes equal its solo fit's
    for fit, proba, classes in zip(fits, run.predictions, run.classes):
        np.testing.assert_array_equal(classes, [0, 1])
        assert _max_rel(proba, _solo(est, fit, proba=True)) < 1e-9


def _fits_predicting_new_rows():
    """Cross-fitting's fits (641 rows), each predicting the same 400 new rows; and their y."""
    rng = np.random.default_rng(5)
    X_new = rng.normal(size=(400, 4))
    y_new = np.sin(2 * X_new[:, 0]) + X_new[:, 1] ** 2 + 0.1 * rng.normal(size=400)
    fits = _fold_fits(n_obs=641, seed=5)
    return [BatchedFit(f.x_train, f.y_train, X_new, f.random_state) for f in fits], y_new


def _median_rmse_ratio(est, fits, predictions, y_new) -> float:
    """The median over fits of the batched fit's out-of-sample RMSE over its solo fit's."""

    def rmse(pred):
        return np.sqrt(np.mean((pred - y_new) ** 2))

    return float(np.median([rmse(p) / rmse(_solo(est, f)) for f, p in zip(fits, predictions)]))


def test_batched_float32_fits_are_as_good_as_their_solo_fits() -> None:
    # GIVEN the same fits in float32 (matrix kernels sum in another order: not bit-equal)
    fits, y_new = _fits_predicting_new_rows()
    est = TorchMLPRegressor(**SMALL, device="cpu")
    # WHEN batched and solo
    run = fit_predict_batched(est, fits)
    # THEN the median out-of-sample RMSE ratio is within 1% of 1
    assert abs(_median_rmse_ratio(est, fits, run.predictions, y_new) - 1) < 0.01
    assert run.predictions[0].dtype == np.float64


def test_a_tiny_memory_budget_runs_the_fits_in_several_batches_with_the_same_results() -> None:
    # GIVEN seven fits and a budget that holds three of them
    fits = _fold_fits(n_obs=101, n_rep=1, seed=2)[:5] + _fold_fits(n_obs=99, n_rep=1, seed=4)[:2]
    est = TorchMLPRegressor(**SMALL, dtype="float64", device="cpu")
    per_fit = fit_bytes(4, (16, 16), 1, 64, max(len(f.x_train) + len(f.x_test) for f in fits), 8)
    budget_mb = 3.5 * per_fit / 2**20
    # WHEN batched under that budget, and under a large one
    small = fit_predict_batched(est, fits, memory_budget_mb=budget_mb)
    large = fit_predict_batched(est, fits, memory_budget_mb=1024)
    # THEN the small budget runs 3 + 3 + 1 fits, the large one all seven at once
    assert small.batches == [3, 3, 1] and large.batches == [7]
    assert len(small.batch_seconds) == 3 and all(s > 0 for s in small.batch_seconds)
    # AND every fit's predictions are the same either way, and equal to its solo fit's
    for fit, a, b in zip(fits, small.predictions, large.predictions):
        assert _max_rel(a, b) < 1e-12
        assert _max_rel(a, _solo(est, fit)) < 1e-9


def test_the_memory_plan_is_the_budget_over_one_fits_bytes() -> None:
    # GIVEN one fit of 3 x 256 units on 9 features, batch 256, 9,915 rows, float32
    per_fit = fit_bytes(9, (256, 256, 256), 1, 256, 9915, 4)
    params = 10 * 256 + 2 * 257 * 256 + 257
    # THEN its bytes count the parameters six times, the activations and the data
    expected = 4 * (6 * params + 4 * 256 * (9 + 768 + 1) + 9915 * 10) + 16 * 256
    assert per_fit == expected
    # AND the plan is floor(budget / bytes), at least one
    assert plan_batch(per_fit, 10.5 * per_fit) == 10
    assert plan_batch(per_fit, 0.5 * per_fit) == 1
    with pytest.raises(InvalidLearnerError):
        plan_batch(0, 1e9)


class _SyncCounter:
    """Counts the tensor methods that make the host wait for the device."""

    NAMES = ("item", "cpu", "tolist", "numpy", "__bool__", "__float__", "__int__")

    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        for name in self.NAMES:
            original = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._wrap(original))

    def _wrap(self, original):
        def counted(tensor, *args, **kwargs):
            self.calls += 1
            return original(tensor, *args, **kwargs)

        return counted


def test_the_step_loop_does_not_synchronise_with_the_host(monkeypatch) -> None:
    # GIVEN a sync counter on every tensor-to-host method
    fits = _fold_fits(n_obs=161, n_rep=1, seed=6)
    counts = {}
    for epochs in (2, 6):
        est = TorchMLPRegressor(**{**SMALL, "epochs": epochs}, device="cpu")
        with monkeypatch.context() as m:
            counter = _SyncCounter(m)
            # WHEN the fits are trained for 2 and for 6 epochs (3 steps per epoch each)
            fit_predict_batched(est, fits)
        counts[epochs] = counter.calls
    # THEN the host reads tensors once per fit and epoch (its generator's permutation, a CPU
    # tensor) and twice for the predictions (.cpu().numpy() of the one chunk), never per step:
    # four more epochs of 2 or 3 steps each add exactly the four epochs' permutations
    per_epoch = len(fits)
    assert counts[2] == 2 * per_epoch + 2
    assert counts[6] - counts[2] == 4 * per_epoch


def test_the_step_mode_is_the_fastest_measured() -> None:
    # GIVEN three candidate modes whose steps take 3, 1 and 2 ticks of a fake clock, and one that
    # cannot run here
    ticks = [0.0]

    def taking(n):
        def run():
            ticks[0] += n

        return run

    def broken():
        raise RuntimeError("no compiler")

    # WHEN the switch measures them
    mode, timings = choose_step_mode(
        {"eager": taking(3), "cuda_graph": taking(1), "compile": broken},
        steps=4,
        clock=lambda: ticks[0],
    )
    # THEN it picks the fastest that ran, with its seconds per step
    assert mode == "cuda_graph"
    assert timings == {"eager": 3.0, "cuda_graph": 1.0}
    with pytest.raises(InvalidLearnerError):
        choose_step_mode({"compile": broken})


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@CUDA
def test_on_cuda_float64_batched_fits_equal_their_solo_fits() -> None:
    # GIVEN the ten cross-fitting fits of the float64 test, on the GPU
    fits = _fold_fits()
    est = TorchMLPRegressor(**SMALL, weight_decay=1e-3, dtype="float64", device="cuda")
    # WHEN they are trained as one batched model on the GPU (the mode the worker would choose)
    run = fit_predict_batched(est, fits)
    # THEN each fit's predictions equal its solo fit's on the GPU to 1e-9 relative
    assert run.device == "cuda" and run.batches == [len(fits)]
    for fit, pred in zip(fits, run.predictions):
        assert _max_rel(pred, _solo(est, fit)) < 1e-9


@CUDA
@pytest.mark.parametrize("mode", ["eager", "cuda_graph", "compile"])
def test_on_cuda_every_step_mode_trains_fits_as_good_as_their_solo_fits(mode) -> None:
    # GIVEN float32 fits predicting new rows, on the GPU
    fits, y_new = _fits_predicting_new_rows()
    est = TorchMLPRegressor(**SMALL, device="cuda")
    # WHEN batched in this step mode (eager, a captured CUDA graph, torch.compile)
    run = fit_predict_batched(est, fits, step_mode=mode)
    # THEN it ran in that mode, and the median out-of-sample RMSE is within 1% of the solo fits'
    assert run.device == "cuda" and run.step_mode == mode
    assert abs(_median_rmse_ratio(est, fits, run.predictions, y_new) - 1) < 0.01


@CUDA
def test_on_cuda_auto_runs_the_fastest_measured_step_mode() -> None:
    # GIVEN fits of a shape this process has not measured yet
    fits = _fold_fits(n_obs=203, n_rep=1, seed=8)
    est = TorchMLPRegressor(**{**SMALL, "hidden_layer_sizes": (24, 8)}, device="cuda")
    # WHEN batched with step_mode='auto'
    run = fit_predict_batched(est, fits)
    # THEN the modes that ran here were timed and the fastest of them trained the fits
    assert "eager" in run.step_timings and set(run.step_timings) <= set(STEP_MODES)
    assert run.step_mode == min(run.step_timings, key=lambda k: (run.step_timings[k], k))
    assert all(np.isfinite(p).all() for p in run.predictions)


def test_invalid_batches_are_named_errors() -> None:
    fits = _fold_fits(n_obs=50, n_rep=1)
    est = TorchMLPRegressor(**SMALL, device="cpu")
    # GIVEN a CUDA-only step mode on the CPU, a non-Torch learner, mixed widths, one class
    with pytest.raises(InvalidLearnerError, match="CUDA"):
        fit_predict_batched(est, fits, step_mode="cuda_graph")
    with pytest.raises(InvalidLearnerError, match="step_mode"):
        fit_predict_batched(est, fits, step_mode="fast")
    from sklearn.linear_model import LinearRegression

    with pytest.raises(InvalidLearnerError, match="TorchMLP"):
        fit_predict_batched(LinearRegression(), fits)  # type: ignore[arg-type]
    odd = BatchedFit(fits[0].x_train[:, :3], fits[0].y_train, fits[0].x_test[:, :3], 0)
    with pytest.raises(InvalidLearnerError, match="features"):
        fit_predict_batched(est, [fits[0], odd])
    one_class = BatchedFit(fits[0].x_train, np.zeros(len(fits[0].x_train)), fits[0].x_test, 0)
    with pytest.raises(InvalidLearnerError, match="two classes"):
        fit_predict_batched(TorchMLPClassifier(**SMALL, device="cpu"), [one_class])
    # AND no fits is an empty run
    assert fit_predict_batched(est, []).predictions == []


def _spec_and_data(make_frame, model: str, learners: dict, **frame):
    from fanfit.dml import DEFAULT_SCORE, DMLSpec, draw_folds, validate_data

    df = make_frame(model, n_obs=240, seed=11, **frame)
    x_cols = [c for c in df.columns if c.startswith("x")]
    spec = DMLSpec(
        model=model, score=DEFAULT_SCORE[model], y_col="y", d_cols=["d"], x_cols=x_cols, n_folds=4, n_rep=2, seed=7,
        learners=learners,
    )  # fmt: skip
    spec.validate()
    folds = draw_folds(len(df), spec.n_folds, spec.n_rep, spec.seed)
    return spec, validate_data(spec, list(df.columns), df.to_numpy()), folds


def test_a_shards_torch_units_train_together_and_equal_their_solo_fits(make_frame) -> None:
    from fanfit.dml import fit_predict_units, fit_units

    # GIVEN an IRM whose ml_g (regressor: ml_g0 on the untreated rows, ml_g1 on the treated) and
    # ml_m (classifier) are TorchMLPs in float64
    net = '{"hidden_layer_sizes": [8], "epochs": 4, "batch_size": 32, "lr": 0.01, "dtype": "float64", "device": "cpu"}'
    spec, data, folds = _spec_and_data(
        make_frame,
        "irm",
        {"ml_g": f"TorchMLPRegressor:{net}", "ml_m": f"TorchMLPClassifier:{net}"},
        binary_d=True,
    )
    units = fit_units(spec, 0)
    # WHEN a shard of all its units is fitted batched and one by one
    batched = fit_predict_units(spec, units, data, folds)
    solo = fit_predict_units(spec, units, data, folds, batch_torch=False)
    # THEN every unit's predictions are equal, and the fits of one learner went in one batch
    assert len(batched) == len(units) == 24
    sizes = {}
    for unit, b, s in zip(units, batched, solo):
        assert b.values.shape == s.values.shape
        assert _max_rel(b.values, s.values) < 1e-9
        assert b.aux is None and b.fit_s > 0 and s.batch == 1
        sizes.setdefault(unit.learner[:4], set()).add(b.batch)
    assert sizes == {"ml_g": {16}, "ml_m": {8}}


def test_a_shard_mixing_torch_and_other_learners_fits_each_its_own_way(make_frame) -> None:
    from fanfit.dml import fit_predict, fit_predict_units, fit_units

    # GIVEN a PLR with a TorchMLP ml_l and a linear ml_m
    net = '{"hidden_layer_sizes": [8], "epochs": 3, "batch_size": 32, "dtype": "float64", "device": "cpu"}'
    spec, data, folds = _spec_and_data(
        make_frame, "plr", {"ml_l": f"TorchMLPRegressor:{net}", "ml_m": "LinearRegression"}
    )
    units = fit_units(spec, 0)
    # WHEN its units are fitted as one shard, a tiny memory budget cutting ml_l's 8 fits
    results = fit_predict_units(spec, units, data, folds, memory_budget_mb=0.001)
    # THEN each equals the unit's own fit_predict; the linear units ran alone, and so (by the
    # budget) did the Torch ones, one batch each
    for unit, result in zip(units, results):
        assert _max_rel(result.values, fit_predict(spec, unit, data, folds)) < 1e-9
        assert result.batch == 1
