"""The package version, in a module of its own: every layer may read it without importing the package's
public face (which imports the layers above)."""

__version__ = "0.1.0"
