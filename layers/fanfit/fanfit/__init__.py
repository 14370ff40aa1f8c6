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

#: DoubleML's classes on a stack (:mod:`fanfit.client.doubleml`), imported on first use: they
#: import DoubleML and pandas, which ``import fanfit`` (and the Lambda layer) never loads.
_DOUBLEML_NAMES = (
    "DoubleMLAPO",
    "DoubleMLAPOS",
    "DoubleMLCVAR",
    "DoubleMLDID",
    "DoubleMLDIDCS",
    "DoubleMLDIDMulti",
    "DoubleMLIIVM",
    "DoubleMLIRM",
    "DoubleMLLPQ",
    "DoubleMLPLIV",
    "DoubleMLPLR",
    "DoubleMLPQ",
    "DoubleMLQTE",
    "DoubleMLSSM",
    "from_doubleml",
)
#: DoubleML's panel and logistic partially linear models (:mod:`fanfit.client.doubleml_plm`).
_PLM_NAMES = ("DoubleMLPLPR",)

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
    *_DOUBLEML_NAMES,
    *_PLM_NAMES,
]


def __getattr__(name: str):  # lazy: the Lambda layer never imports the client's dependencies
    if name == "Client":
        from fanfit.client import Client

        return Client
    if name in _DOUBLEML_NAMES:
        from fanfit.client import doubleml

        return getattr(doubleml, name)
    if name in _PLM_NAMES:
        from fanfit.client import doubleml_plm

        return getattr(doubleml_plm, name)
    raise AttributeError(name)
