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
    "DoubleMLLPLR",
    "DoubleMLLPQ",
    "DoubleMLPLIV",
    "DoubleMLPLPR",
    "DoubleMLPLR",
    "DoubleMLPQ",
    "DoubleMLQTE",
    "DoubleMLSSM",
    "from_doubleml",
)

__all__ = [
    "Client",
    "FanfitError",
    "InvalidDataError",
    "InvalidFoldsError",
    "InvalidJobError",
    "InvalidLearnerError",
    "JobFailedError",
    "RDFlex",
    "StackError",
    "__version__",
    *_DOUBLEML_NAMES,
]


def __getattr__(name: str):  # lazy: the Lambda layer never imports the client's dependencies
    if name == "Client":
        from fanfit.client import Client

        return Client
    if name in _DOUBLEML_NAMES:
        from fanfit.client import doubleml

        return getattr(doubleml, name)
    if name == "RDFlex":  # its own module: DoubleML's rdd imports rdrobust (and plotnine)
        from fanfit.client.doubleml.rdd import RDFlex

        return RDFlex
    raise AttributeError(name)
