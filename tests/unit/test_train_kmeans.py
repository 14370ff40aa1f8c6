"""Data-parallel K-Means (Lloyd) against scikit-learn 1.7's KMeans(algorithm='lloyd')."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits

from fanfit.errors import InvalidDataError, InvalidJobError
from fanfit.sched.lbbsp import lbbsp_batches
from fanfit.split import even_batches
from fanfit.train import (
    KMeansPartial,
    kmeans_fit,
    kmeans_inertia,
    kmeans_predict,
    kmeans_reduce,
    kmeans_step,
    row_range,
)

DIGITS = load_digits().data  # (1797, 64), integers 0..16


def digits_init(seed: int) -> np.ndarray:
    # Data rows, jittered: digits are integers, so centroids on data rows make exact distance ties,
    # which each implementation breaks by its own round-off (then both are valid, but differ).
    rng = np.random.default_rng(seed)
    return DIGITS[rng.choice(len(DIGITS), 10, replace=False)] + rng.normal(0, 0.1, (10, 64))


def sklearn_lloyd(X, init, **kw) -> KMeans:
    return KMeans(len(init), init=init, n_init=1, algorithm="lloyd", **kw).fit(X)


SPLITS = {
    "uniform": even_batches(len(DIGITS), 4),
    "lb-bsp": lbbsp_batches(len(DIGITS), [1.0, 2.5, 0.7, 4.0]),
    "resized-every-round": lambda r: lbbsp_batches(
        len(DIGITS), [1.0 + r % 3, 2.0, 1.5, 3.0 - r % 2]
    ),
}


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_four_workers_equal_sklearn_lloyd_to_convergence(split, seed) -> None:
    # GIVEN digits, initial centroids, and 4 workers splitting the rows evenly or by throughput
    init = digits_init(seed)
    ref = sklearn_lloyd(DIGITS, init, max_iter=300, tol=0.0)
    # WHEN the rounds run until no label changes
    res = kmeans_fit(DIGITS, init, SPLITS[split], max_iter=300, tol=0.0)
    # THEN the iterations, the centroids and the inertia are scikit-learn's
    assert res.converged and res.n_iter == ref.n_iter_
    np.testing.assert_allclose(res.centroids, ref.cluster_centers_, rtol=0, atol=1e-8)
    assert res.inertia == pytest.approx(ref.inertia_, rel=1e-12)
    np.testing.assert_array_equal(kmeans_predict(DIGITS, res.centroids), ref.labels_)


@pytest.mark.parametrize(("max_iter", "tol"), [(3, 0.0), (300, 1e-2)])
def test_early_stop_and_relative_tol_end_with_sklearn_final_e_step(max_iter, tol) -> None:
    # GIVEN a run cut at max_iter, or stopped by sklearn's relative tol (absolute: tol * mean var)
    init = digits_init(0)
    ref = sklearn_lloyd(DIGITS, init, max_iter=max_iter, tol=tol)
    # WHEN the same run is made with an uneven split
    res = kmeans_fit(DIGITS, init, SPLITS["lb-bsp"], max_iter, tol * DIGITS.var(axis=0).mean())
    # THEN it stopped before strict convergence, and centroids and the final E-step's inertia match
    assert res.n_iter == ref.n_iter_ < kmeans_fit(DIGITS, init, SPLITS["lb-bsp"]).n_iter
    np.testing.assert_allclose(res.centroids, ref.cluster_centers_, rtol=0, atol=1e-8)
    assert res.inertia == pytest.approx(ref.inertia_, rel=1e-12)
    assert res.inertia == pytest.approx(kmeans_inertia(DIGITS, res.centroids), rel=1e-12)


def test_empty_cluster_is_relocated_to_the_farthest_row_like_sklearn() -> None:
    # GIVEN two blobs and a third initial centroid that no row is near
    rng = np.random.default_rng(1)
    X = np.vstack([rng.normal((0, 0), 1, (60, 2)), rng.normal((10, 0), 1, (60, 2))])
    init = np.array([[0.0, 0.0], [10.0, 0.0], [100.0, 100.0]])
    # WHEN one round is reduced THEN the empty cluster takes the farthest row
    first = kmeans_reduce(
        [kmeans_step(X[:70], init), kmeans_step(X[70:], init, row_offset=70)], init
    )
    dist = ((X - init[kmeans_predict(X, init)]) ** 2).sum(axis=1)
    assert first.n_relocated == 1
    np.testing.assert_array_equal(first.centroids[2], X[np.argmax(dist)])
    # AND the whole run equals scikit-learn's
    ref = sklearn_lloyd(X, init, tol=0.0)
    res = kmeans_fit(X, init, [30, 50, 40])
    assert res.n_iter == ref.n_iter_
    np.testing.assert_allclose(res.centroids, ref.cluster_centers_, rtol=0, atol=1e-8)
    assert res.inertia == pytest.approx(ref.inertia_, rel=1e-12)


def test_partial_round_trips_through_npz_and_counts_changes() -> None:
    # GIVEN a worker's partial for rows 100..399 of digits, with previous centroids
    init, prev = digits_init(0), digits_init(1)
    part = kmeans_step(DIGITS[100:400], init, prev_centroids=prev, row_offset=100)
    # THEN its counts, sums and label changes agree with a direct computation
    labels, prev_labels = (
        kmeans_predict(DIGITS[100:400], init),
        kmeans_predict(DIGITS[100:400], prev),
    )
    np.testing.assert_array_equal(part.counts, np.bincount(labels, minlength=10))
    np.testing.assert_allclose(part.sums[3], DIGITS[100:400][labels == 3].sum(axis=0))
    assert part.n_changed == int((labels != prev_labels).sum())
    assert part.far_rows.shape == (9, 64) and np.all(part.far_ids >= 100)
    # WHEN it is saved with numpy.savez and loaded THEN it is the same partial
    buf = io.BytesIO()
    np.savez(buf, **part.to_arrays())
    buf.seek(0)
    back = KMeansPartial.from_arrays(dict(np.load(buf)))
    for name, value in part.to_arrays().items():
        np.testing.assert_array_equal(back.to_arrays()[name], value)
    # AND a worker with no rows contributes nothing
    empty = kmeans_step(DIGITS[:0], init)
    assert empty.counts.sum() == 0 and empty.inertia == 0.0 and empty.far_rows.shape == (0, 64)


def test_bad_shapes_and_arguments_are_refused() -> None:
    with pytest.raises(InvalidDataError):
        kmeans_step(DIGITS[:10], np.zeros((3, 5)))
    with pytest.raises(InvalidJobError):
        kmeans_reduce([], np.zeros((3, 64)))
    with pytest.raises(InvalidJobError):
        kmeans_fit(DIGITS, digits_init(0), [100, 100])


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=10_000),
    cuts=st.lists(st.integers(min_value=0, max_value=150), min_size=1, max_size=6),
)
def test_a_round_does_not_depend_on_the_split(seed, cuts) -> None:
    # GIVEN random data and any split of its rows into workers (empty workers included)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(150, 3))
    C = rng.normal(size=(4, 3))
    bounds = sorted(cuts)
    batches = np.diff([0, *bounds, 150])
    parts = [kmeans_step(X[row_range(batches, i)], C) for i in range(len(batches))]
    # WHEN the partials are reduced
    split, whole = kmeans_reduce(parts, C), kmeans_reduce([kmeans_step(X, C)], C)
    # THEN the round equals the one-worker round
    np.testing.assert_allclose(split.centroids, whole.centroids, rtol=0, atol=1e-12)
    assert split.inertia == pytest.approx(whole.inertia, rel=1e-12)
    assert split.n_relocated == whole.n_relocated
