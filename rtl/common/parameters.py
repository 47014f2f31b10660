"""Elaboration-parameter errors for components.

A component whose ``__init__`` rejects a parameter has already been created (Amaranth's
``Elaboratable.__new__`` runs first), so when the half-built object is collected Amaranth warns
that it was "created but never used", and under ``-W error`` that warning would be attributed to
whatever test happens to be running. :func:`parameter_error` marks the object as deliberately
unused before the exception leaves ``__init__``::

    def __init__(self, rows=4):
        if rows < 1:
            raise parameter_error(self, ValueError, f"rows must be positive, got {rows!r}")
"""

__all__ = ["parameter_error", "check_positive_int"]


def parameter_error(component, exc_type, message):
    """Return ``exc_type(message)`` after silencing ``component``'s unused-elaboratable warning."""
    component._MustUse__silence = True
    return exc_type(message)


def check_positive_int(component, name, value, *, minimum=1):
    """Raise :class:`ValueError` unless ``value`` is an ``int`` (not ``bool``) of at least ``minimum``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise parameter_error(component, ValueError,
                              f"{name} must be an integer of at least {minimum}, got {value!r}")
