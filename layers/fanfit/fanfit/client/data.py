"""Reading a user's data into the float64 matrix a job uploads.

Sources: a CSV, Parquet or Stata (.dta) file, a pandas DataFrame, or an ``s3://bucket/key`` URI to
such a file. Only the columns a job uses are kept; each is cast to float64.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pandas as pd

from fanfit.errors import InvalidDataError

_READERS = {
    ".csv": pd.read_csv,
    ".parquet": pd.read_parquet,
    ".pq": pd.read_parquet,
    ".dta": pd.read_stata,
}


def _reader(name: str):
    suffix = Path(name).suffix.lower()
    try:
        return _READERS[suffix]
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
    names = [str(c) for c in frame.columns]
    missing = [c for c in columns if c not in names]
    if missing:
        shown = ", ".join(names[:30]) + (", ..." if len(names) > 30 else "")
        raise InvalidDataError(
            f"column(s) {', '.join(map(repr, missing))} not in the data; its columns are: {shown}"
        )
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
