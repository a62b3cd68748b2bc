"""The package's version, in one place: pyproject.toml reads it (scikit-build-core's regex provider), the
package exports it as ggmlpy.__version__, and model files record it. A module of its own at the
bottom layer, so that any layer can name the version without importing the whole package."""
__version__ = "0.1.0"
