"""Extensions from other packages: the `gpuetl.plugins` entry-point group, loaded once, the first
time a step, source format or sink is looked up by a name gpuetl does not know itself. An entry
point names a module (imported: it registers what it defines at import) or a callable (called
with no arguments). A plugin that fails to load is a PluginError naming it."""

from __future__ import annotations

from importlib.metadata import entry_points

from .errors import GpuetlError

GROUP = "gpuetl.plugins"
_loaded = False


class PluginError(GpuetlError):
    pass


def load_plugins() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for ep in entry_points(group=GROUP):
        where = f"{ep.value} from {ep.dist.name if ep.dist else 'an unknown distribution'}"
        try:
            obj = ep.load()
            if callable(obj):
                obj()
        except Exception as err:
            raise PluginError(f"the gpuetl plugin {ep.name!r} ({where}) failed to load: "
                              f"{type(err).__name__}: {err}") from err


def reset_plugins() -> None:
    """Look the entry points up again at the next lookup (for tests)."""
    global _loaded
    _loaded = False
