"""An agent backed by any OpenAI-compatible chat-completions endpoint, with tool calling.

One ``act`` is one model reply (plus any retries). Errors::

    _Retryable (private)   HTTP 429/408/5xx, timeouts, transport errors (refused or
                           truncated connections), a 200 whose body is not JSON or
                           has no ``choices``: retried with backoff
    AgentError             any other 4xx, an unusable base_url, retries exhausted:
                           ends the episode

A reply the env cannot run (text only, arguments that are not JSON, a call
without a name) is not an error: it comes back as an AgentAction with
``format_error`` set, and the env's error observation goes back to the model.

The API key is sent in the Authorization header only; every message the agent
builds (logs, events, exceptions, ``config()``) has it replaced by ``***``.
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import random
import time
import uuid
from typing import Any

import anyio
import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from .base import AgentAction, AgentError, EpisodeStart, Usage

__all__ = ["LLMConfig", "LLMAgent", "estimate_tokens", "CHARS_PER_TOKEN"]

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4
RETRY_AFTER_CAP_S = 60.0

DEFAULT_SYSTEM_PROMPT = (
    "You are an autonomous software engineer working in a sandboxed Linux environment. "
    "You act only through the tools you are given: call exactly one tool in every reply. "
    "Explore the code, make the changes the task asks for, and check them (for example by running the tests). "
    "A reply without a tool call does nothing. When the task is done, call the `submit` tool."
)


def estimate_tokens(text: str) -> int:
    """A cheap token estimate: one token per ``CHARS_PER_TOKEN`` characters (about right for English and code)."""
    return len(text) // CHARS_PER_TOKEN


def _env_key() -> SecretStr | None:
    key = os.environ.get("OPENAI_API_KEY")
    return SecretStr(key) if key else None


class LLMConfig(BaseModel):
    """Settings of an LLMAgent; every field is optional."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    model: str = Field(default_factory=lambda: os.environ.get("SANDGYM_MODEL") or "gpt-4o-mini")
    """Model name sent with each request (default: $SANDGYM_MODEL, else gpt-4o-mini)."""
    base_url: str = Field(default_factory=lambda: os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1")
    """Endpoint root; requests go to {base_url}/chat/completions (default: $OPENAI_BASE_URL, else OpenAI)."""
    api_key: SecretStr | None = Field(default_factory=_env_key)
    """Bearer token (default: $OPENAI_API_KEY); None sends no Authorization header (local servers)."""
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    """Sampling temperature."""
    max_tokens: int = Field(default=4096, gt=0)
    """Most tokens the model may write in one reply."""
    request_timeout: float = Field(default=120.0, gt=0)
    """Seconds one HTTP request may take in all (connect, send, wait, read) before it is retried."""
    max_retries: int = Field(default=6, ge=0)
    """Retries of one step's request after a retryable failure; then the agent gives up (AgentError)."""
    backoff_base: float = Field(default=1.0, ge=0)
    """Seconds before the first retry; doubles with each retry, with jitter (the wait is 50-100% of it)."""
    backoff_max: float = Field(default=30.0, ge=0)
    """Longest backoff in seconds. A Retry-After header is honoured up to max(backoff_max, 60 s)."""
    context_budget_tokens: int = Field(default=100_000, gt=0)
    """Estimated tokens (characters / 4) a request body may hold; older turns are dropped to stay under it."""
    price_in_per_mtok: float = Field(default=0.0, ge=0)
    """USD per million prompt tokens."""
    price_out_per_mtok: float = Field(default=0.0, ge=0)
    """USD per million completion tokens."""
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    """The system message that opens every episode."""


class _Retryable(Exception):
    """A failure worth retrying: the status (None for transport errors), why, and the server's Retry-After."""

    def __init__(self, status: int | None, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.status, self.reason, self.retry_after = status, reason, retry_after


class LLMAgent:
    """Tool calling through an OpenAI-compatible endpoint. ``LLMAgent(model=..., base_url=..., ...)``.

    A positional argument is the model (``make_agent("llm:gpt-4o")``). Call ``aclose()`` (or use
    ``async with``) when done, to close the HTTP client.
    """

    name = "llm"

    def __init__(self, model: str | None = None, /, **options: Any) -> None:
        if model:
            options.setdefault("model", model)
        self.cfg = LLMConfig(**options)
        self._client: httpx.AsyncClient | None = None
        self._messages: list[dict[str, Any]] = []
        self._tools: list[dict] = []
        self._instructions = ""
        self._fresh = False  # between reset() and the first act(): the observation is the instructions
        self._answer_to: str | None = None  # tool_call_id the next observation answers; None: a user message
        self._note: dict[str, Any] | None = None  # the "messages were dropped" note, if any
        self._dropped = 0

    # -- protocol -------------------------------------------------------------------------------

    async def reset(self, start: EpisodeStart) -> None:
        self._instructions = start.instructions
        self._tools = list(start.tools)
        self._messages = [
            {"role": "system", "content": self.cfg.system_prompt},
            {"role": "user", "content": start.instructions},
        ]
        self._fresh, self._answer_to, self._note, self._dropped = True, None, None, 0

    async def act(self, observation: str) -> AgentAction:
        if not self._messages:
            raise AgentError("act() called before reset()")
        self._add_observation(observation)
        events: list[dict] = []
        body = self._fit_context(events)
        usage = Usage()
        started = time.monotonic()
        try:
            data = await self._complete(body, usage, events)
        except AgentError as exc:  # hand the failed step's cost to the harness
            exc.usage, exc.events = usage, events
            raise
        finally:
            usage.latency_s = time.monotonic() - started
        counts = data.get("usage") or {}
        usage.tokens_in = int(counts.get("prompt_tokens") or 0)
        usage.tokens_out = int(counts.get("completion_tokens") or 0)
        usage.cost_usd = (
            usage.tokens_in * self.cfg.price_in_per_mtok + usage.tokens_out * self.cfg.price_out_per_mtok
        ) / 1e6
        return self._decide(data["choices"][0], usage, events)

    def config(self) -> dict[str, Any]:
        settings = self.cfg.model_dump(mode="json", exclude={"api_key"})
        settings["api_key"] = "***" if self.cfg.api_key else None
        return settings

    async def aclose(self) -> None:
        """Close the HTTP client; idempotent. A later ``act`` opens a new one."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def __aenter__(self) -> LLMAgent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- conversation ---------------------------------------------------------------------------

    def _add_observation(self, observation: str) -> None:
        if self._fresh:
            self._fresh = False
            if not observation or observation.strip() == self._instructions.strip():
                return  # already sent as the task message
            self._messages.append({"role": "user", "content": observation})
        elif self._answer_to is not None:
            self._messages.append({"role": "tool", "tool_call_id": self._answer_to, "content": observation})
        else:
            self._messages.append({"role": "user", "content": observation})
        self._answer_to = None

    def _decide(self, choice: dict[str, Any], usage: Usage, events: list[dict]) -> AgentAction:
        message = choice["message"]
        content = _text(message.get("content"))
        calls = message.get("tool_calls") or []
        if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
            self._messages.append({"role": "assistant", "content": content or ""})
            self._answer_to = None
            why = "no tool call: the reply was text only" if content else "no tool call and no text in the reply"
            return AgentAction(
                action=content or "", content=content or None, usage=usage, events=events,
                format_error=f"{why}; call one of the tools (submit when done)",
            )
        if len(calls) > 1:  # one action per step; unanswered calls would make the history invalid
            events.append({"type": "extra_tool_calls_dropped", "count": len(calls) - 1})
        fn = calls[0].get("function") or {}
        name, raw = fn.get("name"), fn.get("arguments")
        call_id = calls[0].get("id") or f"call_{uuid.uuid4().hex[:24]}"
        arguments, error = _parse_arguments(raw)
        if error and choice.get("finish_reason") == "length":
            error += " (the reply was cut off at max_tokens)"
        if not isinstance(name, str) or not name:
            error = "the tool call has no function name" + (f"; also {error}" if error else "")
        # The history holds valid JSON and a name even for a malformed call: some servers
        # (vLLM among them) parse past arguments and would refuse every later request.
        recorded = json.dumps(arguments) if arguments is not None else json.dumps({"invalid_arguments": str(raw)})
        self._messages.append({
            "role": "assistant",
            "content": content or None,
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": name if isinstance(name, str) and name else "missing_name",
                                         "arguments": recorded}}],
        })
        self._answer_to = call_id
        if error:
            log.info("malformed tool call: %s", self._scrub(error))
            return AgentAction(action={"name": name, "arguments": raw, "id": call_id}, content=content or None,
                               format_error=error, usage=usage, events=events)
        return AgentAction(action={"name": name, "arguments": arguments, "id": call_id}, content=content or None,
                           usage=usage, events=events)

    # -- context budget -------------------------------------------------------------------------

    def _body(self) -> bytes:
        payload: dict[str, Any] = {
            "model": self.cfg.model,
            "messages": self._messages,
            "temperature": self.cfg.temperature,
            "max_tokens": self.cfg.max_tokens,
        }
        if self._tools:
            payload["tools"], payload["tool_choice"] = self._tools, "auto"
        return _dumps(payload).encode()

    def _fit_context(self, events: list[dict]) -> bytes:
        """The request body, after dropping the oldest turns if its estimate exceeds the budget.

        Kept: the system message, the task, a note saying how many messages went, and the latest
        turns. A turn is an assistant message with the observation(s) that answer it, so a tool
        call is never separated from its tool message. If the latest turn alone is too big, its
        observation is cut in the middle.
        """
        body = self._body()
        budget = self.cfg.context_budget_tokens
        if estimate_tokens(body.decode()) <= budget:
            return body
        overhead = len(body.decode()) - sum(_size(m) for m in self._messages)
        head = self._messages[:2]
        turns: list[list[dict]] = []
        for m in self._messages[2:]:
            if m is self._note:
                continue
            if m["role"] == "assistant" or not turns:
                turns.append([])
            turns[-1].append(m)
        note_size = _size(_note(10**9))
        fixed = overhead + sum(_size(m) for m in head) + note_size
        total = fixed + sum(_size(m) for t in turns for m in t)
        dropped = 0
        while len(turns) > 1 and total // CHARS_PER_TOKEN > budget:
            gone = turns.pop(0)
            dropped += len(gone)
            total -= sum(_size(m) for m in gone)
        event: dict[str, Any] = {"type": "context_cut", "dropped": dropped}
        if total // CHARS_PER_TOKEN > budget and turns:
            cut = _shorten(turns[-1], (total - budget * CHARS_PER_TOKEN) + 200)
            if cut:
                event["truncated_chars"] = cut
        if dropped:
            self._dropped += dropped
            self._note = _note(self._dropped)
        self._messages = head + ([self._note] if self._note else []) + [m for t in turns for m in t]
        body = self._body()
        if dropped or "truncated_chars" in event:
            event["estimated_tokens"] = estimate_tokens(body.decode())
            events.append(event)
            log.info("context cut: %d messages dropped, about %d tokens left", dropped, event["estimated_tokens"])
        if estimate_tokens(body.decode()) > budget:
            log.warning("request of about %d tokens exceeds the budget of %d even after cutting",
                        estimate_tokens(body.decode()), budget)
        return body

    # -- HTTP -----------------------------------------------------------------------------------

    async def _complete(self, body: bytes, usage: Usage, events: list[dict]) -> dict[str, Any]:
        def record_retry(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            wait = state.next_action.sleep if state.next_action else 0.0
            status, reason = (exc.status, exc.reason) if isinstance(exc, _Retryable) else (None, "unknown")
            usage.retries += 1
            events.append({"type": "retry", "status": status, "reason": reason, "wait_s": round(wait, 3)})
            log.warning("retry %d/%d in %.2fs: %s", usage.retries, self.cfg.max_retries, wait, reason)

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.cfg.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception_type(_Retryable),
            before_sleep=record_retry,
            reraise=True,
        )
        try:
            return await retrying(self._post, body, usage)
        except _Retryable as exc:
            # `from None`: httpx errors carry the request, headers (the key) included.
            raise AgentError(
                f"{self.cfg.model} at {self.cfg.base_url}: gave up after {self.cfg.max_retries} retries; "
                f"last error: {exc.reason}"
            ) from None

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            return min(exc.retry_after, max(self.cfg.backoff_max, RETRY_AFTER_CAP_S))
        ceiling = min(self.cfg.backoff_max, self.cfg.backoff_base * 2 ** (state.attempt_number - 1))
        return random.uniform(ceiling / 2, ceiling)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Content-Type": "application/json", "User-Agent": "sandgym-llm"}
            if self.cfg.api_key is not None:
                headers["Authorization"] = f"Bearer {self.cfg.api_key.get_secret_value()}"
            self._client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(self.cfg.request_timeout))
        return self._client

    async def _post(self, body: bytes, usage: Usage) -> dict[str, Any]:
        usage.requests += 1
        url = self.cfg.base_url.rstrip("/") + "/chat/completions"
        timeout = self.cfg.request_timeout
        try:
            with anyio.fail_after(timeout):
                response = await self._http().post(url, content=body)
        except (TimeoutError, httpx.TimeoutException):
            raise _Retryable(None, f"no complete answer within {timeout:g}s") from None
        except httpx.UnsupportedProtocol as exc:
            raise AgentError(self._scrub(f"bad base_url {self.cfg.base_url!r}: {exc}")) from None
        except (httpx.TransportError, httpx.DecodingError) as exc:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise _Retryable(None, self._scrub(reason)) from None
        status = response.status_code
        if status == 200:
            try:
                data = response.json()
            except ValueError:
                size = len(response.content)
                raise _Retryable(200, f"the body is not valid JSON ({size} bytes; truncated?)") from None
            choices = data.get("choices") if isinstance(data, dict) else None
            if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict) \
                    or not isinstance(choices[0].get("message"), dict):
                raise _Retryable(200, "the reply has no choices (truncated or an error body?)")
            return data
        detail = self._detail(response)
        if status in (408, 429) or status >= 500:
            raise _Retryable(status, f"HTTP {status}: {detail}", _retry_after(response.headers.get("retry-after")))
        raise AgentError(
            f"{self.cfg.model} at {self.cfg.base_url}: the endpoint refused the request: HTTP {status}: {detail}"
        )

    def _detail(self, response: httpx.Response) -> str:
        """The server's error message, on one short line, without the key."""
        try:
            data = response.json()
            err = data.get("error", data) if isinstance(data, dict) else data
            text = err.get("message", json.dumps(err)) if isinstance(err, dict) else str(err)
        except ValueError:
            text = response.text
        text = " ".join(self._scrub(str(text)).split())
        return (text[:200] + "...") if len(text) > 200 else (text or response.reason_phrase or "no detail")

    def _scrub(self, text: str) -> str:
        key = self.cfg.api_key.get_secret_value() if self.cfg.api_key else ""
        return text.replace(key, "***") if key else text


def _parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(arguments, None) or (None, what is wrong) for a tool call's ``arguments``."""
    if isinstance(raw, dict):
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if not isinstance(raw, str):
        return None, f"the arguments must be a JSON object, got {type(raw).__name__}"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, f"the arguments are not valid JSON ({exc.msg} at character {exc.pos})"
    if not isinstance(value, dict):
        return None, f"the arguments must be a JSON object, got {type(value).__name__}"
    return value, None


def _text(content: Any) -> str:
    """Message content as text (some servers send a list of parts)."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (seconds or an HTTP date); None if absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _note(dropped: int) -> dict[str, Any]:
    return {"role": "user", "content": f"[{dropped} earlier messages were dropped to fit the context budget]"}


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _size(message: dict[str, Any]) -> int:
    return len(_dumps(message)) + 1


def _shorten(turn: list[dict[str, Any]], excess: int) -> int:
    """Cut ``excess`` characters from the middle of the largest observation in ``turn``; how many were cut."""
    observations = [m for m in turn if m["role"] in ("tool", "user") and isinstance(m.get("content"), str)]
    if not observations:
        return 0
    m = max(observations, key=lambda m: len(m["content"]))
    text = m["content"]
    keep = max(0, len(text) - excess - 80)  # 80: room for the marker
    cut = len(text) - keep
    marker = f"\n[... {cut} characters cut to fit the context budget ...]\n"
    m["content"] = text[: keep // 2] + marker + text[len(text) - (keep - keep // 2) :]
    return cut
