"""Built-in preprocessors. Each module is an ordinary mqbridge plugin (it registers its
preprocessors through `mqbridge_register_preprocessors`), loaded exactly like a drop-in file or an
installed package. Which modules are built-ins is declared once, in
`mqbridge.plugins.discovery.BUILTIN_PLUGINS` (pyproject's entry points are checked against it).

The directory is also a fine place for site-specific drop-in files when it is listed in
`[bridge] plugin_dirs`; the built-in modules themselves are then not loaded a second time.
"""
