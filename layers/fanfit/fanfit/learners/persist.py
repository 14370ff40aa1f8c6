"""Fitted learners as bytes and back, never pickled: skops' format, loaded with the allow-list trusted.

A job with ``store_models`` (DoubleML's ``fit(store_models=True)``) keeps every unit's fitted
estimator beside its predictions. :func:`dumps` writes one with ``skops.io`` (the scikit-learn
ecosystem's safe persistence: a zip of JSON and numpy arrays, no pickle); :func:`loads` reads it
back building only the types it trusts: what ``skops`` trusts by default (numpy, scipy and
scikit-learn's own types), the classes of fanfit's allow-list
(:data:`~fanfit.learners.allowlist.ALLOWED_LEARNERS`, ``ALLOWED_TRANSFORMERS``,
``COMPOSITE_LEARNERS``, less the Torch learners) and the helper types their fitted state holds
(:data:`EXTRA_TRUSTED`: LightGBM's ``Booster``). A stored model holding any other type is refused
by name, not loaded: the bytes come from S3 and are read as untrusted input.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from fanfit.errors import InvalidLearnerError
from fanfit.learners.allowlist import (
    ALLOWED_LEARNERS,
    ALLOWED_TRANSFORMERS,
    COMPOSITE_LEARNERS,
    GPU_ONLY_LEARNERS,
)

__all__ = ["EXTRA_TRUSTED", "dumps", "loads", "trusted_types"]

#: Types a fitted allow-listed estimator holds besides its own class (LightGBM's booster and the
#: ordered dict of its parameters), trusted when loading.
EXTRA_TRUSTED = ("collections.OrderedDict", "lightgbm.basic.Booster")


@cache
def trusted_types() -> frozenset[str]:
    """The qualified type names :func:`loads` builds besides ``skops``' defaults: every class
    of the allow-lists (their modules imported), the Torch learners excepted, and
    :data:`EXTRA_TRUSTED`."""
    names = set(EXTRA_TRUSTED)
    for table in (ALLOWED_LEARNERS, ALLOWED_TRANSFORMERS, COMPOSITE_LEARNERS):
        for name in table:
            if name in GPU_ONLY_LEARNERS:
                continue
            cls = table[name]
            names.add(f"{cls.__module__}.{cls.__qualname__}")
    return frozenset(names)


def dumps(estimator: Any) -> bytes:
    """A fitted estimator in ``skops``' format.

    Raises
    ------
    InvalidLearnerError
        ``skops`` cannot write it, naming the class.
    """
    import skops.io as sio

    try:
        return bytes(sio.dumps(estimator))
    except Exception as exc:  # skops raises TypeError and others for what it cannot hold
        raise InvalidLearnerError(
            f"{type(estimator).__name__}: its fitted state cannot be stored without pickle "
            f"(skops: {exc}); fit without store_models"
        ) from exc


def loads(data: bytes) -> Any:
    """The estimator :func:`dumps` wrote.

    Raises
    ------
    InvalidLearnerError
        The bytes hold a type outside ``skops``' defaults and :func:`trusted_types`, naming it
        (nothing is built then), or they are not a ``skops`` file.
    """
    import skops.io as sio

    try:
        untrusted = sio.get_untrusted_types(data=data)
    except Exception as exc:
        raise InvalidLearnerError(f"a stored model is not a skops file: {exc}") from exc
    refused = sorted(set(untrusted) - trusted_types())
    if refused:
        raise InvalidLearnerError(
            f"a stored model holds type(s) {', '.join(refused)}, outside fanfit's allow-list; "
            "it was not loaded"
        )
    return sio.loads(data, trusted=list(untrusted))
