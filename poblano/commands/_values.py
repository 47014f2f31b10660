"""Parsing of option values shared by the commands (this module is not a command: no ``NAME``)."""

from poblano.errors import UsageError

__all__ = ["comma_separated"]


def comma_separated(text, option, kind=int, skip_empty=False):
    """The values of a comma-separated option (``"1,2,4"``) as ``kind``; a one-line
    :class:`UsageError` naming ``option`` when one is not a ``kind`` (an empty item too, unless
    ``skip_empty``)."""
    what = "integers" if kind is int else "numbers"
    try:
        return [kind(part) for part in text.split(",") if part.strip() or not skip_empty]
    except ValueError:
        raise UsageError(f"{option} must be comma-separated {what}, got {text!r}") from None
