"""Text from users and files printed safely: control characters shown escaped, never sent to the terminal raw."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 (tab and newline kept) and C1 controls, DEL


def printable(text: str) -> str:
    """The text with each control character escaped ('\\x1b[31m' for ESC [31m), so that a name or command a
    user stored cannot move the cursor, recolour the terminal or set its title when dlbench prints it."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


__all__ = ["printable"]
