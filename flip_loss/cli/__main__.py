"""``python -m flip_loss.cli``: the command-line evaluator (the same as ``python -m flip_loss``)."""

import sys

from . import main
from .console import release_closed_streams

code = main()
release_closed_streams()
sys.exit(code)
