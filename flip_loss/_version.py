"""The version of flip-loss, the one source (pyproject.toml reads it from here without importing the
package; ``flip_loss.__version__`` and ``flip-loss --version`` show it)."""

__version__ = "0.1.0"
