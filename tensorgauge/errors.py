"""Errors the user can fix; the CLI prints their message on one line and exits 2."""


class TensorgaugeError(Exception):
    """A problem with the user's input or files, not a bug."""

    exit_code = 2


class StoreError(TensorgaugeError):
    """The run store cannot be opened, read or written."""


class StoreUnreachable(StoreError):
    """The store's server stopped answering (a restart, a network outage): worth retrying."""


class UnknownRunError(TensorgaugeError):
    """No stored run matches the given id."""
