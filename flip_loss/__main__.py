"""``python -m flip_loss``: the command-line FLIP evaluator (see ``flip_loss.cli``)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
