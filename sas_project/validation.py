"""Input checks every app shares: definition names, JSON the database can store, and times."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Iterable
from typing import Any

from django.utils.dateparse import parse_datetime

from sas_project.errors import InvalidInput

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")

#: The deepest nesting of arrays and objects a stored JSON value may have (the API refuses a
#: deeper request body: sas_project.api.MAX_JSON_DEPTH).
MAX_JSON_DEPTH = 64

#: The largest UTC offset PostgreSQL stores in a timestamp with time zone (15:59; Python's own
#: limit is 23:59).
MAX_UTC_OFFSET = dt.timedelta(hours=15, minutes=59)


def valid_name(value: Any, what: str, field: str) -> str:
    """A definition's name: it appears in URLs and in other definitions."""
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise InvalidInput(f"{what} must be 1-100 letters, digits, '-' or '_'", field=field)
    return value


def object_of(value: Any, *, where: str, members: Iterable[str], field: str) -> dict[str, Any]:
    """`value` when it is an object whose members are all among `members`, else InvalidInput on
    `field` saying which (`where must be an object {a, b}`, `where has unknown members: c`)."""
    allowed = tuple(members)
    if not isinstance(value, dict):
        raise InvalidInput(f"{where} must be an object {{{', '.join(allowed)}}}", field=field)
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise InvalidInput(f"{where} has unknown members: {', '.join(unknown)}", field=field)
    return value


def is_count(value: Any, low: int, high: int) -> bool:
    """Whether `value` is an integer (not a bool) from `low` to `high`."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def unstorable(value: Any) -> str | None:
    """What keeps `value` (parsed JSON, or an expression's value) out of the database, with where
    it is as a JSONPath (`an unpaired surrogate at $.a.b`); None when it can be stored.

    PostgreSQL refuses a NUL character in text and jsonb (in a key too), an unpaired surrogate
    (no UTF-8 encodes it, and jsonb refuses its `\\ud800` escape), and a number that is not
    finite (NaN, infinities: JSON has no such number); anything nested deeper than
    MAX_JSON_DEPTH levels is refused as absurd. The walk is iterative: a value too deep for a
    recursive walk is still answered."""
    if _storable(value):
        return None
    # Walked again, naming where: only for a value that is refused.
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            problem = _text_problem(item)
            if problem:
                return f"{problem} at {_short(path)}"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"a number that is not finite ({item}) at {_short(path)}"
        elif isinstance(item, dict | list | tuple):
            if depth >= MAX_JSON_DEPTH:
                return f"nesting deeper than {MAX_JSON_DEPTH} levels at {_short(path)}"
            if isinstance(item, dict):
                for key, child in reversed(item.items()):
                    problem = _text_problem(key) if isinstance(key, str) else ""
                    if problem:
                        return f"{problem} in a key at {_short(path)}"
                    stack.append((child, _member(path, key), depth + 1))
            else:
                stack.extend(
                    (child, f"{path}[{i}]", depth + 1) for i, child in reversed(list(enumerate(item)))
                )
    return None


#: A JSON string in the encoder's output (it escapes every `"` and `\\` inside one).
_JSON_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
#: An innermost array or object, once the strings and scalars are gone.
_INNERMOST_RE = re.compile(r"\[\]|\{\}")
_BRACKETS_ONLY = {c: None for c in range(128) if chr(c) not in "[]{}"}


def _storable(value: Any) -> bool:
    """`unstorable`'s answer without the paths (every success's answer takes it): the C encoder
    first, which settles most values at C speed; the walk where it cannot say for sure."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, check_circular=False)
        text.encode("utf-8")  # an unpaired surrogate cannot be encoded
    except (ValueError, TypeError, RecursionError, UnicodeEncodeError):
        return _storable_walk(value)
    if "\\u0000" in text:
        return _storable_walk(value)  # a NUL, or a string that spells its escape: the walk says
    # The nesting: strip the strings, keep the brackets, and peel the innermost level off until
    # none is left (one pass per level; more than MAX_JSON_DEPTH passes is too deep).
    brackets = _JSON_STRING_RE.sub("", text).translate(_BRACKETS_ONLY)
    for _ in range(MAX_JSON_DEPTH + 1):
        if not brackets:
            return True
        brackets = _INNERMOST_RE.sub("", brackets)
    return _storable_walk(value)


def _storable_walk(value: Any) -> bool:
    """`_storable`'s answer by walking the value, for what the encoder cannot settle."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _text_problem(item):
                return False
        elif isinstance(item, float):
            if not math.isfinite(item):
                return False
        elif isinstance(item, dict):
            if depth >= MAX_JSON_DEPTH:
                return False
            for key, child in item.items():
                if isinstance(key, str) and _text_problem(key):
                    return False
                stack.append((child, depth + 1))
        elif isinstance(item, list | tuple):
            if depth >= MAX_JSON_DEPTH:
                return False
            stack.extend((child, depth + 1) for child in item)
    return True


def _short(path: str) -> str:
    return path if len(path) <= 120 else f"{path[:120]}..."


def _text_problem(text: str) -> str:
    if "\x00" in text:
        return "a NUL character"
    if text.isascii():
        return ""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "an unpaired surrogate"
    return ""


def _member(path: str, key: Any) -> str:
    name = str(key)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name):
        return f"{path}.{name}"
    return f"{path}[{name[:64].encode('unicode_escape').decode('ascii')!r}]"


def json_storable(value: Any, field: str) -> None:
    """Refuse JSON that the database cannot store or that nests absurdly deep (`unstorable`):
    InvalidInput naming `field` and what is wrong where."""
    problem = unstorable(value)
    if problem is not None:
        raise InvalidInput(f"{field} contains {problem}", field=field)


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def storable_text(text: str) -> str:
    """`text` with what PostgreSQL text cannot hold (NUL, unpaired surrogates) as U+FFFD."""
    if not _text_problem(text):
        return text
    return _SURROGATE_RE.sub("\ufffd", text.replace("\x00", "\ufffd"))


class Unreadable(ValueError):
    """A value that is not a time the service can store (see read_time)."""


def read_time(value: Any) -> dt.datetime:
    """The aware datetime (in UTC) an ISO 8601 text names; no offset means UTC. Strict where
    Django's parse_datetime is not: an impossible date or time (February 30th, month 13), an
    offset beyond +/-15:59 (PostgreSQL's limit), or a time outside the years Python and the
    database both hold raise Unreadable, never another error."""
    if not isinstance(value, str):
        raise Unreadable(f"{type(value).__name__} is not an ISO 8601 time")
    try:
        parsed = parse_datetime(value)
    except ValueError as exc:
        raise Unreadable(str(exc)) from None
    if parsed is None:
        raise Unreadable("not an ISO 8601 time")
    offset = parsed.utcoffset()
    if offset is not None and abs(offset) > MAX_UTC_OFFSET:
        raise Unreadable("its UTC offset is beyond +/-15:59")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    try:
        return parsed.astimezone(dt.UTC)
    except OverflowError:
        raise Unreadable("it is outside the years 1 to 9999") from None
