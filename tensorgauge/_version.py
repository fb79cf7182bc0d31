"""The package version, in a module of its own: every layer may read it without importing the package's
public face (which imports the layers above). pyproject.toml reads it from here: the one place to bump."""

__version__ = "0.2.0"
