"""``python -m flip_loss.psychophysics``: the low-level-vision suite (see ``cli.main``)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
