"""``python -m flip_loss``: the command-line FLIP evaluator (see ``flip_loss.cli``)."""

import sys

from .cli import main
from .cli.console import release_closed_streams

if __name__ == "__main__":
    code = main()
    release_closed_streams()
    sys.exit(code)
