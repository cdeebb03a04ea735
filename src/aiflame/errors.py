"""Errors that the command line reports as one clear line (never a traceback)."""


class AiflameError(Exception):
    """A problem the user can act on: bad input, bad option, missing capability."""


class InputError(AiflameError):
    """An input file is missing, unreadable, corrupt or of an unknown format."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
