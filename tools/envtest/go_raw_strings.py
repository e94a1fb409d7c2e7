"""Extract a `map[string]string` literal of Go string constants from generated Go source.

CDI (crds_generated.go) and KubeVirt (validations_generated.go) ship their CRD YAML as Go string literals. A
Go raw string cannot contain a backtick, so generators splice one in as `` `...` + "`" + `...` ``. This module
tokenizes just enough Go (raw strings, interpreted strings, `+`, `:`, `,`, braces, comments) to rebuild each
value exactly, instead of guessing with regular expressions.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass


class GoSourceError(ValueError):
    """The Go file does not have the expected shape; the upstream generator probably changed."""


@dataclass(frozen=True)
class _Token:
    kind: str  # "str", "op" or "word"
    value: str
    offset: int


def _interpreted_string(src: str, start: int) -> tuple[str, int]:
    """Decode the Go "..." literal starting at src[start]; return the value and the offset after it."""
    index = start + 1
    while index < len(src):
        char = src[index]
        if char == "\\":
            index += 2
            continue
        if char == '"':
            literal = src[start : index + 1]
            # Go and Python agree on the escapes generators emit (\n, \t, \\, \", \xNN, \uNNNN).
            return ast.literal_eval(literal), index + 1
        if char == "\n":
            break
        index += 1
    raise GoSourceError(f"unterminated interpreted string at offset {start}")


def _tokens(src: str) -> Iterator[_Token]:
    index = 0
    length = len(src)
    while index < length:
        char = src[index]
        if char in " \t\r\n":
            index += 1
        elif src.startswith("//", index):
            end = src.find("\n", index)
            index = length if end < 0 else end
        elif src.startswith("/*", index):
            end = src.find("*/", index + 2)
            if end < 0:
                raise GoSourceError(f"unterminated comment at offset {index}")
            index = end + 2
        elif char == "`":
            end = src.find("`", index + 1)
            if end < 0:
                raise GoSourceError(f"unterminated raw string at offset {index}")
            # Go drops carriage returns inside raw strings.
            yield _Token("str", src[index + 1 : end].replace("\r", ""), index)
            index = end + 1
        elif char == '"':
            value, after = _interpreted_string(src, index)
            yield _Token("str", value, index)
            index = after
        elif char.isalnum() or char == "_":
            start = index
            while index < length and (src[index].isalnum() or src[index] in "_."):
                index += 1
            yield _Token("word", src[start:index], start)
        else:
            yield _Token("op", char, index)
            index += 1


def extract_string_map(src: str, var_name: str) -> dict[str, str]:
    """Return the entries of `var <var_name> map[string]string = map[string]string{ "k": `v` + "`" + `...`,
    }`.

    Raises GoSourceError when the variable is absent or an entry is not a concatenation of string literals.
    """
    tokens = list(_tokens(src))
    start = _find_map_body(tokens, var_name)
    entries: dict[str, str] = {}
    index = start
    while True:
        token = tokens[index]
        if token.kind == "op" and token.value == "}":
            return entries
        if token.kind != "str":
            raise GoSourceError(
                f"expected a string key in {var_name} at offset {token.offset}, got {token.value!r}"
            )
        key = token.value
        colon = tokens[index + 1]
        if colon.value != ":":
            raise GoSourceError(f"expected ':' after key {key!r} at offset {colon.offset}")
        index += 2
        parts: list[str] = []
        while True:
            piece = tokens[index]
            if piece.kind != "str":
                raise GoSourceError(f"value of {key!r} is not a string literal (offset {piece.offset})")
            parts.append(piece.value)
            index += 1
            if tokens[index].value == "+":
                index += 1
                continue
            break
        if key in entries:
            raise GoSourceError(f"duplicate key {key!r} in {var_name}")
        entries[key] = "".join(parts)
        if tokens[index].value == ",":
            index += 1


def _find_map_body(tokens: list[_Token], var_name: str) -> int:
    """Index of the first token inside the `{` that opens the map literal assigned to var_name."""
    for index, token in enumerate(tokens):
        if (
            token.kind == "word"
            and token.value == var_name
            and index > 0
            and tokens[index - 1].value == "var"
        ):
            for inner in range(index + 1, len(tokens)):
                if tokens[inner].value == "{":
                    return inner + 1
                if tokens[inner].kind == "str":
                    break
    raise GoSourceError(
        f"no `var {var_name} ... = map[string]string{{` found; did the upstream generator change?"
    )
