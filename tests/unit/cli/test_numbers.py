"""Number options read ASCII digits only (cli/numbers.py): Python's int() and float() accept any Unicode digit,
so '٣' (Arabic-Indic three) or '３' (full-width three) would silently be read as 3. Each is one line, exit 2,
and nothing is stored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

CliResult = tuple[int, str, str]
NON_ASCII = ["٣", "３", "1٠", "٠.٥"]


@pytest.mark.parametrize("value", NON_ASCII)
@pytest.mark.parametrize(
    "args",
    [
        ("run", "-f", "fake", "--steps"),
        ("run", "-f", "fake", "--timeout"),
        ("run", "-f", "fake", "--wait-quiet"),
        ("results", "--last"),
        ("report", "--last"),
        ("data", "imagenet", "OUT", "--seed"),
    ],
    ids=lambda a: " ".join(a),
)
def test_a_number_in_other_digits_is_refused(
    cli: Callable[..., CliResult], tmp_path: Path, args: tuple[str, ...], value: str
) -> None:
    store = tmp_path / "s.db"
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in args]
    code, out, err = cli(*argv, value, *(["--store", str(store)] if args[0] != "data" else []))
    assert code == 2, (out, err)
    assert err.strip().count("\n") == 0 and "ASCII digits" in err, err
    assert not store.exists() and not (tmp_path / "out").exists()


def test_ascii_digits_still_read(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    """The same option with ASCII digits is accepted (the check is about the characters, not the value)."""
    code, _, err = cli("results", "--last", "3", "--store", str(tmp_path / "none.db"))
    assert "ASCII digits" not in err and code in (0, 2)
