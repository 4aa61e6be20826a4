"""Extensions from other packages: the `gpuetl.plugins` entry-point group, loaded once, the first
time a step, source format or sink is looked up by a name gpuetl does not know itself. An entry
point names a module (imported: it registers what it defines at import) or a callable (called
with no arguments). A plugin that fails to load is a PluginError naming it."""

from __future__ import annotations

import difflib
import importlib
from importlib.metadata import entry_points

from .errors import SpecError

GROUP = "gpuetl.plugins"
_loaded = False


class PluginError(SpecError):
    """A plugin that does not load: the installation is wrong, not the data (exit 2)."""


def load_plugins() -> None:
    """Load every entry point once. A plugin that fails however it fails (an exception, or
    `sys.exit()` at import, which would end the command with the plugin's exit code and nothing
    said) is a PluginError naming it; a KeyboardInterrupt is the user's, and goes through."""
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
        except (Exception, SystemExit) as err:
            what = f"SystemExit({err.code!r}): it called sys.exit()" if isinstance(err, SystemExit) else \
                f"{type(err).__name__}: {err}"
            raise PluginError(f"the gpuetl plugin {ep.name!r} ({where}) failed to load: {what}",
                              hint=f"fix or uninstall {ep.dist.name if ep.dist else 'the distribution'}") from err


def reset_plugins() -> None:
    """Look the entry points up again at the next lookup (for tests)."""
    global _loaded
    _loaded = False


class Registry:
    """Extensions of one kind by name (source formats, sinks): the built-in ones imported on first
    lookup ("module:attribute"), the others registered by a function or a plugin. Plugins are
    loaded only for a name gpuetl does not know; an unknown name gets the closest known one."""

    def __init__(self, kind: str, builtin: dict[str, str]):
        self.kind = kind                      # "source type", "sink type": how errors name it
        self.builtin = builtin
        self.registered: dict[str, object] = {}

    def add(self, name: str, instance: object, *, replace: bool = False) -> None:
        if not replace and (name in self.builtin or name in self.registered):
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self.registered[name] = instance

    def known(self, name: str) -> bool:
        if name in self.builtin or name in self.registered:
            return True
        load_plugins()
        return name in self.registered

    def names(self, *, plugins: bool = True) -> list[str]:
        if plugins:
            load_plugins()
        return sorted({*self.builtin, *self.registered})

    def get(self, name: str):
        """The extension called `name`; an unknown name is a SpecError with the closest known name."""
        if name not in self.registered and name in self.builtin:
            module, attr = self.builtin[name].split(":")
            self.registered[name] = getattr(importlib.import_module(module), attr)()
        if name not in self.registered:
            load_plugins()
        if name not in self.registered:
            raise SpecError(self.unknown(name))
        return self.registered[name]

    def unknown(self, name: str) -> str:
        known = self.names()
        hint = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
        return (f"unknown {self.kind} {name!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
                + f" (known: {', '.join(known)})")
