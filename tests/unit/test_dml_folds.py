"""Folds: drawing, validation, CSV reading, and DoubleML's smpls layout."""

from __future__ import annotations

import io

import doubleml as dml
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LinearRegression

from fanfit.dml import draw_folds, folds_to_smpls, read_folds_csv, smpls_to_folds, validate_folds
from fanfit.errors import InvalidFoldsError


def test_draw_folds_is_deterministic_and_seed_dependent() -> None:
    # GIVEN two draws with the same seed and one with another
    a = draw_folds(101, 5, 3, seed=42)
    b = draw_folds(101, 5, 3, seed=42)
    c = draw_folds(101, 5, 3, seed=43)
    # THEN the same seed gives the same int64 folds, another seed others, and repetitions differ
    assert a.dtype == np.int64 and a.shape == (101, 3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert not np.array_equal(a[:, 0], a[:, 1])


def test_draw_folds_known_values_are_stable() -> None:
    # GIVEN a small draw whose values are pinned (PCG64 via SeedSequence(0, spawn_key=(0, r)))
    folds = draw_folds(10, 3, 1, seed=0)
    # THEN it is a permutation of KFold's fold labels and equals the pinned layout
    expected = np.empty(10, dtype=np.int64)
    perm = np.random.default_rng(np.random.SeedSequence(0, spawn_key=(0, 0))).permutation(10)
    expected[perm] = [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    np.testing.assert_array_equal(folds[:, 0], expected)


def test_more_repetitions_keep_the_earlier_ones() -> None:
    # WHEN n_rep grows
    short, long = draw_folds(50, 4, 2, seed=7), draw_folds(50, 4, 5, seed=7)
    # THEN the first repetitions are unchanged
    np.testing.assert_array_equal(long[:, :2], short)


@settings(max_examples=60, deadline=None)
@given(
    n_obs=st.integers(min_value=2, max_value=400),
    n_folds=st.integers(min_value=2, max_value=12),
    n_rep=st.integers(min_value=1, max_value=3),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_draw_folds_is_balanced_like_kfold(n_obs, n_folds, n_rep, seed) -> None:
    if n_folds > n_obs:
        # THEN more folds than rows is refused
        with pytest.raises(InvalidFoldsError):
            draw_folds(n_obs, n_folds, n_rep, seed)
        return
    folds = draw_folds(n_obs, n_folds, n_rep, seed)
    # THEN every repetition has KFold's fold sizes: the first n_obs % n_folds folds one row larger
    expected = np.full(n_folds, n_obs // n_folds)
    expected[: n_obs % n_folds] += 1
    for r in range(n_rep):
        np.testing.assert_array_equal(np.bincount(folds[:, r], minlength=n_folds), expected)
    # and the folds pass validation unchanged
    np.testing.assert_array_equal(validate_folds(folds, n_obs, n_folds, n_rep), folds)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((10, 1, 1, 0), "n_folds"),
        ((10, 3, 0, 0), "n_rep"),
        ((10, 3, 1, -1), "seed"),
        ((3, 5, 1, 0), "larger"),
    ],
)
def test_draw_folds_rejects_bad_arguments(args, match) -> None:
    with pytest.raises(InvalidFoldsError, match=match):
        draw_folds(*args)


def test_validate_folds_wrong_shape_says_expected_rows_and_columns() -> None:
    # GIVEN folds for 9 rows and 2 repetitions where 10 rows and 3 repetitions are expected
    with pytest.raises(InvalidFoldsError) as err:
        validate_folds(np.zeros((9, 2), dtype=int), n_obs=10, n_folds=2, n_rep=3)
    # THEN the message names what was expected
    assert "expected 10 rows" in str(err.value) and "3 column(s)" in str(err.value)


def test_validate_folds_value_out_of_range_names_row_and_repetition() -> None:
    folds = draw_folds(20, 4, 2, seed=1)
    folds[7, 1] = 4
    with pytest.raises(InvalidFoldsError, match=r"0\.\.3.*row 7, repetition 1 is 4"):
        validate_folds(folds, 20, 4, 2)
    folds[7, 1] = -1
    with pytest.raises(InvalidFoldsError, match="row 7"):
        validate_folds(folds, 20, 4, 2)


def test_validate_folds_empty_fold_is_refused() -> None:
    # GIVEN a repetition that never uses fold 2
    folds = np.array([[0, 0], [1, 1], [2, 0], [0, 1], [1, 0], [2, 1]])
    with pytest.raises(InvalidFoldsError, match="Fold 2 has no rows in repetition 1"):
        validate_folds(folds, 6, 3, 2)


def test_validate_folds_accepts_integral_floats_and_1d_but_not_fractions() -> None:
    out = validate_folds(np.array([0.0, 1.0, 0.0, 1.0]), 4, 2, 1)
    assert out.dtype == np.int64 and out.shape == (4, 1)
    with pytest.raises(InvalidFoldsError, match="integers"):
        validate_folds(np.array([[0.0], [1.5], [0.0], [1.0]]), 4, 2, 1)
    with pytest.raises(InvalidFoldsError, match="integers"):
        validate_folds(np.array([["a"], ["b"]]), 2, 2, 1)


def test_read_folds_csv_with_and_without_header(tmp_path) -> None:
    # GIVEN the same folds written with a header and without one
    path = tmp_path / "folds.csv"
    path.write_text("rep0,rep1\n0,1\n1,0\n2,2\n")
    with_header = read_folds_csv(path)
    without = read_folds_csv(io.StringIO("0,1\n1,0\n2,2\n"))
    as_bytes = read_folds_csv(io.BytesIO(b"0,1\r\n1,0\r\n2.0,2\r\n"))
    # THEN all read as (n_obs, n_rep) int64
    expected = np.array([[0, 1], [1, 0], [2, 2]], dtype=np.int64)
    for got in (with_header, without, as_bytes):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("0,1\n1,x\n", r"line 2, column 2 is 'x'"),
        ("0\n1.5\n", "line 2, column 1 is '1.5'"),
        ("0,1\n1\n", "line 2 has 1 values, expected 2"),
        ("", "empty"),
        ("fold\n", "no rows"),
    ],
)
def test_read_folds_csv_rejects_non_integers(text, match) -> None:
    with pytest.raises(InvalidFoldsError, match=match):
        read_folds_csv(io.StringIO(text))


def test_folds_to_smpls_is_doubleml_layout_and_accepted_by_doubleml(make_frame) -> None:
    # GIVEN fanfit folds converted to smpls
    df = make_frame("plr", n_obs=40)
    folds = draw_folds(40, 4, 2, seed=3)
    smpls = folds_to_smpls(folds)
    # THEN n_rep lists of n_folds sorted, disjoint (train, test) pairs covering all rows
    assert len(smpls) == 2 and all(len(s) == 4 for s in smpls)
    for i_rep, rep in enumerate(smpls):
        for i_fold, (train, test) in enumerate(rep):
            np.testing.assert_array_equal(test, np.flatnonzero(folds[:, i_rep] == i_fold))
            assert np.all(np.diff(train) > 0) and np.intersect1d(train, test).size == 0
            assert train.size + test.size == 40
    # and DoubleML takes them, deriving n_folds and n_rep
    obj = dml.DoubleMLPLR(dml.DoubleMLData(df, "y", "d"), LinearRegression(), LinearRegression())
    obj.set_sample_splitting(smpls)
    assert obj.n_folds == 4 and obj.n_rep == 2


@settings(max_examples=30, deadline=None)
@given(
    n_obs=st.integers(4, 60), n_folds=st.integers(2, 4), n_rep=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)  # fmt: skip
def test_smpls_to_folds_inverts_folds_to_smpls(n_obs, n_folds, n_rep, seed) -> None:
    # GIVEN drawn folds
    folds = draw_folds(n_obs, n_folds, n_rep, seed=seed)
    # WHEN converted to DoubleML's smpls and back
    back = smpls_to_folds(folds_to_smpls(folds))
    # THEN the folds come back unchanged
    assert back.dtype == np.int64
    np.testing.assert_array_equal(back, folds)


def test_smpls_to_folds_reads_the_smpls_doubleml_draws(make_plr_frame) -> None:
    # GIVEN a DoubleML model that drew its own sample splitting (2 repetitions, 3 folds)
    np.random.seed(3)
    data = dml.DoubleMLData(make_plr_frame(40), "y", "d")
    obj = dml.DoubleMLPLR(data, LinearRegression(), LinearRegression(), n_folds=3, n_rep=2)
    # WHEN its smpls become folds and the folds smpls again
    folds = smpls_to_folds(obj.smpls)
    # THEN each row's fold is the fold whose test set holds it, and the round trip is exact
    assert folds.shape == (40, 2)
    for i_rep, rep in enumerate(obj.smpls):
        for i_fold, (train, test) in enumerate(rep):
            assert np.all(folds[test, i_rep] == i_fold)
            np.testing.assert_array_equal(folds_to_smpls(folds)[i_rep][i_fold][0], np.sort(train))


def test_smpls_to_folds_takes_one_repetition_without_the_outer_list() -> None:
    # GIVEN one repetition's list of (train, test) tuples
    folds = draw_folds(10, 2, 1, seed=0)
    # WHEN converted THEN it is the (n_obs, 1) folds
    np.testing.assert_array_equal(smpls_to_folds(folds_to_smpls(folds)[0]), folds)


@pytest.mark.parametrize(
    ("smpls", "match"),
    [
        ("abc", "list of n_rep lists"),
        ([[(np.array([2, 3]), np.array([0, 1]))]], "at least 2"),
        ([[(np.array([1]), np.array([0])), (np.array([0]), np.array([0]))]], "partition"),
        ([[(np.array([1, 2]), np.array([0])), (np.array([0, 2]), np.array([1]))]], "no test set"),
        (
            [[(np.array([], dtype=int), np.array([0, 2])), (np.array([0, 2]), np.array([1]))]],
            "training rows",
        ),
        ([[(np.array([0.5]), np.array([1])), (np.array([1]), np.array([0]))]], "integer index"),
    ],
)
def test_smpls_to_folds_refuses_what_is_not_a_cross_fitting_partition(smpls, match) -> None:
    # GIVEN smpls that are not K-fold cross-fitting WHEN converted THEN a named error says why
    with pytest.raises(InvalidFoldsError, match=match):
        smpls_to_folds(smpls)


def test_smpls_to_folds_can_leave_training_sets_unchecked() -> None:
    # GIVEN cluster-style smpls whose training sets leave out more than the test rows
    smpls = [[(np.array([2]), np.array([0, 1])), (np.array([0]), np.array([2]))]]
    # WHEN converted without the training check THEN the test partition gives the folds
    np.testing.assert_array_equal(smpls_to_folds(smpls, check_train=False), [[0], [0], [1]])
