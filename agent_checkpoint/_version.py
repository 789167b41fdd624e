"""The package's version, apart so that modules below the package can name it without importing
the package (pyproject.toml holds the same figure)."""

__version__ = "0.4.0"
