"""dlbench: measure how fast deep-learning frameworks train the standard models, one protocol for all."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dlbench")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
