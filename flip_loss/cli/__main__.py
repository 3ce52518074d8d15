"""``python -m flip_loss.cli``: the command-line evaluator (the same as ``python -m flip_loss``)."""

import sys

from . import main

sys.exit(main())
