"""One job argument at a time: how each kind of value is coerced, and the sentence that refuses it.

Contract: each annotated type (``Integer``, ``Query``, ``FieldText``, ...) is a pydantic type whose before-validator
accepts what ReMe's transports really send (the CLI sends numbers as strings, ``limit=05``), returns the canonical
value, or raises a ``PydanticCustomError`` of type ``invalid_argument`` whose message is the answer's sentence.
Checks that need the configuration (an experience path or filename) come through the validation context. The job
models that combine these types, and the schema they advertise, are in ``arguments.py``.
"""

from __future__ import annotations

import secrets
import time
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, WithJsonSchema
from pydantic_core import PydanticCustomError
from reme.steps.file_io import validate_filename_component

from ..errors import ErrorCode
from ..schema import NAME_EXAMPLE

MAX_QUERY_CHARS = 4096
MAX_LIMIT = 50
MAX_PAGE = 500  # entries per page of a listing
MAX_CURSOR_CHARS = 4096
MAX_INT_DIGITS = 12
MAX_OPERATION_KEY_CHARS = 200
MAX_REQUEST_ID_CHARS = 128
MAX_TOOL_NAMES = 256  # function names a search may be given (``tools``)
MAX_TOOL_NAME_CHARS = 200
MAX_FILENAME_BYTES = 200  # leaves room under NAME_MAX (255) for "-N" and the atomic writer's ".<name>.<rand>.tmp"


def _refuse(message: str) -> PydanticCustomError:
    return PydanticCustomError(ErrorCode.INVALID_ARGUMENT, "{message}", {"message": message})


def _integer(value: Any, info: ValidationInfo) -> int:
    """Ints, integral floats and short digit strings (the CLI's ``limit=05``); never bools."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        digits = value.strip().removeprefix("-")
        if digits.isascii() and digits.isdigit() and len(digits) <= MAX_INT_DIGITS:
            value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise _refuse(f"`{info.field_name}` must be an integer.")
    return value


def _fraction(value: Any, info: ValidationInfo) -> float:
    """A number from 0 to 1: ints, floats and number text (the CLI keeps ``00.5`` as text); never bools."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise _refuse(f"`{info.field_name}` must be a number from 0 to 1.")
    return float(value)


def _tool_names(value: Any, info: ValidationInfo) -> tuple[str, ...]:
    """Function names: a list of strings, or one string of comma-separated names (the CLI's ``tools=a,b``); each
    stripped and non-empty, without whitespace inside; repeats dropped, order kept."""
    names = value.split(",") if isinstance(value, str) else value
    sentence = (
        f"`{info.field_name}` must be a list of function names (the CLI also takes `tools=name1,name2`), "
        f"each 1-{MAX_TOOL_NAME_CHARS} characters without spaces, at most {MAX_TOOL_NAMES}."
    )
    if not isinstance(names, (list, tuple)) or not names or len(names) > MAX_TOOL_NAMES:
        raise _refuse(sentence)
    out = []
    for name in names:
        if (
            not isinstance(name, str)
            or not name.strip()
            or len(name.strip()) > MAX_TOOL_NAME_CHARS
            or any(c.isspace() for c in name.strip())
        ):
            raise _refuse(sentence)
        out.append(name.strip())
    return tuple(dict.fromkeys(out))


def _query(value: Any, info: ValidationInfo) -> str:
    """Non-blank text, stripped; numbers (from the CLI) become text; at most MAX_QUERY_CHARS characters."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise _refuse(f"`{info.field_name}` must be a non-empty string.")
    value = value.strip()
    if len(value) > MAX_QUERY_CHARS:
        raise _refuse(f"`{info.field_name}` has {len(value)} characters; at most {MAX_QUERY_CHARS}.")
    return value


def _field_text(value: Any, info: ValidationInfo) -> str:
    """An experience field: non-blank text, kept as written."""
    if value is None:
        raise _refuse(f"`{info.field_name}` is required.")
    if not isinstance(value, str) or not value.strip():
        raise _refuse(f"`{info.field_name}` must be a non-empty string.")
    return value


def _operation_key(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_OPERATION_KEY_CHARS:
        raise _refuse(f"`operation_key` must be a non-empty string (max {MAX_OPERATION_KEY_CHARS}).")
    return value.strip()


def _expected_version(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _refuse("`expected_version` is required: take it from procedure_search or procedure_read.")
    return value.strip()


def _filename(value: Any, info: ValidationInfo) -> str:
    """A string; its canonical spelling is checked by the context's ``filename`` (it knows ``procedure_dir``)."""
    if not isinstance(value, str):
        raise _refuse(f"`filename` is required, e.g. {NAME_EXAMPLE}")
    check = (info.context or {}).get("filename")
    return check(value) if check is not None else value


def _experience_path(value: Any, info: ValidationInfo) -> Any:
    """Checked by the context's ``path`` (it knows ``procedure_dir``); without one, passed on as given."""
    check = (info.context or {}).get("path")
    return check(value) if check is not None else value


def _import_file(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _refuse("`file` is required: the path of the local trajectory.")
    return value


def _import_filename(value: Any) -> str:
    """The name the copy keeps: one file name component that fits the file system with a suffix."""
    if not isinstance(value, str) or not value:
        raise _refuse("`filename` is required, e.g. filename=run.jsonl.")
    problem = validate_filename_component(value, kind="filename")
    if problem:
        raise _refuse(problem)
    size = len(value.encode("utf-8"))
    if size > MAX_FILENAME_BYTES:
        raise _refuse(
            f"`filename` has {size} bytes in UTF-8; at most {MAX_FILENAME_BYTES} (file systems allow 255, and the "
            "copy may need a -2, -3, ... suffix and a temporary name). Give a shorter filename; nothing was reserved.",
        )
    return value


def _request_id(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or len(value) > MAX_REQUEST_ID_CHARS or not value.strip():
        raise _refuse(f"`request_id` must be a string of 1-{MAX_REQUEST_ID_CHARS} characters.")
    return value


def _cursor(value: Any) -> str:
    """Where a listing's page starts: the ``next`` of an earlier answer (a path, or a request id, which the CLI may
    send as a number); kept as given."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_CURSOR_CHARS:
        raise _refuse(
            f"`cursor` must be the `next` of an earlier answer (a string of 1-{MAX_CURSOR_CHARS} "
            "characters); leave it out for the first page."
        )
    return value


def new_request_id() -> str:
    """The request id of an import that was given none."""
    return f"req-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"


def _export_dest(value: Any) -> str:
    """An absolute path (no ``~``: nothing expands it here); checked against the workspace by the export itself."""
    example = "e.g. dest=/home/me/.claude/skills"
    if not isinstance(value, str) or not value.strip():
        raise _refuse(f"`dest` is required: the absolute path of the directory to export the skills into, {example}.")
    if "\x00" in value:
        raise _refuse("`dest` contains a NUL character; give a directory path.")
    if not value.startswith("/"):
        raise _refuse(f"`dest` must be an absolute path (got {value!r}), {example}; nothing was written.")
    return value


def _import_text(value: Any, info: ValidationInfo) -> str:
    """``memory_hint``: text; ``source_id``: text or a number (the CLI's ``source_id=42``)."""
    if not isinstance(value, (str, int) if info.field_name == "source_id" else str):
        raise _refuse("`memory_hint` and `source_id` must be strings.")
    return str(value)


_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0")


def _flag(value: Any, info: ValidationInfo) -> bool:
    """A boolean: true/false, and as the CLI sends them, ``true``/``false`` (also yes/no, 1/0) in any case."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise _refuse(f"`{info.field_name}` must be true or false.")


class Conflict:
    """Stands for ``when-to-use`` when it disagrees with ``when_to_use`` (refused in field order)."""


def _alias(value: Any) -> None:
    raise _refuse("`when_to_use` and its alias `when-to-use` have different texts; give only `when_to_use`.")


Integer = Annotated[int, BeforeValidator(_integer)]
Fraction = Annotated[float, BeforeValidator(_fraction), WithJsonSchema({"type": "number", "minimum": 0, "maximum": 1})]
ToolNames = Annotated[
    tuple[str, ...], BeforeValidator(_tool_names), WithJsonSchema({"type": "array", "items": {"type": "string"}})
]
Flag = Annotated[bool, BeforeValidator(_flag)]
Query = Annotated[str, BeforeValidator(_query)]
FieldText = Annotated[str, BeforeValidator(_field_text)]
# without a key an identical retry is still recognised (a key derived from the call)
OPERATION_KEY_DESCRIPTION = "Optional; if given, a new one for every write."
OperationKey = Annotated[str, BeforeValidator(_operation_key), Field(description=OPERATION_KEY_DESCRIPTION)]
ExpectedVersion = Annotated[str, BeforeValidator(_expected_version)]
Filename = Annotated[str, BeforeValidator(_filename)]
# Any value reaches the path check (which answers for non-strings too); advertised as a string.
RawPath = Annotated[Any, BeforeValidator(_experience_path), WithJsonSchema({"type": "string"})]
AliasConflict = Annotated[Any, BeforeValidator(_alias), WithJsonSchema({"type": "string"})]
ImportFile = Annotated[str, BeforeValidator(_import_file)]
ImportFilename = Annotated[str, BeforeValidator(_import_filename)]
RequestId = Annotated[str, BeforeValidator(_request_id)]
Cursor = Annotated[str, BeforeValidator(_cursor)]
ImportText = Annotated[str, BeforeValidator(_import_text)]
ExportDest = Annotated[str, BeforeValidator(_export_dest)]
