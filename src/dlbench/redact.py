"""The one place secrets are hidden: every store URL, libpq keyword string, error line and recorded command that
dlbench prints, stores or forwards passes through `redact`.

A URL's password runs from the colon after the user name to the *last* '@' of the URL's authority, as URL
parsers read it, so a password holding '@' is hidden whole (postgresql://bench:ret@99@db/x ->
postgresql://bench:***@db/x). libpq keywords (password=..., sslpassword=..., quoted or not, and PGPASSWORD=...)
are hidden too. Hiding too much (a port that looked like a password) is harmless; showing a secret is not.
"""

from __future__ import annotations

import re

_URL_SECRET = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s'\"]*:)[^\s'\"]*@")
_KEYWORD_SECRET = re.compile(
    r"(\b(?:pg|ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|[^\s&'\"]+)", re.IGNORECASE
)
_LIBPQ = re.compile(
    r"^\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode|options|"
    r"connect_timeout|application_name|target_session_attrs)\s*=",
    re.IGNORECASE,
)
HIDDEN = "***"


def redact(text: str) -> str:
    """text with every password hidden: postgresql://user:secret@host/db -> postgresql://user:***@host/db,
    host=db password='s e' -> host=db password=***."""
    return _KEYWORD_SECRET.sub(rf"\1{HIDDEN}", _URL_SECRET.sub(rf"\1{HIDDEN}@", text))


def is_libpq_string(text: str) -> bool:
    """Whether text reads as a libpq keyword/value connection string (host=... dbname=...), not a path or URL."""
    return bool(_LIBPQ.match(text)) and "://" not in text


__all__ = ["HIDDEN", "is_libpq_string", "redact"]
