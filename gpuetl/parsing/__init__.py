"""Backend-neutral log line parsing definitions.

Everything here produces ONE whole-line regular expression with named groups,
valid in Python ``re``, RE2 (``pyarrow.compute.extract_regex``) and the cuDF
regex subset (``Series.str.extract``).  See :mod:`gpuetl.parsing.presets` for
the null conventions (``-`` and empty optional groups).
"""

from gpuetl.parsing.presets import PRESETS, ParseRule, preset
from gpuetl.parsing.template import template_to_regex

__all__ = ["PRESETS", "ParseRule", "preset", "template_to_regex"]
