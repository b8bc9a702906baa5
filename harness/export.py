"""Export a run's episodes as training/analysis data: JSONL or Parquet, one row per episode.

Every episode is exported, interrupted ones too; filter on ``status`` (and
``resolved``) downstream. Columns, in order:

==============  =========================  ==========================================================
column          type (Parquet)             meaning
==============  =========================  ==========================================================
run_id          string                     the run
episode_id      string                     ``AGENT__TASK__eEPOCH``
agent           string                     agent name
task_id         string                     task
family          string                     task family (e.g. ``swe``)
epoch           int64                      epoch number
reward          float64                    final reward
resolved        bool                       the grader's verdict
status          string                     completed | error | interrupted
termination     string (nullable)          submit, max_steps, ..., agent_error, infra_error, interrupted
num_steps       int64                      steps taken
tokens_in       int64                      prompt tokens, all steps
tokens_out      int64                      completion tokens, all steps
cost_usd        float64                    cost of the episode
wall_s          float64                    wall-clock seconds
schema_version  int64                      trajectory schema version
error           string (nullable)          what went wrong, if anything
messages        list<struct>               the conversation in OpenAI chat format (below)
tools           string (JSON)              the tool schemas given to the agent, OpenAI function form
==============  =========================  ==========================================================

``messages``: first ``{"role": "user", "content": INSTRUCTIONS}``; then per
step either

* a well-formed tool call (a ToolCall, a ``{"name", "arguments", "id"?}``
  dict, or a JSON string of one): ``{"role": "assistant", "content": TEXT or
  None, "tool_calls": [{"id", "type": "function", "function": {"name",
  "arguments": JSON STRING}}]}`` followed by ``{"role": "tool",
  "tool_call_id": ID, "content": OBSERVATION}``; a missing or repeated id is
  replaced by ``call_<step>`` so every id is unique in the conversation;
* anything else (a format error): ``{"role": "assistant", "content": RAW
  ACTION TEXT}`` followed by ``{"role": "user", "content": OBSERVATION}``.

In JSONL ``messages`` and ``tools`` are real JSON lists and a message carries
only its own keys. In Parquet ``messages`` is a list of structs with the
fields ``role, content, tool_calls, tool_call_id`` (absent ones null), which
``pyarrow.parquet.read_table`` and ``datasets.load_dataset("parquet", ...)``
both read as nested lists and dicts; ``tools`` is a JSON string because tool
parameter schemas differ in shape from tool to tool.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Literal

from .trajectory import StepRecord, Trajectory, load_trajectories, write_atomic

__all__ = ["export_run", "episode_row", "episode_messages", "parquet_schema", "Format"]

Format = Literal["jsonl", "parquet"]

_SCALARS: list[tuple[str, str]] = [
    ("run_id", "string"),
    ("episode_id", "string"),
    ("agent", "string"),
    ("task_id", "string"),
    ("family", "string"),
    ("epoch", "int64"),
    ("reward", "float64"),
    ("resolved", "bool_"),
    ("status", "string"),
    ("termination", "string"),
    ("num_steps", "int64"),
    ("tokens_in", "int64"),
    ("tokens_out", "int64"),
    ("cost_usd", "float64"),
    ("wall_s", "float64"),
    ("schema_version", "int64"),
    ("error", "string"),
]


def parquet_schema() -> Any:
    """The explicit pyarrow schema of the Parquet export (pyarrow is imported only when called)."""
    import pyarrow as pa

    tool_call = pa.struct(
        [
            pa.field("id", pa.string()),
            pa.field("type", pa.string()),
            pa.field("function", pa.struct([pa.field("name", pa.string()), pa.field("arguments", pa.string())])),
        ]
    )
    message = pa.struct(
        [
            pa.field("role", pa.string()),
            pa.field("content", pa.string()),
            pa.field("tool_calls", pa.list_(tool_call)),
            pa.field("tool_call_id", pa.string()),
        ]
    )
    fields = [pa.field(name, getattr(pa, kind)()) for name, kind in _SCALARS]
    fields += [pa.field("messages", pa.list_(message)), pa.field("tools", pa.string())]
    return pa.schema(fields)


def _as_tool_call(action: Any) -> tuple[str, str, str | None] | None:
    """(name, arguments as a JSON string, id) when ``action`` is a well-formed tool call, else None."""
    if hasattr(action, "model_dump"):
        action = action.model_dump()
    if isinstance(action, (str, bytes)):
        try:
            action = json.loads(action)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
    if not isinstance(action, dict):
        return None
    name, arguments, call_id = action.get("name"), action.get("arguments", {}), action.get("id")
    if not isinstance(name, str) or not name or set(action) - {"name", "arguments", "id"}:
        return None
    if arguments is None:
        arguments = {}
    if isinstance(arguments, dict):
        arguments = json.dumps(arguments, ensure_ascii=False)
    if not isinstance(arguments, str):
        return None
    return name, arguments, call_id if isinstance(call_id, str) and call_id else None


def _raw_text(step: StepRecord) -> str:
    action = step.action
    if isinstance(action, bytes):
        action = action.decode("utf-8", errors="replace")
    if isinstance(action, str):
        text = action
    elif action is None:
        text = ""
    else:
        text = json.dumps(action, ensure_ascii=False, default=str)
    return text or (step.content or "")


def episode_messages(t: Trajectory) -> list[dict[str, Any]]:
    """The episode as an OpenAI chat conversation (see the module docstring)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": t.instructions}]
    seen: set[str] = set()
    for step in t.steps:
        call = _as_tool_call(step.action)
        if call is None:
            messages.append({"role": "assistant", "content": _raw_text(step)})
            messages.append({"role": "user", "content": step.observation})
            continue
        name, arguments, call_id = call
        if call_id is None or call_id in seen:
            call_id = f"call_{step.index}"
            while call_id in seen:
                call_id += "_"
        seen.add(call_id)
        messages.append(
            {
                "role": "assistant",
                "content": step.content,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": step.observation})
    return messages


def episode_row(t: Trajectory) -> dict[str, Any]:
    """One export row (JSONL form: ``messages`` and ``tools`` as lists)."""
    return {
        "run_id": t.run_id,
        "episode_id": t.episode_id,
        "agent": t.agent,
        "task_id": t.task_id,
        "family": t.family,
        "epoch": t.epoch,
        "reward": float(t.reward),
        "resolved": bool(t.resolved),
        "status": t.status,
        "termination": t.termination,
        "num_steps": t.num_steps,
        "tokens_in": t.tokens_in,
        "tokens_out": t.tokens_out,
        "cost_usd": float(t.cost_usd),
        "wall_s": float(t.wall_s),
        "schema_version": t.schema_version,
        "error": t.error,
        "messages": episode_messages(t),
        "tools": t.tools,
    }


def _parquet_bytes(rows: list[dict[str, Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet_schema()
    fixed = []
    for row in rows:
        messages = [
            {
                "role": m["role"],
                "content": m.get("content"),
                "tool_calls": m.get("tool_calls"),
                "tool_call_id": m.get("tool_call_id"),
            }
            for m in row["messages"]
        ]
        fixed.append({**row, "messages": messages, "tools": json.dumps(row["tools"], ensure_ascii=False)})
    table = pa.Table.from_pylist(fixed, schema=schema)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def export_run(run_dir: Path | str, fmt: Format, out_path: Path | str) -> int:
    """Write every episode of the run at ``run_dir`` to ``out_path`` as ``fmt``; return the number of rows."""
    if fmt not in ("jsonl", "parquet"):
        raise ValueError(f"unknown export format {fmt!r} (known: jsonl, parquet)")
    rows = [episode_row(t) for t in load_trajectories(run_dir)]
    out_path = Path(out_path)
    if fmt == "jsonl":
        data: bytes = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    else:
        data = _parquet_bytes(rows)
    write_atomic(out_path, data)
    return len(rows)
