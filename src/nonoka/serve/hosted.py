"""Tools other than function tools, on ``POST /v1/responses``: whose they are to run.

A hosted tool (``web_search``, ``file_search``, ``code_interpreter``,
``image_generation``, ``mcp``, a server-executed ``tool_search``) is the upstream's to
run: it is passed as given to an ``openai-responses:`` model, and the items it makes
come back in the answer, which the adapter keeps whole (``nonoka.llm.responses``). A
``custom`` (freeform) tool and the function tools of a ``namespace`` are the client's,
like function tools: the turn pauses on their calls and the client sends their outputs
back. The Responses API upstream is given them as they are (``Wired``); a model that
takes function tools only (Chat Completions, Anthropic) is given each custom tool as a
function of one string ``input`` and a namespace's tools by their own names
(``host_tools``; its calls are turned back: ``nonoka.serve.as_functions``). A hosted
tool cannot run there: such a model answers it with a clear 400 (``refusal``). The
tools of an ``additional_tools`` input item (``nonoka.serve.additional``) are offered
the same way, but reach the Responses API upstream inside that item (``Wired.of``).
OpenAI's built-in client tools ``local_shell``, ``shell`` and ``apply_patch`` are the
client's too: their calls come as the API's own items (``shell_call``...), kept whole
and returned as they are, and the client's output items go back to the upstream in
their form (``nonoka.llm.responses_builtin``). Only an ``openai-responses:`` model is
given them: such a tool is its type alone, with no description or parameters, and the
calls' shapes are the ones OpenAI's models are trained on; there is nothing faithful to
offer another model, which answers them with a clear 400 (``refusal``).
``computer_use_preview``, ``computer`` and a client-executed ``tool_search`` are not
available yet.

``Wired`` is how the turn's model offers them: each tool in the shape the Responses API
takes (``ToolSpec.wire``), in place of the function specs the turn's host tools give.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nonoka.llm.base import ToolSpec
from nonoka.llm.responses import CUSTOM_CALL, OPENAI_RESPONSES
from nonoka.llm.responses_builtin import BUILTIN_TOOLS, builtin_kind
from nonoka.runtime.tools import Tool, host_tool
from nonoka.serve.errors import ApiError, invalid, not_available
from nonoka.state.entries import MemoryEntry

HOSTED = frozenset({"web_search", "web_search_2025_08_26", "web_search_preview",
                    "web_search_preview_2025_03_11", "file_search", "code_interpreter",
                    "image_generation", "mcp", "tool_search"})
"""The tool kinds the upstream runs itself."""
CLIENT = frozenset({"custom", "namespace"})
"""The tool kinds besides ``function`` the client runs, which any model can be given."""
LATER = frozenset({"computer_use_preview", "computer"})
HOSTED_ITEMS = frozenset({
    "web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call",
    "mcp_call", "mcp_list_tools", "mcp_approval_request", "tool_search_call",
    "tool_search_output"})
"""The items hosted tools make, carried whole in an answer (and a client's resent
history) as the upstream gave them."""
CUSTOM_OUTPUT = "custom_tool_call_output"
def freeform() -> dict[str, Any]:
    """What a custom tool's host tool takes: its freeform text, as ``input`` (a model that
    takes function tools only calls it so). A new object each time: a tool's parameters
    are its own."""
    return {"type": "object", "properties": {"input": {"type": "string"}},
            "required": ["input"]}


def checked(tool: dict[str, Any], param: str) -> dict[str, Any]:
    """A tool that is not a function tool, as given (its kind checked, and the names the
    client's calls are matched by), or an ``ApiError`` saying what is wrong."""
    kind = tool.get("type")
    if kind == "tool_search" and tool.get("execution") == "client":
        raise not_available("a client-executed 'tool_search' tool (the server-executed "
                            "one, execution \"server\", is)", f"{param}.execution")
    if kind in HOSTED:
        if kind == "mcp" and not isinstance(tool.get("server_label"), str):
            raise invalid("an mcp tool needs a server_label", f"{param}.server_label")
        return dict(tool)
    if kind == "custom":
        _name(tool, param)
        return dict(tool)
    if kind in BUILTIN_TOOLS:
        return dict(tool)
    if kind == "namespace":
        _name(tool, param)
        members = tool.get("tools")
        if not isinstance(members, list) or not members:
            raise invalid("a namespace tool needs a non-empty list of tools", f"{param}.tools")
        for n, member in enumerate(members):
            inner = f"{param}.tools[{n}]"
            if not isinstance(member, dict) or member.get("type") not in ("function", "custom"):
                raise invalid("a namespace holds function and custom tools only",
                              f"{inner}.type")
            _name(member, inner)
        return dict(tool)
    if kind in LATER:
        raise not_available(f"{kind!r} tools (offer the action as a function or custom "
                            "tool instead)", f"{param}.type")
    raise invalid(f"Invalid value: {kind!r}. tools[].type must be function, custom, "
                  "namespace, local_shell, shell, apply_patch, web_search, "
                  "web_search_preview, file_search, code_interpreter, image_generation, "
                  "mcp or tool_search", f"{param}.type")


def _name(tool: dict[str, Any], param: str) -> str:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise invalid(f"a {tool.get('type')} tool needs a name", f"{param}.name")
    return name


def client_names(tool: dict[str, Any]) -> list[str]:
    """The names the model calls ``tool`` by, when the client runs it."""
    kind = tool.get("type")
    if kind in ("function", "custom"):
        return [str(tool["name"])]
    if kind == "namespace":
        return [str(member["name"]) for member in tool["tools"]]
    if kind in BUILTIN_TOOLS:
        return [str(kind)]  # its calls are named after it (``builtin_call``)
    return []


def host_tools(tools: Sequence[dict[str, Any]]) -> list[Tool]:
    """The tools the turn pauses on: function tools, custom tools and the members of
    namespaces, each by the name the model calls it."""
    found: list[Tool] = []
    for tool in tools:
        if tool.get("type") in BUILTIN_TOOLS:
            found.append(host_tool(str(tool["type"]), f"OpenAI's built-in {tool['type']} "
                                   "tool", {"type": "object"}))
            continue
        members = tool["tools"] if tool.get("type") == "namespace" else [tool]
        within = _within(tool)
        for member in members:
            kind = member.get("type")
            if kind == "function":
                found.append(host_tool(member["name"],
                                       _joined(member.get("description"), within),
                                       member.get("parameters")))
            elif kind == "custom":
                found.append(host_tool(member["name"],
                                       _joined(freeform_description(member), within),
                                       freeform()))
    return found


def _within(tool: dict[str, Any]) -> str:
    """What a namespace's tools say of it, as function tools (a model that takes function
    tools only sees them by their own names)."""
    if tool.get("type") != "namespace":
        return ""
    about = str(tool.get("description") or "").strip()
    return f"(One of the {tool['name']} tools" + (f": {about})" if about else ".)")


def _joined(*texts: Any) -> str:
    return "\n\n".join(str(t).strip() for t in texts if t and str(t).strip())


def freeform_description(tool: dict[str, Any]) -> str:
    """A custom tool's description as a function tool's: its own, then how its text is
    passed (``input``) and, when the tool has a grammar, the grammar, so a model that
    never saw the freeform form still writes what the client can read."""
    own = str(tool.get("description") or "").strip()
    how = ("Call this tool with one argument, `input`: the tool's input as plain text "
           "(not JSON).")
    form = tool.get("format")
    if isinstance(form, dict) and form.get("type") == "grammar" and \
            isinstance(form.get("definition"), str):
        syntax = form.get("syntax") if isinstance(form.get("syntax"), str) else "lark"
        how += (f" The text must match this grammar ({syntax} syntax):\n"
                f"{form['definition']}")
    return f"{own}\n\n{how}" if own else how


def foreign(tools: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The first tool only the Responses API upstream can run (a hosted one), if any."""
    return next((t for t in tools if t.get("type") not in CLIENT
                 and t.get("type") != "function"), None)


def refusal(tools: Sequence[dict[str, Any]], spec: str, responses_api: bool,
            among: str = "tools") -> ApiError | None:
    """The 400 for tools the model ``spec`` cannot be given (``responses_api``: whether
    it is an ``openai-responses:`` model), or ``None``; ``among``: the request's
    ``tools``, or an ``additional_tools`` item's (``"additional tools"``)."""
    tool = foreign(tools)
    if tool is None or responses_api:
        return None
    at = list(tools).index(tool)
    kind = tool.get("type")
    named = f" {tool['name']!r}" if isinstance(tool.get("name"), str) else ""
    given = among == "tools"
    of = "" if given else " of an additional_tools item"
    if kind in BUILTIN_TOOLS:
        why = (f"the built-in {kind} tool{of} is one only OpenAI's models are given "
               f"(through the Responses API), and model {spec!r} is not an "
               "openai-responses:<model> one: use such a model")
    else:
        why = (f"the {kind}{named} tool{of} runs on the OpenAI Responses API upstream, and "
               f"model {spec!r} is not one: run it with an openai-responses:<model> model")
    return ApiError(400, f"{why}, or offer the action as a function or custom tool",
                    param=f"tools[{at}].type" if given else "input",
                    code="unsupported_feature")


def offered(tools: Sequence[dict[str, Any]], carried: Sequence[dict[str, Any]]
            ) -> list[dict[str, Any]]:
    """The ``carried`` tools (an ``additional_tools`` item's) the request's ``tools``
    do not already offer by the same names: the request's own come first."""
    taken = {name for tool in tools for name in client_names(tool)}
    kinds = {str(t.get("type")) for t in tools if t.get("type") in HOSTED}
    return [t for t in carried if not (set(client_names(t)) & taken)
            and not (t.get("type") in HOSTED and t.get("type") in kinds)]


@dataclass(frozen=True)
class Wired:
    """The request's tools in the Responses API's shapes, for the turn's model."""

    tools: tuple[dict[str, Any], ...] = ()
    replaced: frozenset[str] = field(default_factory=frozenset)
    """The host tools' names the wired tools stand for (custom tools, namespaces'
    members), whose function specs are not sent."""

    @classmethod
    def of(cls, tools: Sequence[dict[str, Any]], carried: Sequence[dict[str, Any]] = ()
           ) -> Wired:
        """``carried``: the tools of ``additional_tools`` items, which reach the upstream
        in those items (none of their specs is sent in ``tools``)."""
        wired = tuple(t for t in tools if t.get("type") != "function")
        replaced = frozenset(name for t in (*wired, *carried) for name in client_names(t))
        return cls(wired, replaced)

    def specs(self, specs: Sequence[ToolSpec]) -> list[ToolSpec]:
        """``specs`` with the wired tools in place of the ones they stand for."""
        if not self.tools and not self.replaced:
            return list(specs)
        kept = [s for s in specs if s.name not in self.replaced]
        return [*kept, *(ToolSpec(str(t.get("name") or t["type"]), "", {}, wire=t)
                         for t in self.tools)]


def client_calls(entries: Sequence[MemoryEntry]) -> dict[str, str]:
    """The custom and built-in tools' calls among ``entries``' answers: each call's id,
    and its item type (``custom_tool_call``, ``shell_call``...), which its output's
    item follows."""
    found: dict[str, str] = {}
    for entry in entries:
        if entry.role != "assistant":
            continue
        for call in entry.tool_calls:
            kind = CUSTOM_CALL if custom_call(call.provider_metadata) else \
                builtin_kind(call.provider_metadata)
            if kind is not None:
                found[call.id] = kind
    return found


def custom_call(call_metadata: Any) -> bool:
    """Whether a call's ``provider_metadata`` marks it a custom tool's call."""
    own = call_metadata.get(OPENAI_RESPONSES) if isinstance(call_metadata, dict) else None
    return isinstance(own, dict) and own.get("type") == CUSTOM_CALL
