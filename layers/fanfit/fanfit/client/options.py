"""Type checks of user options, before a spec is built from them.

The spec builders (:func:`fanfit.client.build_spec`, :func:`fanfit.client.train.build_train_spec`)
take options from Python callers, the CLI and YAML configs; a value of the wrong type (``learners=0``,
``d=0``, ``lr=None``, ``features=0``) must be a named :class:`fanfit.errors.InvalidJobError` naming the
option, never a ``TypeError`` or ``AttributeError`` from deep inside.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

from fanfit.errors import InvalidJobError

__all__ = [
    "check_columns",
    "check_int",
    "check_learners",
    "check_number",
    "check_str",
    "check_weight",
]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"a {type(value).__name__} value"


def check_str(name: str, value: Any, *, optional: bool = False) -> None:
    """``value`` must be a str (or None when ``optional``).

    Raises
    ------
    InvalidJobError
        Naming ``name`` and the type given.
    """
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise InvalidJobError(
            f"{name} must be a string{' or None' if optional else ''}, got {_shown(value)}"
        )


def check_columns(name: str, value: Any, *, optional: bool = False) -> None:
    """``value`` must name columns: a str (comma-separated) or a list/tuple of str.

    Raises
    ------
    InvalidJobError
        Naming ``name``.
    """
    if value is None and optional:
        return
    if isinstance(value, str):
        return
    if isinstance(value, list | tuple) and all(isinstance(c, str) for c in value):
        return
    raise InvalidJobError(
        f"{name} must be a column name or a list of column names, got {_shown(value)}"
    )


def check_int(name: str, value: Any, *, optional: bool = False) -> None:
    """``value`` must be an integer (not a bool; None when ``optional``).

    Raises
    ------
    InvalidJobError
        Naming ``name``.
    """
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidJobError(
            f"{name} must be an integer{' or None' if optional else ''}, got {_shown(value)}"
        )


def check_number(name: str, value: Any) -> None:
    """``value`` must be a real number (int or float, not a bool).

    Raises
    ------
    InvalidJobError
        Naming ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidJobError(f"{name} must be a number, got {_shown(value)}")


def check_weight(value: Any, name: str = "weight") -> float:
    """A job's weight in the fair shares of the account's capacity (Dorm's ``w_i``,
    :mod:`fanfit.jobs.sharing`): a positive finite number of at most 100; None gives 1.

    Parameters
    ----------
    value : int or float or None
    name : str
        The option as the message names it (``weight``, ``--weight``).

    Returns
    -------
    float
        The weight, in ``(0, 100]``.

    Raises
    ------
    InvalidJobError
        Naming ``name``: not a number (a bool, a string), NaN or infinite, zero or negative, or
        over 100.
    """
    from fanfit.jobs.sharing import check_weight as check

    return check(value, name)


def check_learners(value: Any) -> None:
    """``value`` must map ``ml_*`` names to learner specs (a str, a LearnerSpec, or None).

    Raises
    ------
    InvalidJobError
        Naming the learner, or ``learners`` itself.
    """
    from fanfit.learners import LearnerSpec

    if not isinstance(value, Mapping):
        raise InvalidJobError(
            f"learners must map ml_l/ml_m/ml_g/ml_r to learner specs, got {_shown(value)}"
        )
    for key, spec in value.items():
        if spec is not None and not isinstance(spec, str | LearnerSpec):
            raise InvalidJobError(
                f"learner {key} must be 'NAME' or 'NAME:{{json params}}', got {_shown(spec)}"
            )
