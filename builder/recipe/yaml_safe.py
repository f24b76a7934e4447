"""A hardened YAML reader for recipe files and `--set` values.

Whatever bytes it is handed, it returns plain data (dict / list / str / int / float / bool / None)
with a `file:line:col` per value, or raises one `UserError` naming the file and, where there is
one, the line and column. Time and memory stay bounded by the limits below, and nothing is ever
expanded, because the document is built event by event with an explicit stack (no recursion):

- regular files only, at most `MAX_BYTES`; a read never blocks and takes at most `MAX_BYTES + 1`;
- UTF-8 text (an optional UTF-8 byte-order mark), no control characters, no lone surrogates;
- one YAML document; collections nested at most `MAX_DEPTH` deep; at most `MAX_NODES` values per
  recipe, `extends:` files and `--set` values together (the caller shares one `Budget`);
- no anchors (`&a`) or aliases (`*a`): recipes share settings through `extends:`;
- mapping keys are unique strings;
- tags: only the core `!!str !!int !!float !!bool !!null !!map !!seq`; numbers of at most
  `MAX_NUMBER_CHARS` characters; YAML 1.1 timestamps (`2024-01-01`) stay strings.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from builder.errors import UserError

MAX_BYTES = 1 << 20  # 1 MiB per file
MAX_DEPTH = 64  # nested mappings / sequences
MAX_NODES = 100_000  # YAML values per recipe (keys included), extends and --set included
MAX_NUMBER_CHARS = 100  # an int or float literal
MAX_FILES = 32  # files read for one recipe (the file named plus its extends: chain)

Loc = tuple[str, int, int]  # file, line, column (1-based)
Path_ = tuple[str | int, ...]

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it
_CONSTRUCT = SafeConstructor()
_RESOLVE = yaml.resolver.Resolver()
_T = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_T + n: "!!" + n for n in ("str", "int", "float", "bool", "null")}
_COLLECTION_TAGS = {yaml.MappingStartEvent: _T + "map", yaml.SequenceStartEvent: _T + "seq"}
# Outside YAML's printable set (https://yaml.org/spec/1.2.2/#51-character-set); covers NUL and surrogates.
_UNPRINTABLE = re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# What an escape in a double-quoted string can still produce: C0/C1 controls and lone surrogates.
_BAD_IN_STRING = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")  # escaped when a message shows text
_UTF16_32_BOMS = {
    b"\xff\xfe\x00\x00": "UTF-32",
    b"\x00\x00\xfe\xff": "UTF-32",
    b"\xff\xfe": "UTF-16",
    b"\xfe\xff": "UTF-16",
}


@dataclass
class Budget:
    """What one recipe load may still spend: YAML values and files (the `extends:` chain)."""

    nodes: int = MAX_NODES
    files: int = MAX_FILES


def clip(text: str, limit: int = 80) -> str:
    """`text` for a one-line message: cut to `limit` characters, control characters escaped."""
    return printable(text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)")


def printable(text: str) -> str:
    """`text` with control characters and lone surrogates escaped (`\\n`, `\\udce9`)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def read_file(path: Path, display: str) -> str:
    """The text of a regular file of at most MAX_BYTES bytes; UserError for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UserError(f"recipe not found: {display}") from None
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL in the path
        raise UserError(f"cannot read recipe: {getattr(exc, 'strerror', None) or exc}", location=display) from None
    try:
        data = _read_capped(fd, display)
    finally:
        os.close(fd)
    return _decode(data, display)


def _read_capped(fd: int, display: str) -> bytes:
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        kind = (
            "a directory"
            if stat.S_ISDIR(mode)
            else "a pipe"
            if stat.S_ISFIFO(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket or other special file"
        )
        raise UserError(f"not a regular file ({kind}); a recipe is a YAML file", location=display)
    too_big = UserError(f"file is larger than {MAX_BYTES} bytes (1 MiB), the limit for a recipe", location=display)
    if os.fstat(fd).st_size > MAX_BYTES:
        raise too_big
    chunks, size = [], 0
    while size <= MAX_BYTES:
        try:
            chunk = os.read(fd, MAX_BYTES + 1 - size)
        except OSError as exc:
            raise UserError(f"cannot read recipe: {exc.strerror}", location=display) from None
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > MAX_BYTES:  # the file grew while we read it
        raise too_big
    return b"".join(chunks)


def _decode(data: bytes, display: str) -> str:
    for bom, name in _UTF16_32_BOMS.items():
        if data.startswith(bom):  # UTF-32 first: its little-endian mark starts like UTF-16's
            raise UserError(f"the file is {name} text (byte-order mark); save the recipe as UTF-8", location=display)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise UserError(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} cannot start or continue a character (binary file?)",
            location=f"{display}:{line}:{col}",
        ) from None


def parse(text: str, source: str, budget: Budget, *, mapping: bool) -> tuple[Any, dict[Path_, Loc]]:
    """One YAML document → (data, locations by data path). `mapping`: the root must be a mapping."""
    bad = _UNPRINTABLE.search(text)
    if bad:
        raise UserError(
            f"character U+{ord(bad.group()):04X} is not allowed in YAML (binary file?)",
            location=_where_index(text, bad.start(), source),
        )
    builder = _Builder(source, budget, mapping)
    loader = _Loader(text)
    try:
        while loader.check_event():
            builder.event(loader.get_event())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        detail = f" ({exc.context})" if exc.context and exc.problem else ""
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise UserError(f"invalid YAML: {exc.problem or exc.context}{detail}", location=where) from None
    except yaml.YAMLError as exc:  # a ReaderError: no mark, a character position
        position = getattr(exc, "position", None)
        where = _where_index(text, position, source) if isinstance(position, int) else source
        raise UserError(f"invalid YAML: {getattr(exc, 'reason', exc)}", location=where) from None
    finally:
        loader.dispose()
    return builder.root, builder.locations


def _where_index(text: str, index: int, source: str) -> str:
    line = text.count("\n", 0, index) + 1
    return f"{source}:{line}:{index - (text.rfind(chr(10), 0, index) + 1) + 1}"


def _where(event: yaml.Event, source: str) -> str:
    return f"{source}:{event.start_mark.line + 1}:{event.start_mark.column + 1}"


class _Frame:
    """An open mapping or sequence: its value, data path, the key awaiting a value, keys seen."""

    __slots__ = ("value", "path", "key", "seen")

    def __init__(self, value: dict | list, path: Path_) -> None:
        self.value, self.path = value, path
        self.key: str | None = None  # a mapping's key awaiting its value
        self.seen: dict[str, int] = {}  # key -> line of its first occurrence


class _Builder:
    """Builds data from parser events with an explicit stack, enforcing the policy above."""

    def __init__(self, source: str, budget: Budget, mapping: bool) -> None:
        self.source, self.budget, self.mapping = source, budget, mapping
        self.stack: list[_Frame] = []
        self.root: Any = None
        self.locations: dict[Path_, Loc] = {}
        self.documents = 0

    def fail(self, event: yaml.Event, message: str) -> UserError:
        return UserError(message, location=_where(event, self.source))

    def event(self, event: yaml.Event) -> None:
        if isinstance(event, yaml.DocumentStartEvent):
            self.documents += 1
            if self.documents > 1:
                raise self.fail(event, "a second YAML document starts here; a recipe is one document")
        elif isinstance(event, yaml.CollectionEndEvent):
            self.stack.pop()
        elif isinstance(event, yaml.AliasEvent):
            raise self.fail(
                event,
                f"YAML alias *{clip(event.anchor, 40)} is not allowed: recipes use no "
                "anchors or aliases (share settings with extends:)",
            )
        elif isinstance(event, yaml.NodeEvent):
            self.node(event)

    def node(self, event: yaml.NodeEvent) -> None:
        if event.anchor is not None:
            raise self.fail(
                event,
                f"YAML anchor &{clip(event.anchor, 40)} is not allowed: recipes use no "
                "anchors or aliases (share settings with extends:)",
            )
        self.budget.nodes -= 1
        if self.budget.nodes < 0:
            raise self.fail(event, f"more than {MAX_NODES} YAML values (the limit per recipe, extends: included)")
        top = self.stack[-1] if self.stack else None
        if top is not None and isinstance(top.value, dict) and top.key is None:
            top.key = self.key(event, top)
            return
        value = self.scalar(event) if isinstance(event, yaml.ScalarEvent) else self.collection(event)
        self.attach(event, top, value)

    def key(self, event: yaml.NodeEvent, frame: _Frame) -> str:
        if not isinstance(event, yaml.ScalarEvent):
            raise self.fail(event, "a mapping key must be a string, not a YAML collection")
        key = self.scalar(event)
        if not isinstance(key, str):
            raise self.fail(
                event, f"a mapping key must be a string, not {type(key).__name__} {clip(repr(key), 40)} (quote it)"
            )
        if key in frame.seen:
            raise self.fail(event, f"duplicate key {clip(key, 60)!r} (first at line {frame.seen[key]})")
        frame.seen[key] = event.start_mark.line + 1
        return key

    def attach(self, event: yaml.NodeEvent, top: _Frame | None, value: Any) -> None:
        path: Path_
        if top is None:
            if self.mapping and not isinstance(value, dict) and value is not None:
                kind = "a list" if isinstance(value, list) else f"a {type(value).__name__}"
                raise self.fail(event, f"a recipe must be a mapping of sections (section: ...), not {kind}")
            self.root, path = value, ()
        elif isinstance(top.value, dict):
            assert top.key is not None  # node() fills the key first
            path, top.value[top.key], top.key = (*top.path, top.key), value, None
        else:
            path = (*top.path, len(top.value))
            top.value.append(value)
        self.locations[path] = (self.source, event.start_mark.line + 1, event.start_mark.column + 1)
        if isinstance(value, (dict, list)):
            if len(self.stack) >= MAX_DEPTH:
                raise self.fail(event, f"YAML nested deeper than {MAX_DEPTH} levels")
            self.stack.append(_Frame(value, path))

    def collection(self, event: yaml.NodeEvent) -> dict | list:
        if event.tag not in (None, "!", _COLLECTION_TAGS[type(event)]):
            raise self.fail(event, _tag_refused(event.tag))
        return {} if isinstance(event, yaml.MappingStartEvent) else []

    def scalar(self, event: yaml.ScalarEvent) -> Any:
        value, tag = event.value, event.tag
        if tag is None:
            tag = _RESOLVE.resolve(yaml.ScalarNode, value, (True, False)) if event.implicit[0] else _T + "str"
        elif tag == "!":
            tag = _T + "str"
        elif tag not in _SCALAR_TAGS:
            raise self.fail(event, _tag_refused(tag))
        elif tag != _T + "str" and _RESOLVE.resolve(yaml.ScalarNode, value, (True, False)) != tag:
            raise self.fail(event, f"{clip(value, 40)!r} is not a valid {_tag_name(tag)}")
        if tag not in _SCALAR_TAGS:  # timestamps, '=' and '<<': kept as the text written
            tag = _T + "str"
        if tag in (_T + "int", _T + "float") and len(value) > MAX_NUMBER_CHARS:
            raise self.fail(event, f"a number of {len(value)} characters is too long (at most {MAX_NUMBER_CHARS})")
        if tag == _T + "str":
            bad = _BAD_IN_STRING.search(value)
            if bad:
                raise self.fail(
                    event, f"control character or lone surrogate U+{ord(bad.group()):04X} in a string is not allowed"
                )
            return value
        return _CONSTRUCT.yaml_constructors[tag](_CONSTRUCT, yaml.ScalarNode(tag, value))


def _tag_name(tag: str) -> str:
    return "!!" + tag[len(_T) :] if tag.startswith(_T) else tag


def _tag_refused(tag: str) -> str:
    allowed = ", ".join([*_SCALAR_TAGS.values(), "!!map", "!!seq"])
    return f"YAML tag {clip(_tag_name(tag), 60)} is not allowed in a recipe (allowed: {allowed})"
