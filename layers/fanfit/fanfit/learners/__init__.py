"""Allow-listed nuisance learners: :data:`ALLOWED_LEARNERS`, :class:`LearnerSpec`, :func:`as_learner_spec`."""

from fanfit.learners.specs import (
    ALLOWED_LEARNERS,
    ALLOWED_TRANSFORMERS,
    COMPOSITE_LEARNERS,
    LearnerSpec,
    as_learner_spec,
)

__all__ = [
    "ALLOWED_LEARNERS",
    "ALLOWED_TRANSFORMERS",
    "COMPOSITE_LEARNERS",
    "LearnerSpec",
    "as_learner_spec",
]
