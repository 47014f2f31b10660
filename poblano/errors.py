"""The one exception type the CLI turns into a one-line error and a non-zero exit."""

__all__ = ["UsageError"]


class UsageError(Exception):
    """Bad input from the user (a file, a flag, a trace line). The message is one line, no traceback."""
