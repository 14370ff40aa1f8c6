"""fanfit: serverless double/debiased machine learning and data-parallel training on AWS."""

from fanfit.errors import (
    FanfitError,
    InvalidDataError,
    InvalidFoldsError,
    InvalidJobError,
    InvalidLearnerError,
    JobFailedError,
    StackError,
)

__version__ = "0.1.0"

__all__ = [
    "Client",
    "FanfitError",
    "InvalidDataError",
    "InvalidFoldsError",
    "InvalidJobError",
    "InvalidLearnerError",
    "JobFailedError",
    "StackError",
    "__version__",
]


def __getattr__(name: str):  # lazy: the Lambda layer never imports the client's dependencies
    if name == "Client":
        from fanfit.client import Client

        return Client
    raise AttributeError(name)
