"""``python -m flip_loss``: the command-line FLIP evaluator (see ``flip_loss.cli``)."""

import gc
import sys

from .cli import main
from .cli.console import release_closed_streams

if __name__ == "__main__":
    code = main()
    release_closed_streams()
    gc.freeze()  # the process ends: its last garbage collection need not walk torch's objects
    sys.exit(code)
