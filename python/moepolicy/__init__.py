"""moepolicy: policies and algorithms for serving Mixture-of-Experts models beyond GPU memory.

The C++ library's traces, caches, balancers, router, schedulers, predictors, bit allocation,
placement and expert-parallel rebalance, taking numpy arrays (or anything with ``__array__``,
such as a CPU torch tensor). Errors are ``ValueError`` with the library's message, or
``ParseError`` (a ``ValueError``) with ``file`` and ``line`` for a malformed trace.
"""

from ._core import *  # noqa: F401,F403
from ._core import ParseError, __version__  # noqa: F401
