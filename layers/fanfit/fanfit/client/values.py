"""Type checks of user option values, each raising a named :class:`fanfit.errors.InvalidJobError`.

A value of the wrong type must name its option, never surface as a ``TypeError`` from deep inside;
:mod:`fanfit.client.options` (which re-exports these) and the CLI's parsers call them on every value
they take."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from fanfit import limits
from fanfit.errors import InvalidJobError
from fanfit.learners import LearnerSpec, as_learner_spec

__all__ = [
    "check_budget",
    "check_columns",
    "check_deadline",
    "check_int",
    "check_learners",
    "check_number",
    "check_objective",
    "check_str",
    "check_weight",
    "shown_value",
]


def shown_value(value: Any) -> str:
    """``repr(value)``, or its type's name when the repr is longer than 80 characters (for errors)."""
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
            f"{name} must be a string{' or None' if optional else ''}, got {shown_value(value)}"
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
        f"{name} must be a column name or a list of column names, got {shown_value(value)}"
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
            f"{name} must be an integer{' or None' if optional else ''}, got {shown_value(value)}"
        )


def check_number(name: str, value: Any) -> None:
    """``value`` must be a real number (int or float, not a bool).

    Raises
    ------
    InvalidJobError
        Naming ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidJobError(f"{name} must be a number, got {shown_value(value)}")


def check_weight(value: Any, name: str = "weight") -> float:
    """A job's weight in the fair shares: :func:`fanfit.limits.check_weight`.

    Raises
    ------
    InvalidJobError
        Naming ``name``.
    """
    return limits.check_weight(value, name)


def check_deadline(value: Any, name: str = "deadline") -> float | None:
    """A job's deadline for its placement, seconds: None, or a finite number > 0.

    Raises
    ------
    InvalidJobError
        Naming ``name`` (``--deadline`` on the command line).
    """
    return _positive_or_none(value, name, "seconds, e.g. 600")


def check_budget(value: Any, name: str = "budget") -> float | None:
    """A job's budget for its placement, USD: None, or a finite number > 0.

    Raises
    ------
    InvalidJobError
        Naming ``name`` (``--budget`` on the command line).
    """
    return _positive_or_none(value, name, "US dollars, e.g. 0.50")


def _positive_or_none(value: Any, name: str, unit: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise InvalidJobError(
                f"{name} must be a number of {unit}; got {shown_value(value)}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidJobError(f"{name} must be a number of {unit}; got {shown_value(value)}")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise InvalidJobError(
            f"{name} must be a finite number > 0 ({unit}); got {shown_value(value)}"
        )
    return number


def check_objective(deadline: Any, budget: Any) -> tuple[float | None, float | None]:
    """The placement's objective options, checked: a deadline (seconds) or a budget (USD), or
    neither (the least cost within 5% of the fastest plan's time), not both.

    Raises
    ------
    InvalidJobError
        A bad value, naming the option, or both given.
    """
    deadline_s, budget_usd = check_deadline(deadline), check_budget(budget)
    if deadline_s is not None and budget_usd is not None:
        raise InvalidJobError(
            "deadline and budget are two objectives for the placement; give one of them, not both"
        )
    return deadline_s, budget_usd


def check_learners(value: Any) -> dict[str, LearnerSpec]:
    """``value`` must map ``ml_*`` names to learners; returns the validated specs (None dropped).

    A learner is a :class:`LearnerSpec`, ``'NAME'``/``'NAME:{json}'`` or a JSON object (the CLI's
    and job files' form), a dict, or a scikit-learn estimator object (a pipeline or search of
    allowed steps included): :func:`fanfit.learners.as_learner_spec`, before anything is uploaded.

    Raises
    ------
    InvalidJobError
        Naming ``learners`` itself when it is not a mapping.
    fanfit.errors.InvalidLearnerError
        Naming the learner (and the step or parameter) and what is allowed.
    """
    if not isinstance(value, Mapping):
        raise InvalidJobError(
            f"learners must map ml_l/ml_m/ml_g/ml_r/ml_pi to learner specs, got {shown_value(value)}"
        )
    return {str(k): as_learner_spec(v, str(k)) for k, v in value.items() if v is not None}
