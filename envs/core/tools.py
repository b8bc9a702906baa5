"""Tool calls: the actions of every environment.

An action is a tool name plus JSON arguments. Each tool's arguments are a
pydantic model; its JSON schema is what an LLM agent is given, and the same
model validates what comes back. A malformed call is never an exception: it
becomes an observation saying what was wrong.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..sandbox import Sandbox

__all__ = [
    "ToolCall",
    "ToolSpec",
    "ToolOutput",
    "ActionError",
    "BashArgs",
    "ViewArgs",
    "EditArgs",
    "SubmitArgs",
    "GENERIC_TOOLS",
    "parse_action",
    "run_generic_tool",
]

MAX_VIEW_BYTES = 200_000


class ActionError(ValueError):
    """The action could not be understood; the message goes back to the agent."""


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class ToolSpec(BaseModel):
    name: str
    description: str
    args: type[BaseModel]

    def schema_for_llm(self) -> dict[str, Any]:
        """The OpenAI function-calling form of this tool."""
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        return {"type": "function", "function": {"name": self.name, "description": self.description, "parameters": schema}}


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BashArgs(_Args):
    command: str = Field(min_length=1, description="Shell command, run with bash -c in the working directory.")
    timeout: float | None = Field(default=None, gt=0, description="Seconds before it is killed (capped by the env).")


class ViewArgs(_Args):
    path: str = Field(min_length=1, description="File or directory, absolute or relative to the working directory.")
    start_line: int | None = Field(default=None, ge=1, description="First line to show (1-based).")
    end_line: int | None = Field(default=None, ge=-1, description="Last line to show; -1 for the end.")


class EditArgs(_Args):
    command: Literal["str_replace", "create", "insert"] = Field(
        description="str_replace: replace old_str (must occur exactly once) by new_str; "
        "create: write a new file with file_text; insert: insert new_str after line insert_line (0 = top)."
    )
    path: str = Field(min_length=1, description="File, absolute or relative to the working directory.")
    old_str: str | None = Field(default=None, description="Exact text to replace (str_replace).")
    new_str: str | None = Field(default=None, description="Replacement or inserted text (str_replace, insert).")
    file_text: str | None = Field(default=None, description="Content of the new file (create).")
    insert_line: int | None = Field(default=None, ge=0, description="Line after which to insert (insert).")

    @model_validator(mode="after")
    def _needs(self) -> EditArgs:
        required = {"str_replace": ("old_str", "new_str"), "create": ("file_text",), "insert": ("insert_line", "new_str")}
        missing = [f for f in required[self.command] if getattr(self, f) is None]
        if missing:
            raise ValueError(f"command {self.command!r} needs {', '.join(missing)}")
        if self.command == "str_replace" and self.old_str == "":
            raise ValueError("old_str must not be empty")
        return self


class SubmitArgs(_Args):
    message: str | None = Field(default=None, description="Optional note about the solution.")


GENERIC_TOOLS = [
    ToolSpec(name="bash", description="Run a shell command and see its output and exit code.", args=BashArgs),
    ToolSpec(name="view", description="Show a file with line numbers (optionally a range), or list a directory.", args=ViewArgs),
    ToolSpec(name="edit", description="Edit files: exact string replacement, create a file, or insert lines.", args=EditArgs),
    ToolSpec(name="submit", description="Finish the episode; your changes are graded.", args=SubmitArgs),
]


class ToolOutput(BaseModel):
    """What a tool did: the text the agent sees plus structured facts for ``info``."""

    text: str
    error: bool = False
    data: dict[str, Any] = Field(default_factory=dict)


def parse_action(action: Any, tools: dict[str, ToolSpec]) -> tuple[ToolCall, BaseModel]:
    """A ToolCall (or dict, or JSON string of one) validated against its tool; raises ActionError."""
    if isinstance(action, (str, bytes)):
        try:
            action = json.loads(action)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ActionError(f"the action is not valid JSON ({exc}); send {{\"name\": TOOL, \"arguments\": {{...}}}}") from exc
    if isinstance(action, dict):
        arguments = action.get("arguments", {})
        if isinstance(arguments, str):  # OpenAI sends arguments as a JSON string
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                raise ActionError(f"the arguments are not valid JSON: {exc}") from exc
        try:
            action = ToolCall.model_validate({**action, "arguments": arguments})
        except ValidationError as exc:
            raise ActionError(f"malformed tool call: {_first_error(exc)}") from exc
    if not isinstance(action, ToolCall):
        raise ActionError(f"an action must be a tool call, got {type(action).__name__}")
    spec = tools.get(action.name)
    if spec is None:
        raise ActionError(f"unknown tool {action.name!r}; available: {', '.join(tools)}")
    try:
        args = spec.args.model_validate(action.arguments)
    except ValidationError as exc:
        raise ActionError(f"invalid arguments for {action.name}: {_first_error(exc)}") from exc
    return action, args


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}" if loc else err["msg"]


def _resolve(path: str, workdir: str) -> str:
    return posixpath.normpath(posixpath.join(workdir, path))


def _numbered(text: str, start: int) -> str:
    return "\n".join(f"{i:6}\t{line}" for i, line in enumerate(text.split("\n"), start))


async def run_generic_tool(
    name: str, args: BaseModel, sandbox: Sandbox, *, workdir: str, command_timeout: float
) -> ToolOutput:
    if name == "bash":
        return await _bash(args, sandbox, workdir, command_timeout)
    if name == "view":
        return await _view(args, sandbox, workdir)
    if name == "edit":
        return await _edit(args, sandbox, workdir)
    raise ActionError(f"no implementation for tool {name!r}")


async def _bash(args: BashArgs, sandbox: Sandbox, workdir: str, cap: float) -> ToolOutput:
    timeout = min(args.timeout or cap, cap)
    result = await sandbox.exec(args.command, timeout=timeout, cwd=workdir)
    tail = f"[timed out after {timeout:g}s]" if result.timed_out else f"[exit code {result.exit_code}]"
    data = result.model_dump(exclude={"output"})
    return ToolOutput(text=f"{result.output}{'' if result.output.endswith(chr(10)) or not result.output else chr(10)}{tail}", data=data)


async def _view(args: ViewArgs, sandbox: Sandbox, workdir: str) -> ToolOutput:
    path = _resolve(args.path, workdir)
    kind = await sandbox.exec(f"if [ -d {_q(path)} ]; then echo dir; elif [ -f {_q(path)} ]; then echo file; else echo none; fi")
    what = kind.output.strip()
    if what == "none":
        return ToolOutput(text=f"{path}: no such file or directory", error=True)
    if what == "dir":
        listing = await sandbox.exec(
            f"find {_q(path)} -maxdepth 2 -not -path '*/.git' -not -path '*/.git/*' -not -name '__pycache__' | sort | head -500"
        )
        return ToolOutput(text=listing.output.rstrip("\n"))
    data = await sandbox.read_file(path)
    if len(data) > MAX_VIEW_BYTES and args.start_line is None:
        return ToolOutput(text=f"{path} is {len(data)} bytes; view a range with start_line/end_line", error=True)
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    start = args.start_line or 1
    end = len(lines) if args.end_line in (None, -1) else args.end_line
    if start > len(lines) or end < start:
        return ToolOutput(text=f"{path} has {len(lines)} lines; range {start}-{end} is empty", error=True)
    return ToolOutput(text=_numbered("\n".join(lines[start - 1 : end]), start))


async def _edit(args: EditArgs, sandbox: Sandbox, workdir: str) -> ToolOutput:
    path = _resolve(args.path, workdir)
    if args.command == "create":
        exists = await sandbox.exec(f"test -e {_q(path)}")
        if exists.exit_code == 0:
            return ToolOutput(text=f"{path} already exists; use str_replace or insert to change it", error=True)
        await sandbox.write_file(path, args.file_text or "")
        return ToolOutput(text=f"created {path} ({len((args.file_text or '').splitlines())} lines)")
    try:
        text = (await sandbox.read_file(path)).decode("utf-8")
    except FileNotFoundError:
        return ToolOutput(text=f"{path}: no such file (use command 'create' for new files)", error=True)
    except (UnicodeDecodeError, OSError) as exc:
        return ToolOutput(text=f"{path}: cannot edit: {exc}", error=True)
    if args.command == "str_replace":
        count = text.count(args.old_str or "")
        if count != 1:
            where = "not found" if count == 0 else f"found {count} times; add context to make it unique"
            return ToolOutput(text=f"old_str {where} in {path}; nothing changed", error=True)
        before = text[: text.index(args.old_str)]
        text = text.replace(args.old_str, args.new_str or "", 1)
        first = before.count("\n") + 1
    else:
        lines = text.split("\n")
        if args.insert_line > len(lines):
            return ToolOutput(text=f"{path} has {len(lines)} lines; cannot insert after line {args.insert_line}", error=True)
        new = (args.new_str or "").split("\n")
        lines[args.insert_line : args.insert_line] = new
        text = "\n".join(lines)
        first = args.insert_line + 1
    await sandbox.write_file(path, text)
    shown = text.split("\n")
    lo, hi = max(first - 3, 1), min(first + (args.new_str or "").count("\n") + 3, len(shown))
    return ToolOutput(text=f"edited {path}; lines {lo}-{hi} now read:\n" + _numbered("\n".join(shown[lo - 1 : hi]), lo))


def _q(path: str) -> str:
    return "'" + path.replace("'", "'\\''") + "'"
