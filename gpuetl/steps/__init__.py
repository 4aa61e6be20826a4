"""Pipeline steps; each module registers its own (base.discover finds them)."""

from .base import STEPS, GlobalStep, InOrderGlobalStep, RowStep, Step, StepError, discover, register, step_class  # noqa: F401

discover()
