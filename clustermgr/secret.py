"""A secret value that does not print itself: what a password read from a file or the
environment travels in (BMC passwords, the LDAP replica's bind password) until the one call
that hands it to its client. Shared by providers and directors, so it lives at the bottom
of the layers, next to the errors."""

from __future__ import annotations

MASK = "********"


class Secret:
    """A password that does not print itself: str, repr and format show a mask."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK})"

    def __str__(self) -> str:
        return MASK
