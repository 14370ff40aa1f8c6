"""Reading a user's data into the float64 matrix a job uploads.

Sources: a CSV, Parquet or Stata (.dta) file, a pandas DataFrame, or an ``s3://bucket/key`` URI to
such a file. Only the columns a job uses are kept; each is cast to float64.

An ``s3://`` URI of a ``.csv``, ``.npz`` or ``.npy`` object in the stack's bucket, or in the bucket of
its ``ExternalDataBucketName`` parameter, is not read here at all: the client reads its header only
and the server reads it in place (:func:`in_place_uri`, :mod:`fanfit.storage.sources`).

pandas is imported by the functions that read or convert a table, not with this module (the CLI's
start-up does not pay for it).
"""

from __future__ import annotations

import io
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import numpy as np

from fanfit import storage
from fanfit.errors import InvalidDataError

if TYPE_CHECKING:
    import pandas as pd

#: Suffix -> name of the pandas reader of that format.
_READERS = {
    ".csv": "read_csv",
    ".parquet": "read_parquet",
    ".pq": "read_parquet",
    ".dta": "read_stata",
}


def in_place_uri(data: Any, buckets: Collection[str]) -> tuple[str, str] | None:
    """``(bucket, key)`` when ``data`` is used in place: an ``s3://`` URI (a str) of a ``.csv``,
    ``.npz`` or ``.npy`` object (:data:`fanfit.storage.SOURCE_FORMATS`) in one of ``buckets`` (the
    stack's, and the one of its ``ExternalDataBucketName`` parameter); None for anything else,
    which :func:`read_table` reads (and the client uploads).

    Raises
    ------
    InvalidDataError
        An ``s3://`` URI without a bucket or key.
    """
    if not isinstance(data, str) or not data.startswith("s3://"):
        return None
    bucket, key = storage.parse_s3_uri(data)
    if bucket not in buckets or storage.source_format(key) is None:
        return None
    return bucket, key


def check_header_columns(names: Sequence[str], columns: Sequence[str], where: str) -> None:
    """Refuse ``columns`` missing from a table's ``names`` (its header), listing those there are.

    Raises
    ------
    InvalidDataError
        Naming the missing column(s) and ``where`` (a file or URI).
    """
    missing = [c for c in columns if c not in names]
    if missing:
        shown = ", ".join(names[:30]) + (", ..." if len(names) > 30 else "")
        raise InvalidDataError(
            f"column(s) {', '.join(map(repr, missing))} not in {where}; its columns are: {shown}"
        )


def _reader(name: str):
    suffix = Path(name).suffix.lower()
    try:
        import pandas as pd

        return getattr(pd, _READERS[suffix])
    except KeyError:
        raise InvalidDataError(
            f"cannot read {name!r}: the data must be a .csv, .parquet or .dta file "
            "(or a pandas DataFrame)"
        ) from None


def read_table(source: Any, s3: Any = None) -> pd.DataFrame:
    """Read ``source`` into a DataFrame.

    Parameters
    ----------
    source : str, os.PathLike or pandas.DataFrame
        A path to a .csv, .parquet/.pq or .dta file, an ``s3://bucket/key`` URI to one, or a DataFrame.
    s3 : botocore S3 client, optional
        Used for ``s3://`` URIs (``boto3.client("s3")`` when omitted).

    Raises
    ------
    InvalidDataError
        If the file is missing, of an unknown type, or unreadable.
    """
    import pandas as pd

    if isinstance(source, pd.DataFrame):
        return source
    text = str(source)
    if text.startswith("s3://"):
        uri = urlparse(text)
        if s3 is None:
            import boto3

            s3 = boto3.client("s3")
        read = _reader(uri.path)
        try:
            body = s3.get_object(Bucket=uri.netloc, Key=uri.path.lstrip("/"))["Body"].read()
        except Exception as exc:  # botocore raises per-service exception classes
            raise InvalidDataError(f"cannot read {text}: {exc}") from exc
        return read(io.BytesIO(body))
    path = Path(text)
    read = _reader(path.name)
    if not path.is_file():
        raise InvalidDataError(f"data file {text!r} does not exist")
    try:
        return read(path)
    except Exception as exc:  # pandas raises many parser errors; all mean "unreadable"
        raise InvalidDataError(f"cannot read {text!r}: {exc}") from exc


def to_matrix(frame: pd.DataFrame, columns: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Select ``columns`` from ``frame`` and cast them to float64.

    Parameters
    ----------
    frame : pandas.DataFrame
    columns : sequence of str
        The columns a job uses (outcome, treatments, covariates, instruments), without duplicates.

    Returns
    -------
    (columns, values) : list of str, ndarray of shape (n_obs, n_cols), float64

    Raises
    ------
    InvalidDataError
        If a column is missing (the message lists the columns there are) or not numeric.
    """
    import pandas as pd

    names = [str(c) for c in frame.columns]
    check_header_columns(names, columns, "the data")
    out = np.empty((len(frame), len(columns)), dtype=np.float64)
    for j, name in enumerate(columns):
        col = frame[name]
        if pd.api.types.is_bool_dtype(col):
            col = col.astype(np.float64)
        if isinstance(col.dtype, pd.CategoricalDtype) or not pd.api.types.is_numeric_dtype(col):
            raise InvalidDataError(
                f"column {name!r} is not numeric (dtype {col.dtype}); encode it as numbers first"
            )
        out[:, j] = col.to_numpy(dtype=np.float64, na_value=np.nan)
    return list(columns), out


def doubleml_dtypes(frame: pd.DataFrame, spec: Any) -> dict[str, str]:
    """The dtypes DoubleML 0.11.4 computes a spec's data roles in, on ``frame``, where not float64.

    DoubleML keeps its data frame's dtypes (``DoubleMLData``, ``DoubleMLDIDData``,
    ``DoubleMLSSMData``, and the frames ``DoubleMLDIDMulti`` builds from ``DoubleMLPanelData``):
    ``y`` is ``pd.to_numeric(frame[y_col]).values``, each treatment ``d`` likewise, ``x`` is
    ``frame[x_cols + other d_cols].values`` (pandas' common dtype of those columns, the other
    treatments with ``use_other_treat_as_covariate``), ``z`` is ``frame[z_cols].values``, ``t``
    and ``s`` their column's values; its learners (``check_X_y`` keeps float32), start values
    and searches run on those arrays. A role is ``'float32'`` when DoubleML's array is float32:
    its columns all float32, or float32 with small integers (int8, int16, uint8, uint16: the
    401(k) Stata file's covariates); any float64, int32/int64, bool or object column makes it
    float64 (ints and bools are exact in float64, and scikit-learn turns object arrays to
    float64). With several treatments, ``d`` is float32 only when every treatment column is, and
    ``x`` only when DoubleML's ``x`` is float32 for every treatment.

    Parameters
    ----------
    frame : pandas.DataFrame
        The user's data as DoubleML holds it (``DoubleMLData.data``) or as read from a file
        (:func:`read_table`: a Stata ``float`` column is float32, a CSV's columns float64).
    spec : fanfit.dml.DMLSpec
        Its ``y_col``, ``d_cols``, ``x_cols``, ``z_cols``, ``t_col``, ``s_col``.

    Returns
    -------
    dict of str to str
        ``{role: "float32"}`` for the float32 roles only (:attr:`fanfit.dml.DMLSpec.dtypes`);
        empty when DoubleML computes in float64 throughout.
    """

    def common(cols: Sequence[str]) -> np.dtype:
        # pandas' own interleaved dtype of the columns (what DataFrame.values gives), on no rows
        return np.dtype(frame.iloc[:0][list(cols)].to_numpy().dtype)

    d_cols = list(spec.d_cols)
    roles: dict[str, list[np.dtype]] = {
        "y": [common([spec.y_col])],
        "d": [common([c]) for c in d_cols],
        "x": [common([*spec.x_cols, *(o for o in d_cols if o != c)]) for c in d_cols],
    }
    if spec.z_cols:
        roles["z"] = [common(spec.z_cols)]
    for role, col in (("t", spec.t_col), ("s", spec.s_col)):
        if col is not None:
            roles[role] = [common([col])]
    float32 = np.dtype(np.float32)
    return {role: "float32" for role, found in roles.items() if all(t == float32 for t in found)}
