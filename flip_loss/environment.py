"""The one reading of the ``FLIP_LOSS_*`` environment variables (docs/environment.md): the package,
the command line and ``setup.py`` read their switches through it, so each takes the spellings the
table documents and refuses any other value, with a message naming the variable. It imports only
``os``: ``setup.py`` loads this file on its own, before the package can be imported. The C++ side
reads its own variables by the same rule, with the same messages (``csrc/flip/environment.h``).

* A switch takes ``1``, ``true``, ``on``, ``yes`` or ``0``, ``false``, ``off``, ``no``, in any case.
* A choice takes one of its names, in any case.
* An empty value counts as unset (the default); anything else, `` 0`` and ``False `` included, is a
  ``ValueError``: a switch read loosely could leave on what its user meant to turn off.
"""

import os

ON = ("1", "true", "on", "yes")
OFF = ("0", "false", "off", "no")


def _refused(name: str, raw: str, spellings) -> ValueError:
    return ValueError(f"flip_loss: {name}='{raw}' must be one of {', '.join(spellings)} (any case)")


def choice(name: str, choices, default):
    """The lower-case value of variable ``name``, one of ``choices``; ``default`` when unset or empty."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() not in choices:
        raise _refused(name, raw, choices)
    return raw.lower()


def switch(name: str, default):
    """Whether switch ``name`` is on; ``default`` (any value, None too) when unset or empty."""
    value = choice(name, ON + OFF, None)
    return default if value is None else value in ON
