"""The out-of-range warning as the tests see it: the messages of one call, whatever the process
has shown before (with the fixture ``fresh_warning`` in conftest.py)."""

import warnings


def range_warnings(fn):
    """The out-of-range warnings ``fn()`` raises, as messages."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if "outside" in str(w.message) and "[0, 1]" in str(w.message)]
