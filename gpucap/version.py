"""The package version, one place for the package and the files it writes."""

__version__ = "0.1.0"
