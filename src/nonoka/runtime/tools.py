"""Tools: plain functions the model may call, with schemas taken from their signatures.

``@tool`` reads the type hints for the JSON Schema and the docstring for descriptions
(the first paragraph describes the tool; a Google-style ``Args:`` section describes the
parameters). A first parameter annotated ``RunContext`` receives the run's context.

``idempotent=True`` marks a tool safe to run twice: after a crash its unfinished calls
are re-run. A non-idempotent call that had started is not silently re-run; its unknown
outcome is recorded instead. ``requires_approval=True`` makes the approval extension
pause the session until someone decides.

Internal: import its public names from ``nonoka``; this module's layout may change.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from nonoka.errors import ToolError
from nonoka.llm.base import ToolSpec

DepsT = TypeVar("DepsT")
ExecutedBy = Literal["nonoka", "host"]


@dataclass
class RunContext(Generic[DepsT]):
    """What a tool may know about the run that called it."""

    deps: DepsT
    session_id: str
    tool_call_id: str = ""


@dataclass
class Tool:
    """A callable tool (``executed_by="nonoka"``) or one the host runs (``"host"``)."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any] | None = None
    idempotent: bool = False
    requires_approval: bool = False
    executed_by: ExecutedBy = "nonoka"
    takes_context: bool = False
    args_model: type[BaseModel] | None = field(default=None, repr=False)

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)

    async def run(self, arguments: str, ctx: RunContext[Any]) -> str:
        """Run with the model's JSON arguments; the result rendered as text."""
        try:
            raw = json.loads(arguments or "{}")
        except ValueError as exc:
            raise ToolError(f"arguments for {self.name!r} are not valid JSON: {exc}") from exc
        return render_result(await self.invoke(raw, ctx))

    async def invoke(self, raw: Any, ctx: RunContext[Any]) -> Any:
        """Validate decoded arguments and call the function; returns what it returned."""
        if self.function is None:
            raise ToolError(f"tool {self.name!r} is run by the host, not by nonoka")
        if not isinstance(raw, dict):
            raise ToolError(f"arguments for {self.name!r} must be a JSON object")
        kwargs = raw
        if self.args_model is not None:
            try:
                parsed = self.args_model.model_validate(raw)
            except ValidationError as exc:
                raise ToolError(f"invalid arguments for {self.name!r}: {exc}") from exc
            kwargs = {name: getattr(parsed, name) for name in self.args_model.model_fields}
        args = (ctx,) if self.takes_context else ()
        if inspect.iscoroutinefunction(self.function):
            return await self.function(*args, **kwargs)
        return await asyncio.to_thread(self.function, *args, **kwargs)


def host_tool(name: str, description: str = "", parameters: dict[str, Any] | None = None) -> Tool:
    """A tool the host executes; nonoka pauses the session when the model calls it."""
    return Tool(name=name, description=description,
                parameters=parameters or {"type": "object", "properties": {}},
                executed_by="host")


def render_result(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    return json.dumps(result, default=str)


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\*{0,2}\w+)(?:\s*\([^)]*\))?:\s*(.*)$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    current: str | None = None
    in_args = False
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args = True
            continue
        if in_args:
            match = _ARG_LINE.match("    " + line if not line.startswith(" ") else line)
            if match and line.startswith(" ") and not line.startswith("        "):
                current = match.group(1)
                params[current] = match.group(2).strip()
            elif line.strip() and current and line.startswith("        "):
                params[current] += " " + line.strip()
            elif line.strip() and not line.startswith(" "):
                in_args = False
        if not in_args and not params and (line.strip() or summary):
            summary.append(line)
    text = "\n".join(summary).strip().split("\n\n")[0]
    return " ".join(text.split()), params


def _is_context(annotation: Any) -> bool:
    origin = getattr(annotation, "__origin__", annotation)
    return origin is RunContext


def make_tool(
    function: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    requires_approval: bool = False,
) -> Tool:
    """Build a ``Tool`` from a function's signature and docstring."""
    signature = inspect.signature(function)
    hints = get_type_hints(function)
    summary, param_docs = _parse_docstring(function.__doc__)
    fields: dict[str, Any] = {}
    takes_context = False
    for index, (pname, param) in enumerate(signature.parameters.items()):
        annotation = hints.get(pname, Any)
        if index == 0 and _is_context(annotation):
            takes_context = True
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolError(f"tool {function.__name__!r}: *args/**kwargs are not supported")
        default = ... if param.default is inspect.Parameter.empty else param.default
        from pydantic import Field

        fields[pname] = (annotation, Field(default, description=param_docs.get(pname)))
    model = create_model(
        f"{function.__name__}_args", __config__=ConfigDict(extra="forbid"), **fields
    )
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return Tool(
        name=name or function.__name__,
        description=description or summary or function.__name__,
        parameters=schema,
        function=function,
        idempotent=idempotent,
        requires_approval=requires_approval,
        takes_context=takes_context,
        args_model=model,
    )


F = TypeVar("F", bound=Callable[..., Any])


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    requires_approval: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    requires_approval: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a sync or async function into a ``Tool``; use bare or with options."""

    def wrap(fn: Callable[..., Any]) -> Tool:
        return make_tool(fn, name=name, description=description, idempotent=idempotent,
                         requires_approval=requires_approval)

    return wrap(function) if function is not None else wrap


AsyncToolFn = Callable[..., Awaitable[Any]]
