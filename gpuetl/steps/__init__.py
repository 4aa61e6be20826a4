"""Registered steps. Importing this package registers them all."""

from .base import STEPS, Step, StepError, register, step_class  # noqa: F401
from . import _load_all  # noqa: F401,E402
