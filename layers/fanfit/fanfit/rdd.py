"""``fanfit.rdd``, as ``doubleml.rdd``: :class:`RDFlex` on a fanfit stack
(:mod:`fanfit.client.doubleml.rdd`; it needs the client extra ``pip install 'fanfit[rdd]'``:
DoubleML's RDFlex runs rdrobust)."""

from fanfit.client.doubleml.rdd import RDFlex

__all__ = ["RDFlex"]
