"""The plugin host: preprocessor plugins (pluggy) found, checked, loaded and hot-reloaded.

A plugin is a module whose functions are marked with `mqbridge.hookimpl`: a built-in (declared
once, in `discovery.BUILTIN_PLUGINS`), a loose `.py` file in a `[bridge] plugin_dirs` folder, or
an installed package that declares an entry point in the group `mqbridge`::

    [project.entry-points.mqbridge]
    audit = "mqbridge_audit.plugin"

The modules, one concept each: `spec` (the hookspecs and markers), `registry` (what plugins
register), `discovery` (finding plugin code, with the permission checks), `generation` (one
validated set of plugins and chains), `chain` (what a unit of work runs) and `host` (the
`PluginHost` the bridge uses). Plugin authors import from `mqbridge`, not from here.
"""

from __future__ import annotations

from mqbridge.plugins.chain import PreprocessorChain, copy_message, current_chain
from mqbridge.plugins.host import PluginHost, ResultObserver, report
from mqbridge.plugins.registry import Preprocessor, PreprocessorOptions, PreprocessorRegistry
from mqbridge.plugins.spec import hookimpl, hookspec

__all__ = ["PluginHost", "Preprocessor", "PreprocessorChain", "PreprocessorOptions", "PreprocessorRegistry",
           "ResultObserver", "copy_message", "current_chain", "hookimpl", "hookspec", "report"]
