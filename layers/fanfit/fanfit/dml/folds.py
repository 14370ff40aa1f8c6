"""Cross-fitting folds: drawing, checking, reading, and DoubleML's ``smpls`` layout.

fanfit keeps the sample splitting as one integer array ``folds`` of shape ``(n_obs, n_rep)``:
``folds[i, r]`` is the 0-based fold in which row ``i`` is a *test* row in repetition ``r``. The
training rows of fold ``k`` in repetition ``r`` are all other rows, as in K-fold cross-fitting
(Chernozhukov et al. 2018, Definition 3.1, DML2).

Clustered data (``cluster_cols``, one or two cluster variables) keeps the same array: with ``K``
folds per cluster variable, ``folds[i, r]`` is the index of the row's cell in the cartesian
product of its clusters' folds (``n_folds ** n_cluster_vars`` test sets, DoubleML's
``DoubleMLClusterResampling`` order; :func:`cluster_fold_digits` unpacks it). The test sets still
partition the rows, but the training rows of a fold are only those in none of its test clusters
(:func:`cluster_train_mask`), not all other rows.

A model with nested sample splitting (LPLR: DoubleML's ``double_sample_splitting``) splits each
outer fold's training rows again into ``n_folds_inner`` inner folds (DoubleML's ``smpls_inner``).
fanfit keeps one outer fold's inner folds as an integer array over all rows: each training row's
inner fold, -1 on the fold's test rows (:func:`inner_smpls_to_ids`, :func:`ids_to_inner_smpls`).
"""

from __future__ import annotations

import csv
import io
import os
from typing import IO, Any

import numpy as np

from fanfit.errors import InvalidFoldsError

__all__ = [
    "DEFAULT_N_FOLDS_INNER",
    "cluster_fold_digits",
    "cluster_folds_to_smpls",
    "cluster_train_mask",
    "draw_cluster_folds",
    "draw_folds",
    "draw_inner_smpls",
    "folds_to_smpls",
    "ids_to_inner_smpls",
    "inner_smpls_to_ids",
    "read_folds_csv",
    "smpls_to_folds",
    "validate_cluster_folds",
    "validate_folds",
]

#: DoubleML's default number of inner folds (``n_folds_inner``) of nested sample splitting.
DEFAULT_N_FOLDS_INNER = 5

# first word of every SeedSequence spawn key fanfit derives from the job seed (see units.unit_seed)
_FOLDS_STREAM = 0


def draw_folds(n_obs: int, n_folds: int, n_rep: int, seed: int) -> np.ndarray:
    """Draw balanced random folds for every repetition.

    Repetition ``r`` permutes the rows with ``np.random.default_rng(SeedSequence(seed,
    spawn_key=(0, r)))`` and cuts the permutation into ``n_folds`` consecutive blocks sized as
    scikit-learn's ``KFold`` sizes them: the first ``n_obs % n_folds`` folds have
    ``n_obs // n_folds + 1`` rows, the others ``n_obs // n_folds``. The result depends only on the
    arguments (and NumPy's PCG64 stream, pinned with NumPy), and repetition ``r`` does not depend on
    ``n_rep``: raising ``n_rep`` keeps the earlier repetitions.

    Parameters
    ----------
    n_obs : int
        Number of rows, at least ``n_folds``.
    n_folds : int
        Number of folds, at least 2.
    n_rep : int
        Number of repetitions, at least 1.
    seed : int
        Non-negative seed.

    Returns
    -------
    numpy.ndarray of int64, shape (n_obs, n_rep)
        Test-fold index of every row in every repetition.

    Raises
    ------
    InvalidFoldsError
        Arguments out of range.
    """
    for name, value, low in (
        ("n_obs", n_obs, 1),
        ("n_folds", n_folds, 2),
        ("n_rep", n_rep, 1),
        ("seed", seed, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
            raise InvalidFoldsError(f"{name} must be an integer of at least {low}, got {value!r}.")
    if n_folds > n_obs:
        raise InvalidFoldsError(f"n_folds={n_folds} is larger than the number of rows ({n_obs}).")
    sizes = np.full(n_folds, n_obs // n_folds, dtype=np.int64)
    sizes[: n_obs % n_folds] += 1
    fold_of_position = np.repeat(np.arange(n_folds, dtype=np.int64), sizes)
    folds = np.empty((n_obs, n_rep), dtype=np.int64)
    for i_rep in range(n_rep):
        rng = np.random.default_rng(
            np.random.SeedSequence(int(seed), spawn_key=(_FOLDS_STREAM, i_rep))
        )
        folds[rng.permutation(n_obs), i_rep] = fold_of_position
    return folds


def validate_folds(folds: Any, n_obs: int, n_folds: int, n_rep: int) -> np.ndarray:
    """Check user-given folds against the data and the options.

    Parameters
    ----------
    folds : array-like, shape (n_obs, n_rep) (or (n_obs,) when ``n_rep == 1``)
        Test-fold index per row and repetition; integral floats such as ``3.0`` are accepted.
    n_obs, n_folds, n_rep : int
        What the folds must fit.

    Returns
    -------
    numpy.ndarray of int64, shape (n_obs, n_rep)

    Raises
    ------
    InvalidFoldsError
        Wrong shape (the message says the expected rows and columns), non-integer values, values
        outside ``0 .. n_folds - 1`` (the first is named by row and repetition), or a fold without
        rows in some repetition.
    """
    arr = np.asarray(folds)
    if arr.ndim == 1 and n_rep == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2 or arr.shape != (n_obs, n_rep):
        raise InvalidFoldsError(
            f"Folds have shape {arr.shape}; expected {n_obs} rows (one per observation) and "
            f"{n_rep} column(s) (one per repetition, n_rep={n_rep})."
        )
    if arr.dtype == bool or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise InvalidFoldsError(f"Folds must be integers, got values of type {arr.dtype}.")
    if np.issubdtype(arr.dtype, np.floating):
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            row, col = np.argwhere(bad)[0]
            raise InvalidFoldsError(
                f"Folds must be integers, but row {row}, repetition {col} is {arr[row, col]!r}."
            )
    out = arr.astype(np.int64)
    bad = (out < 0) | (out >= n_folds)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise InvalidFoldsError(
            f"Fold indices must be in 0..{n_folds - 1} (n_folds={n_folds}), but row {row}, "
            f"repetition {col} is {out[row, col]}."
        )
    for i_rep in range(n_rep):
        counts = np.bincount(out[:, i_rep], minlength=n_folds)
        empty = np.flatnonzero(counts == 0)
        if empty.size:
            raise InvalidFoldsError(
                f"Fold {int(empty[0])} has no rows in repetition {i_rep}; every fold 0..{n_folds - 1} "
                "needs at least one test row in every repetition."
            )
    return out


def read_folds_csv(path_or_file: str | os.PathLike | IO) -> np.ndarray:
    """Read folds from CSV: one row per observation, one column per repetition.

    A first row that is not all integers is taken as a header and skipped.

    Parameters
    ----------
    path_or_file : str, path-like, or file object (text or binary)

    Returns
    -------
    numpy.ndarray of int64, shape (n_obs, n_rep)
        Not yet checked against the data: pass it to :func:`validate_folds`.

    Raises
    ------
    InvalidFoldsError
        Empty file, rows of different lengths, or a value that is not an integer (named by line and column).
    """
    if isinstance(path_or_file, str | os.PathLike):
        with open(path_or_file, newline="", encoding="utf-8") as fh:
            text = fh.read()
        source = os.fspath(path_or_file)
    else:
        raw = path_or_file.read()
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        source = getattr(path_or_file, "name", "folds file")
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    if not rows:
        raise InvalidFoldsError(f"{source}: the folds file is empty.")
    first_line = 1
    if not all(_parse_int(c) is not None for c in rows[0]):
        rows = rows[1:]
        first_line = 2
        if not rows:
            raise InvalidFoldsError(f"{source}: the folds file has a header but no rows.")
    n_cols = len(rows[0])
    out = np.empty((len(rows), n_cols), dtype=np.int64)
    for i, row in enumerate(rows):
        if len(row) != n_cols:
            raise InvalidFoldsError(
                f"{source}: line {i + first_line} has {len(row)} values, expected {n_cols} (one per repetition)."
            )
        for j, cell in enumerate(row):
            value = _parse_int(cell)
            if value is None:
                raise InvalidFoldsError(
                    f"{source}: line {i + first_line}, column {j + 1} is {cell.strip()!r}, "
                    "not an integer fold index."
                )
            out[i, j] = value
    return out


def _parse_int(cell: str) -> int | None:
    text = cell.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    if np.isfinite(value) and value == int(value):
        return int(value)
    return None


def folds_to_smpls(folds: np.ndarray) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """Convert folds to DoubleML's ``smpls``: ``[i_rep][i_fold] -> (train_idx, test_idx)``.

    The result can be passed to DoubleML's ``set_sample_splitting``. Indices are sorted int64
    arrays, as DoubleML sorts them. :func:`smpls_to_folds` is the inverse.

    Parameters
    ----------
    folds : numpy.ndarray of int, shape (n_obs, n_rep)

    Returns
    -------
    list of n_rep lists of n_folds tuples (train_idx, test_idx)
        ``n_folds`` is ``folds.max() + 1``.
    """
    folds = np.asarray(folds)
    if folds.ndim == 1:
        folds = folds.reshape(-1, 1)
    n_folds = int(folds.max()) + 1
    smpls = []
    for i_rep in range(folds.shape[1]):
        col = folds[:, i_rep]
        smpls.append([(np.flatnonzero(col != k), np.flatnonzero(col == k)) for k in range(n_folds)])
    return smpls


def smpls_to_folds(smpls: Any, n_obs: int | None = None, *, check_train: bool = True) -> np.ndarray:
    """Convert DoubleML's ``smpls`` to folds: the inverse of :func:`folds_to_smpls`.

    Takes the sample splitting in any layout DoubleML's ``set_sample_splitting`` takes (DoubleML
    0.11, ``DoubleML.set_sample_splitting``): a list of ``n_rep`` lists of ``n_folds``
    ``(train_idx, test_idx)`` tuples, one such list (``n_rep == 1``), or one tuple (one fold and
    one repetition is not cross-fitting and is refused below). The test sets of a repetition must
    partition the rows; with ``check_train`` every training set must be the complement of its test
    set, as fanfit's K-fold cross-fitting trains on all other rows.

    Parameters
    ----------
    smpls : list of list of (array-like, array-like), or list of (array-like, array-like)
        ``smpls[i_rep][i_fold] = (train_idx, test_idx)``, 0-based row indices.
    n_obs : int, optional
        Number of rows; default: one more than the largest index.
    check_train : bool
        Check that each training set is the complement of its test set (False for cluster
        samples, whose training sets also leave out rows that share a cluster with the test rows).

    Returns
    -------
    numpy.ndarray of int64, shape (n_obs, n_rep)
        ``folds[i, r]``: the fold in which row ``i`` is a test row in repetition ``r``.

    Raises
    ------
    InvalidFoldsError
        Not DoubleML's layout, repetitions with different numbers of folds, fewer than 2 folds, an
        index outside ``0 .. n_obs - 1``, a row in no test set or in two, or (``check_train``) a
        training set that is not the complement of its test set; named by repetition and fold.
    """
    if isinstance(smpls, tuple):
        smpls = [[smpls]]
    elif isinstance(smpls, list) and smpls and isinstance(smpls[0], tuple):
        smpls = [smpls]
    if not isinstance(smpls, list | tuple) or not smpls:
        raise InvalidFoldsError(
            "smpls must be a list of n_rep lists of n_folds (train_idx, test_idx) tuples, as "
            f"DoubleML's set_sample_splitting takes; got {type(smpls).__name__}."
        )
    reps: list[list[tuple[np.ndarray, np.ndarray]]] = []
    for i_rep, rep in enumerate(smpls):
        if not isinstance(rep, list | tuple) or not all(
            isinstance(s, list | tuple) and len(s) == 2 for s in rep
        ):
            raise InvalidFoldsError(
                f"smpls[{i_rep}] must be a list of (train_idx, test_idx) tuples, one per fold."
            )
        reps.append(
            [(_indices(tr, i_rep, k), _indices(te, i_rep, k)) for k, (tr, te) in enumerate(rep)]
        )
    n_folds = len(reps[0])
    if n_folds < 2 or any(len(rep) != n_folds for rep in reps):
        counts = sorted({len(rep) for rep in reps})
        raise InvalidFoldsError(
            f"Every repetition of smpls needs the same number of folds, at least 2; got {counts}."
        )
    if n_obs is None:
        n_obs = 1 + max(int(idx.max(initial=-1)) for rep in reps for pair in rep for idx in pair)
    folds = np.full((n_obs, len(reps)), -1, dtype=np.int64)
    for i_rep, rep in enumerate(reps):
        for i_fold, (train, test) in enumerate(rep):
            for name, idx in (("train", train), ("test", test)):
                if idx.size and (idx.min() < 0 or idx.max() >= n_obs):
                    raise InvalidFoldsError(
                        f"smpls[{i_rep}][{i_fold}] has a {name} index outside 0..{n_obs - 1} "
                        f"(n_obs={n_obs})."
                    )
            if np.any(folds[test, i_rep] >= 0) or np.unique(test).size != test.size:
                raise InvalidFoldsError(
                    f"smpls[{i_rep}][{i_fold}]: a test row is also a test row of another fold; the "
                    "test sets of a repetition must partition the rows."
                )
            folds[test, i_rep] = i_fold
        missing = np.flatnonzero(folds[:, i_rep] < 0)
        if missing.size:
            raise InvalidFoldsError(
                f"smpls[{i_rep}]: row {int(missing[0])} is in no test set; the test sets of a "
                "repetition must partition the rows."
            )
        if check_train:
            for i_fold, (train, _test) in enumerate(rep):
                expected = np.flatnonzero(folds[:, i_rep] != i_fold)
                if not np.array_equal(np.unique(train), expected) or train.size != expected.size:
                    raise InvalidFoldsError(
                        f"smpls[{i_rep}][{i_fold}]: the training rows are not all rows outside the "
                        "test set; fanfit's cross-fitting trains each fold on every other row."
                    )
    return folds


def _indices(value: Any, i_rep: int, i_fold: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim != 1 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
        raise InvalidFoldsError(
            f"smpls[{i_rep}][{i_fold}] must hold 1-d integer index arrays, got {arr.dtype} of "
            f"shape {arr.shape}."
        )
    return arr.astype(np.int64)


# --------------------------------------------------------------------------- clustered data
# first word of the SeedSequence spawn key of cluster folds (plain folds use 0, units 1)
_CLUSTER_FOLDS_STREAM = 2


def cluster_fold_digits(folds: np.ndarray, n_folds: int, n_cluster_vars: int) -> np.ndarray:
    """The per-cluster-variable folds packed in multiway cluster folds.

    With ``m`` cluster variables and ``K = n_folds`` folds per variable, a row's cross-fitting
    fold is ``f = sum_v k_v * K**(m - 1 - v)``, where ``k_v`` is the fold of its cluster of
    variable ``v``: the order of DoubleML's cartesian product of the folds
    (``DoubleMLClusterResampling.split_samples``, first variable slowest).

    Parameters
    ----------
    folds : numpy.ndarray of int, shape (n_obs, n_rep) or (n_obs,)
        Values in ``0 .. K**m - 1``.
    n_folds : int
        ``K``, folds per cluster variable.
    n_cluster_vars : int
        ``m``, 1 or 2.

    Returns
    -------
    numpy.ndarray of int64, shape ``folds.shape + (m,)``
        ``k_v`` of every row (and repetition) in the last axis.
    """
    folds = np.asarray(folds, dtype=np.int64)
    powers = n_folds ** np.arange(n_cluster_vars - 1, -1, -1, dtype=np.int64)
    return (folds[..., None] // powers) % n_folds


def cluster_train_mask(
    fold_col: np.ndarray, i_fold: int, n_folds: int, n_cluster_vars: int
) -> np.ndarray:
    """Training rows of one multiway cluster fold: the rows in none of its test clusters.

    Test rows of cross-fitting fold ``f = (k_1, ..., k_m)`` are those whose cluster of every
    variable ``v`` lies in fold ``k_v``; its training rows are those whose cluster of every
    variable lies outside fold ``k_v`` (Chiang, Kato, Ma and Sasaki 2021, "Multiway cluster robust
    double/debiased machine learning", JBES, Section 3; DoubleML's ``DoubleMLClusterResampling``).
    With two variables the rows sharing one cluster with the test rows but not the other are in
    neither set, so the folds' train sets are not the complements of their test sets.

    Parameters
    ----------
    fold_col : numpy.ndarray of int, shape (n_obs,)
        One repetition of the folds (:func:`draw_cluster_folds`).
    i_fold : int
        The cross-fitting fold, ``0 .. n_folds**n_cluster_vars - 1``.
    n_folds, n_cluster_vars : int

    Returns
    -------
    numpy.ndarray of bool, shape (n_obs,)
    """
    digits = cluster_fold_digits(fold_col, n_folds, n_cluster_vars)
    fold_digits = cluster_fold_digits(np.asarray([i_fold]), n_folds, n_cluster_vars)[0]
    return np.all(digits != fold_digits, axis=-1)


def draw_cluster_folds(cluster_vars: np.ndarray, n_folds: int, n_rep: int, seed: int) -> np.ndarray:
    """Draw multiway cluster folds: every cluster variable's clusters split into ``n_folds`` folds.

    For repetition ``r`` and cluster variable ``v`` the sorted distinct cluster ids are permuted
    with ``np.random.default_rng(SeedSequence(seed, spawn_key=(2, r, v)))`` and cut into
    ``n_folds`` blocks sized as scikit-learn's ``KFold`` (as DoubleML's
    ``DoubleMLClusterResampling``, which shuffles with ``KFold(shuffle=True)``); a row's fold is
    then the cartesian-product index of its clusters' folds (:func:`cluster_fold_digits`), so
    there are ``n_folds ** n_cluster_vars`` cross-fitting folds, each a test set.

    Parameters
    ----------
    cluster_vars : numpy.ndarray, shape (n_obs, n_cluster_vars)
        Numeric cluster ids, one column per cluster variable (1 or 2).
    n_folds : int
        Folds per cluster variable, at least 2 and at most the number of clusters of every
        variable.
    n_rep : int
        Repetitions, at least 1.
    seed : int
        Non-negative.

    Returns
    -------
    numpy.ndarray of int64, shape (n_obs, n_rep)

    Raises
    ------
    InvalidFoldsError
        Arguments out of range, or a cluster variable with fewer than ``n_folds`` clusters.
    """
    cluster_vars = np.asarray(cluster_vars)
    if cluster_vars.ndim == 1:
        cluster_vars = cluster_vars.reshape(-1, 1)
    n_obs, n_vars = cluster_vars.shape
    for name, value, low in (("n_folds", n_folds, 2), ("n_rep", n_rep, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
            raise InvalidFoldsError(f"{name} must be an integer of at least {low}, got {value!r}.")
    if not 1 <= n_vars <= 2:
        raise InvalidFoldsError(f"cluster_vars must have 1 or 2 columns, got {n_vars}.")
    folds = np.zeros((n_obs, n_rep), dtype=np.int64)
    codes = []
    for v in range(n_vars):
        uniques, inverse = np.unique(cluster_vars[:, v], return_inverse=True)
        if uniques.size < n_folds:
            raise InvalidFoldsError(
                f"Cluster variable {v} has {uniques.size} cluster(s), fewer than n_folds={n_folds}."
            )
        codes.append((uniques.size, inverse.reshape(-1)))
    for i_rep in range(n_rep):
        for v, (n_clusters, inverse) in enumerate(codes):
            sizes = np.full(n_folds, n_clusters // n_folds, dtype=np.int64)
            sizes[: n_clusters % n_folds] += 1
            fold_of_position = np.repeat(np.arange(n_folds, dtype=np.int64), sizes)
            rng = np.random.default_rng(
                np.random.SeedSequence(int(seed), spawn_key=(_CLUSTER_FOLDS_STREAM, i_rep, v))
            )
            cluster_fold = np.empty(n_clusters, dtype=np.int64)
            cluster_fold[rng.permutation(n_clusters)] = fold_of_position
            folds[:, i_rep] += cluster_fold[inverse] * n_folds ** (n_vars - 1 - v)
    return folds


def validate_cluster_folds(
    folds: Any, cluster_vars: np.ndarray, n_folds: int, n_rep: int
) -> np.ndarray:
    """Check folds of clustered data: :func:`validate_folds` with ``n_folds ** n_cluster_vars``
    folds, and every cluster of every variable in one fold of that variable per repetition.

    Parameters
    ----------
    folds : array-like, shape (n_obs, n_rep)
        Cross-fitting folds as :func:`draw_cluster_folds` writes them.
    cluster_vars : numpy.ndarray, shape (n_obs, n_cluster_vars)
    n_folds : int
        Folds per cluster variable.
    n_rep : int

    Returns
    -------
    numpy.ndarray of int64, shape (n_obs, n_rep)

    Raises
    ------
    InvalidFoldsError
        What :func:`validate_folds` raises, or a cluster split over two folds (named by its
        variable, id and repetition).
    """
    cluster_vars = np.asarray(cluster_vars)
    if cluster_vars.ndim == 1:
        cluster_vars = cluster_vars.reshape(-1, 1)
    n_vars = cluster_vars.shape[1]
    out = validate_folds(folds, cluster_vars.shape[0], n_folds**n_vars, n_rep)
    digits = cluster_fold_digits(out, n_folds, n_vars)
    for v in range(n_vars):
        uniques, inverse = np.unique(cluster_vars[:, v], return_inverse=True)
        inverse = inverse.reshape(-1)
        for i_rep in range(n_rep):
            k = digits[:, i_rep, v]
            low = np.full(uniques.size, n_folds, dtype=np.int64)
            high = np.full(uniques.size, -1, dtype=np.int64)
            np.minimum.at(low, inverse, k)
            np.maximum.at(high, inverse, k)
            split = np.flatnonzero(low != high)
            if split.size:
                raise InvalidFoldsError(
                    f"Cluster {uniques[split[0]].item()!r} of cluster variable {v} lies in folds "
                    f"{int(low[split[0]])} and {int(high[split[0]])} of that variable in repetition "
                    f"{i_rep}; with cluster_cols every cluster must lie in one fold (draw the folds "
                    "with draw_cluster_folds, or give none)."
                )
    return out


def cluster_folds_to_smpls(
    folds: np.ndarray, cluster_vars: np.ndarray, n_folds: int
) -> tuple[list, list]:
    """Convert multiway cluster folds to DoubleML's ``(smpls, smpls_cluster)``.

    The result can be passed to DoubleML's ``set_sample_splitting(smpls, smpls_cluster)`` of a
    model on ``DoubleMLClusterData``; the per-fold test clusters are also what the
    cluster-robust coefficient and variance read.

    Parameters
    ----------
    folds : numpy.ndarray of int, shape (n_obs, n_rep)
        Valid cluster folds (:func:`validate_cluster_folds`).
    cluster_vars : numpy.ndarray, shape (n_obs, n_cluster_vars)
    n_folds : int
        Folds per cluster variable.

    Returns
    -------
    smpls : list of n_rep lists of ``n_folds ** n_cluster_vars`` tuples (train_idx, test_idx)
        Sorted int64 row indices; the train rows are those of :func:`cluster_train_mask`.
    smpls_cluster : list of n_rep lists of tuples (train_clusters, test_clusters)
        Each a list with one sorted array of cluster ids per cluster variable.
    """
    folds = np.asarray(folds)
    if folds.ndim == 1:
        folds = folds.reshape(-1, 1)
    cluster_vars = np.asarray(cluster_vars)
    if cluster_vars.ndim == 1:
        cluster_vars = cluster_vars.reshape(-1, 1)
    n_vars = cluster_vars.shape[1]
    n_cross = n_folds**n_vars
    uniques = [np.unique(cluster_vars[:, v]) for v in range(n_vars)]
    all_smpls, all_smpls_cluster = [], []
    for i_rep in range(folds.shape[1]):
        col = folds[:, i_rep]
        digits = cluster_fold_digits(col, n_folds, n_vars)
        # the clusters of every variable in each of its folds
        in_fold = [
            [np.unique(cluster_vars[digits[:, v] == k, v]) for k in range(n_folds)]
            for v in range(n_vars)
        ]
        smpls, smpls_cluster = [], []
        for i_fold in range(n_cross):
            train = np.flatnonzero(cluster_train_mask(col, i_fold, n_folds, n_vars))
            smpls.append((train, np.flatnonzero(col == i_fold)))
            fold_digits = cluster_fold_digits(np.asarray([i_fold]), n_folds, n_vars)[0]
            test_clusters = [in_fold[v][fold_digits[v]] for v in range(n_vars)]
            train_clusters = [np.setdiff1d(uniques[v], test_clusters[v]) for v in range(n_vars)]
            smpls_cluster.append((train_clusters, test_clusters))
        all_smpls.append(smpls)
        all_smpls_cluster.append(smpls_cluster)
    return all_smpls, all_smpls_cluster


def draw_inner_smpls(
    train: np.ndarray, n_folds_inner: int, random_state: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Inner folds of one outer fold's training rows, drawn as DoubleML draws them (scikit-learn's
    ``KFold`` with shuffling over the rows of ``train``: ``DoubleMLDoubleResampling``), from a seed.

    Parameters
    ----------
    train : numpy.ndarray of int
        The outer fold's training rows, sorted.
    n_folds_inner : int
        At least 2 and at most ``train.size``.
    random_state : int
        The shuffle's seed (DoubleML uses NumPy's global state; fanfit a unit's seed).

    Returns
    -------
    list of (train_inner, test_inner), numpy.ndarray of int
        Sorted row indices into the data (subsets of ``train``), one pair per inner fold.

    Raises
    ------
    InvalidFoldsError
        ``n_folds_inner`` below 2 or above the number of training rows.
    """
    from sklearn.model_selection import KFold

    train = np.asarray(train)
    if not 2 <= n_folds_inner <= train.size:
        raise InvalidFoldsError(
            f"n_folds_inner={n_folds_inner} inner folds of {train.size} training rows: give "
            f"n_folds_inner in [2, {train.size}]."
        )
    kfold = KFold(n_splits=n_folds_inner, shuffle=True, random_state=random_state)
    return [(train[a], train[b]) for a, b in kfold.split(np.zeros(train.size))]


def inner_smpls_to_ids(inner: Any, n_obs: int) -> np.ndarray:
    """One outer fold's inner folds (DoubleML's ``smpls_inner[i_rep][i_fold]``) as fold ids.

    Parameters
    ----------
    inner : sequence of (train_inner, test_inner)
        Row indices into the data.
    n_obs : int

    Returns
    -------
    numpy.ndarray of int64, shape (n_obs,)
        Each row's inner fold (the index of the pair whose ``test_inner`` holds it), -1 on rows
        in no ``test_inner`` (the outer fold's test rows).
    """
    ids = np.full(n_obs, -1, dtype=np.int64)
    for j, (_, test_inner) in enumerate(inner):
        ids[np.asarray(test_inner, dtype=np.int64)] = j
    return ids


def ids_to_inner_smpls(
    ids: np.ndarray, train: np.ndarray, n_folds_inner: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """One outer fold's inner folds from its fold ids (:func:`inner_smpls_to_ids`' inverse).

    Parameters
    ----------
    ids : numpy.ndarray, shape (n_obs,)
        Each training row's inner fold, 0 to ``n_folds_inner - 1``.
    train : numpy.ndarray of int
        The outer fold's training rows, sorted.
    n_folds_inner : int

    Returns
    -------
    list of (train_inner, test_inner), numpy.ndarray of int
        Sorted subsets of ``train``, in inner fold order (as DoubleML's ``KFold`` gives them).

    Raises
    ------
    InvalidFoldsError
        A training row without an inner fold in ``[0, n_folds_inner)``, or an empty inner fold.
    """
    own = np.asarray(ids)[np.asarray(train)]
    bad = ~np.isin(own, np.arange(n_folds_inner))
    if bad.any():
        raise InvalidFoldsError(
            f"{int(bad.sum())} training row(s) of an outer fold have no inner fold in "
            f"[0, {n_folds_inner}) (first: row {int(np.asarray(train)[bad][0])}, value "
            f"{own[bad][0]!r}); every training row needs one (n_folds_inner={n_folds_inner})."
        )
    out = []
    for j in range(n_folds_inner):
        test_inner = train[own == j]
        if test_inner.size == 0:
            raise InvalidFoldsError(
                f"Inner fold {j} of an outer fold is empty; each of the n_folds_inner="
                f"{n_folds_inner} inner folds needs at least one row."
            )
        out.append((train[own != j], test_inner))
    return out
