from ._core import *  # noqa: F401,F403
from ._core import ParseError as ParseError, __version__ as __version__
