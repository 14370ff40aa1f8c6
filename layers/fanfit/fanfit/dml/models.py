r"""The model registry: everything fanfit knows about each DoubleML model, in one place.

Prepare, Schedule, CrossFit, Aggregate and the rest of :mod:`fanfit.dml` look a model up here
(:func:`model_def`) and hold no model-specific branches. A :class:`ModelDef` declares

- its DoubleML class and constructor (positional and keyword learners, model-only options),
- its scores (the first is DoubleML's default) and its nuisance learners: for each learner whether
  it must be a regressor, a classifier or may be either, and what it estimates,
- its nuisance fits (:class:`Nuisance`, per score and options): the prediction key (DoubleML's
  ``external_predictions`` key), the learner, the target, the sample it is fitted on (all rows,
  ``d == 0``/``d == 1``, ``z == 0``/``z == 1``, or the rows at/off a treatment level), the features
  and the stage (``ml_g`` of PLR/PLIV ``'IV-type'`` runs in stage 1 on :math:`Y - \tilde\theta D`,
  :math:`\tilde\theta` from :attr:`ModelDef.theta_initial` of stage 0),
- its score function (``psi_a``, ``psi_b`` of a score linear in :math:`\theta`), the propensity it
  clips to ``[trimming_threshold, 1 - trimming_threshold]`` and its data checks.

Adding a model means one :class:`ModelDef` in :data:`REGISTRY` (its entries are in
:mod:`fanfit.dml.registry`) plus its score function (in its family's module of
:mod:`fanfit.dml.scores`) and its client class (its family's module of
:mod:`fanfit.client.doubleml`); see
docs/models.md.

This module is the registry's lookup (:func:`model_def`, :data:`REGISTRY`); the types a model
declares (:class:`ModelDef`, :class:`Nuisance`, :class:`FoldProcedure`, :class:`FoldSplit`,
:func:`row_mask`) are defined in :mod:`fanfit.dml.model_types` and importable from here.
"""

from __future__ import annotations

from fanfit.dml.model_checks import column, column_label
from fanfit.dml.model_types import (
    FOLD_TARGET,
    RESIDUAL,
    FoldProcedure,
    FoldSplit,
    ModelDef,
    Nuisance,
    row_mask,
)
from fanfit.dml.registry import REGISTRY
from fanfit.errors import InvalidJobError

__all__ = [
    "FOLD_TARGET",
    "RESIDUAL",
    "REGISTRY",
    "FoldProcedure",
    "FoldSplit",
    "ModelDef",
    "Nuisance",
    "column",
    "column_label",
    "model_def",
    "row_mask",
]


def model_def(model: str) -> ModelDef:
    """The registry entry of ``model``.

    Raises
    ------
    InvalidJobError
        An unknown model, naming the known ones.
    """
    try:
        return REGISTRY[model]
    except (KeyError, TypeError):
        raise InvalidJobError(
            f"Unknown model {model!r}; choose one of {', '.join(REGISTRY)}."
        ) from None
