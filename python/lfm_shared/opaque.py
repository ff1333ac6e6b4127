"""Values that stay closed where they cannot be opened.

A shipped call's result travels through a bare worker (one without numpy, pandas or the
user's modules) on its way back to the submit side, or on to the next shipped call. The worker
keeps such a value as an `Opaque` (its pickle, unopened); pickling an `Opaque` again gives a
pickle that opens to the value itself wherever its modules import (the submit side, the next
call's pack) and to the same `Opaque` anywhere else. Only the standard library is used: this
module is imported by bare workers and by the call runner alike.
"""

import pickle


class Opaque:
    """A value's pickle, kept unopened because its modules do not import here."""

    __slots__ = ("data", "reason")

    def __init__(self, data, reason=""):
        self.data = bytes(data)
        self.reason = reason

    def __reduce__(self):
        return (opened, (self.data,))

    def __repr__(self):
        why = f": {self.reason}" if self.reason else ""
        return f"<lfm Opaque value, {len(self.data)} bytes of pickle{why}>"


def opened(data):
    """The value `data` pickles, or an Opaque of it where its classes do not import."""
    try:
        return pickle.loads(data)
    except (ImportError, AttributeError) as error:
        return Opaque(data, str(error))


def arguments_in(data, cwd):
    """A call's arguments pickled elsewhere (`data`, unopened on the way), with the directory
    the call runs in added as the runner reads it: (args, kwargs, {"cwd": cwd})."""
    loaded = pickle.loads(data)
    return (loaded[0], loaded[1], dict(loaded[2] if len(loaded) > 2 else {}, cwd=cwd))
