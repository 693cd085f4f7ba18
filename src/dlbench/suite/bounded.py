"""Reading untrusted suite YAML with bounds: size, text, nesting depth and alias expansion are checked
before anything is built, so a binary file, a 5,000-level nest or a "billion laughs" alias bomb is a one-line
error in milliseconds, never a traceback or gigabytes of memory. A key given twice in one mapping is refused too
(YAML would keep the last one silently)."""

from __future__ import annotations

from typing import Any

import yaml

MAX_BYTES = 1 << 20  # a suite is a page of YAML; 1 MiB is far beyond any real one
MAX_DEPTH = 32  # nesting of mappings and sequences
MAX_NODES = 100_000  # nodes after alias expansion (a billion-laughs document expands to 10^9)


class BoundedYamlError(ValueError):
    """The text is not a suite dlbench will read; `line` is 1-based (0 when unknown)."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line

    def where(self, source: str) -> str:
        """`source:line: message` (no line when unknown)."""
        return f"{source}:{self.line}: {self}" if self.line else f"{source}: {self}"


def decode(raw: bytes) -> str:
    """The suite's text: at most MAX_BYTES of UTF-8 with no NUL byte."""
    if len(raw) > MAX_BYTES:
        raise BoundedYamlError(f"file is larger than {MAX_BYTES:,} bytes, the most a suite may have")
    if b"\0" in raw:
        raise BoundedYamlError(
            "binary file (contains a NUL byte), not YAML text", raw[: raw.index(b"\0")].count(b"\n") + 1
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BoundedYamlError("not UTF-8 text", raw[: exc.start].count(b"\n") + 1) from None


def _check_depth(text: str) -> None:
    """Walk the parser's events (no recursion, no nodes built) and refuse nesting deeper than MAX_DEPTH."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark is not None else 0  # the parser always sets it
                raise BoundedYamlError(f"nested more than {MAX_DEPTH} levels deep", line)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Nodes the document would have with every alias expanded (shared nodes counted once per use)."""
    known = memo.get(id(node))
    if known is not None:
        return known
    memo[id(node)] = MAX_NODES + 1  # a node reached again while being counted: a cycle, refused as too big
    size = 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            size += _expanded_size(key, memo) + _expanded_size(value, memo)
            if size > MAX_NODES:
                break
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            size += _expanded_size(item, memo)
            if size > MAX_NODES:
                break
    memo[id(node)] = size
    return size


def _check_duplicate_keys(root: yaml.Node) -> None:
    """Refuse a mapping that gives a key twice: YAML keeps the last silently, so the first would be lost."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            lines: dict[str, int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value != "<<":
                    if key.value in lines:
                        raise BoundedYamlError(
                            f"key {key.value!r} is given twice (first on line {lines[key.value]}): give each key once",
                            key.start_mark.line + 1,
                        )
                    lines[key.value] = key.start_mark.line + 1
                todo += [key, value]
        elif isinstance(node, yaml.SequenceNode):
            todo += node.value


def load(text: str) -> tuple[yaml.Node | None, Any]:
    """The composed node graph (for line numbers) and the plain data of one YAML document, within bounds.

    Raises BoundedYamlError for a document out of bounds, yaml.MarkedYAMLError for invalid YAML.
    """
    _check_depth(text)
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if node is not None and _expanded_size(node, {}) > MAX_NODES:
        raise BoundedYamlError(
            f"expands to more than {MAX_NODES:,} values through aliases (an alias bomb?)", node.start_mark.line + 1
        )
    if node is not None:
        _check_duplicate_keys(node)
    return node, yaml.safe_load(text)
