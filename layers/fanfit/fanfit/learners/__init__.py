"""Allow-listed nuisance learners: :data:`ALLOWED_LEARNERS` and :class:`LearnerSpec`."""

from fanfit.learners.specs import ALLOWED_LEARNERS, LearnerSpec

__all__ = ["ALLOWED_LEARNERS", "LearnerSpec"]
