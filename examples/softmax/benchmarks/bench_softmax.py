"""The harness's suite (gemmbench.suite), configured by pyproject.toml's [tool.gemmbench]."""

from gemmbench import suite


class Softmax(suite.Suite):
    """Each softmax variant at each suite shape, device-timed."""
