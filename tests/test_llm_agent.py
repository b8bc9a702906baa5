"""LLMAgent against a scripted OpenAI-compatible server over real HTTP (no mocks)."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid

import pydantic
import pytest

from sandgym.agents.base import AgentError, EpisodeStart, make_agent
from sandgym.agents.llm import LLMAgent, LLMConfig
from sandgym.envs.core.tools import GENERIC_TOOLS, ActionError, parse_action

from support.openai_server import (
    ScriptedServer,
    error,
    malformed,
    no_choices,
    slow,
    text_reply,
    tool_reply,
    truncated,
)

pytestmark = pytest.mark.anyio

KEY = f"sk-test-{uuid.uuid4().hex}"
TASK = "Fix the failing test in calc.py, then submit."
TOOLS = {spec.name: spec for spec in GENERIC_TOOLS}
SCHEMAS = [spec.schema_for_llm() for spec in GENERIC_TOOLS]


def make(server: ScriptedServer, **options) -> LLMAgent:
    settings = dict(model="scripted-model", base_url=server.base_url, api_key=KEY,
                    backoff_base=0.01, backoff_max=0.05, request_timeout=5.0)
    return LLMAgent(**{**settings, **options})


async def start(agent: LLMAgent) -> None:
    await agent.reset(EpisodeStart(task_id="t1", family="swe", instructions=TASK, tools=SCHEMAS))


def env_observation(action) -> str:
    """What the env would answer: an ActionError's message for a bad call, else a stand-in output."""
    try:
        parse_action(action, TOOLS)
    except ActionError as exc:
        return f"error: {exc}"
    return "ok\n[exit code 0]"


async def test_tool_call_round_trip():
    with ScriptedServer([tool_reply("bash", {"command": "pytest -q"}, usage=(120, 30)),
                         tool_reply("submit", {})]) as server:
        async with make(server) as agent:
            await start(agent)
            first = await agent.act(TASK)
            assert first.format_error is None
            assert first.action == {"name": "bash", "arguments": {"command": "pytest -q"}, "id": "call_0001"}
            call, args = parse_action(first.action, TOOLS)
            assert call.name == "bash" and args.command == "pytest -q"
            assert first.usage.tokens_in == 120 and first.usage.tokens_out == 30
            assert first.usage.requests == 1 and first.usage.retries == 0 and first.usage.latency_s > 0
            assert first.events == []

            second = await agent.act("1 failed\n[exit code 1]")
            assert second.action["name"] == "submit"

        req0, req1 = server.requests
        assert req0.path == "/v1/chat/completions"
        assert req0.headers["authorization"] == f"Bearer {KEY}"
        assert req0.body["model"] == "scripted-model"
        assert req0.body["tools"] == SCHEMAS and req0.body["tool_choice"] == "auto"
        assert req0.body["temperature"] == 0.0 and req0.body["max_tokens"] == 4096
        # the first observation is the task itself: sent once
        assert [m["role"] for m in req0.messages] == ["system", "user"]
        assert req0.messages[1]["content"] == TASK
        assert "submit" in req0.messages[0]["content"]

        assistant, tool = req1.messages[-2:]
        assert [m["role"] for m in req1.messages] == ["system", "user", "assistant", "tool"]
        assert assistant["tool_calls"][0]["id"] == "call_0001"
        assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"command": "pytest -q"}
        assert tool == {"role": "tool", "tool_call_id": "call_0001", "content": "1 failed\n[exit code 1]"}


async def test_cost_from_prices():
    with ScriptedServer([tool_reply("submit", {}, usage=(2000, 500))]) as server:
        async with make(server, price_in_per_mtok=2.5, price_out_per_mtok=10.0) as agent:
            await start(agent)
            usage = (await agent.act(TASK)).usage
    assert (usage.tokens_in, usage.tokens_out) == (2000, 500)
    assert usage.cost_usd == pytest.approx(2000 * 2.5 / 1e6 + 500 * 10.0 / 1e6)


async def test_429_burst_honours_retry_after():
    script = [error(429, retry_after=1), error(429, retry_after="0.5"), tool_reply("submit", {})]
    with ScriptedServer(script) as server:
        async with make(server) as agent:
            await start(agent)
            began = time.monotonic()
            result = await agent.act(TASK)
            elapsed = time.monotonic() - began
    assert result.action["name"] == "submit"
    assert elapsed >= 1.5  # the backoff alone would be ~0.05 s
    assert result.usage.retries == 2 and result.usage.requests == 3
    assert [(e["type"], e["status"], e["wait_s"]) for e in result.events] == [("retry", 429, 1.0), ("retry", 429, 0.5)]
    assert "HTTP 429" in result.events[0]["reason"]


@pytest.mark.parametrize(
    ("failure", "status", "reason"),
    [
        (error(500), 500, "HTTP 500"),
        (error(503, body="upstream overloaded"), 503, "upstream overloaded"),
        (truncated(), None, "RemoteProtocolError"),
        (malformed(), 200, "not valid JSON"),
        (no_choices(), 200, "no choices"),
        (slow(3, text_reply("too late")), None, "within 0.5s"),
    ],
    ids=["500", "503", "truncated", "malformed-json", "no-choices", "slow"],
)
async def test_recovers_from_a_transient_failure(failure, status, reason):
    with ScriptedServer([failure, tool_reply("bash", {"command": "ls"})]) as server:
        async with make(server, request_timeout=0.5) as agent:
            await start(agent)
            began = time.monotonic()
            result = await agent.act(TASK)
            elapsed = time.monotonic() - began
    assert result.format_error is None and result.action["arguments"] == {"command": "ls"}
    assert result.usage.retries == 1 and result.usage.requests == 2
    (event,) = result.events
    assert event["type"] == "retry" and event["status"] == status and reason in event["reason"]
    assert 0.005 <= event["wait_s"] <= 0.05
    assert elapsed < 2.5
    # the retried request is the same request
    assert server.requests[0].body == server.requests[1].body


async def test_many_failures_in_one_step():
    script = [error(500), truncated(), malformed(), error(429, retry_after=0), slow(2, text_reply("late")),
              tool_reply("submit", {})]
    with ScriptedServer(script) as server:
        async with make(server, request_timeout=0.5) as agent:
            await start(agent)
            result = await agent.act(TASK)
    assert result.action["name"] == "submit"
    assert result.usage.retries == 5 and result.usage.requests == 6
    assert [e["status"] for e in result.events] == [500, None, 200, 429, None]


async def test_exhausted_retries_raise():
    with ScriptedServer([error(500)] * 3) as server:
        async with make(server, max_retries=2) as agent:
            await start(agent)
            with pytest.raises(AgentError, match="gave up after 2 retries") as info:
                await agent.act(TASK)
    assert len(server.requests) == 3
    message = str(info.value)
    assert "HTTP 500" in message and "\n" not in message and KEY not in message


async def test_401_raises_without_the_key():
    said = f"Incorrect API key provided: {KEY}.\nSee your dashboard."
    body = {"error": {"message": said, "type": "invalid_request_error"}}
    with ScriptedServer([error(401, body=body)]) as server:
        async with make(server) as agent:
            await start(agent)
            with pytest.raises(AgentError) as info:
                await agent.act(TASK)
    assert len(server.requests) == 1  # not retried
    message = str(info.value)
    assert "HTTP 401" in message and "Incorrect API key provided: ***" in message
    assert KEY not in message and "\n" not in message


async def test_malformed_arguments_go_back_as_a_tool_error():
    bad = '{"command": "ls -la'
    script = [tool_reply("bash", bad, finish_reason="length"), tool_reply("bash", {"command": "ls"})]
    with ScriptedServer(script) as server:
        async with make(server) as agent:
            await start(agent)
            first = await agent.act(TASK)
            assert first.format_error and "not valid JSON" in first.format_error and "max_tokens" in first.format_error
            assert first.action == {"name": "bash", "arguments": bad, "id": "call_0001"}
            observation = env_observation(first.action)
            assert "not valid JSON" in observation
            second = await agent.act(observation)
            assert second.format_error is None and second.action["arguments"] == {"command": "ls"}
    assistant, tool = server.requests[1].messages[-2:]
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["id"] == "call_0001"
    json.loads(assistant["tool_calls"][0]["function"]["arguments"])  # the history stays valid JSON
    assert tool == {"role": "tool", "tool_call_id": "call_0001", "content": observation}


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (tool_reply(None, {"command": "ls"}), "no function name"),
        (tool_reply("bash", "[1, 2]"), "must be a JSON object"),
    ],
    ids=["no-name", "not-an-object"],
)
async def test_other_malformed_calls(reply, problem):
    with ScriptedServer([reply, tool_reply("submit", {})]) as server:
        async with make(server) as agent:
            await start(agent)
            first = await agent.act(TASK)
            assert first.format_error and problem in first.format_error
            observation = env_observation(first.action)
            assert observation.startswith("error:")
            await agent.act(observation)
    last = server.requests[1].messages[-1]
    assert last == {"role": "tool", "tool_call_id": first.action["id"], "content": observation}


async def test_a_call_without_id_gets_one():
    with ScriptedServer([tool_reply("bash", {"command": "ls"}, id=None), tool_reply("submit", {})]) as server:
        async with make(server) as agent:
            await start(agent)
            first = await agent.act(TASK)
            await agent.act("ok")
    assert first.format_error is None and first.action["id"]
    assistant, tool = server.requests[1].messages[-2:]
    assert assistant["tool_calls"][0]["id"] == first.action["id"] == tool["tool_call_id"]


async def test_parallel_calls_keep_the_first():
    reply = tool_reply("bash", {"command": "ls"}, content="Looking around.", also=[("view", {"path": "."})])
    with ScriptedServer([reply, tool_reply("submit", {})]) as server:
        async with make(server) as agent:
            await start(agent)
            first = await agent.act(TASK)
            await agent.act("ok")
    assert first.action["name"] == "bash" and first.content == "Looking around."
    assert first.events == [{"type": "extra_tool_calls_dropped", "count": 1}]
    assistant, tool = server.requests[1].messages[-2:]
    assert len(assistant["tool_calls"]) == 1 and assistant["content"] == "Looking around."
    assert tool["tool_call_id"] == first.action["id"]


async def test_a_first_observation_other_than_the_task_is_sent():
    with ScriptedServer([tool_reply("submit", {})]) as server:
        async with make(server) as agent:
            await start(agent)
            await agent.act("Note: the repository is at /repo.")
    assert server.requests[0].messages[1:] == [
        {"role": "user", "content": TASK},
        {"role": "user", "content": "Note: the repository is at /repo."},
    ]


async def test_act_before_reset_raises():
    async with LLMAgent(base_url="http://127.0.0.1:9/v1", api_key=None) as agent:
        with pytest.raises(AgentError, match="before reset"):
            await agent.act("hello")


async def test_text_only_reply_is_a_format_error():
    script = [text_reply("I will look at calc.py first."), text_reply(""), tool_reply("submit", {})]
    with ScriptedServer(script) as server:
        async with make(server) as agent:
            await start(agent)
            first = await agent.act(TASK)
            assert first.action == "I will look at calc.py first."
            assert first.content == "I will look at calc.py first."
            assert "no tool call" in first.format_error
            obs1 = env_observation(first.action)
            second = await agent.act(obs1)
            assert second.format_error and "no tool call and no text" in second.format_error
            obs2 = env_observation(second.action)
            third = await agent.act(obs2)
            assert third.format_error is None
    # no tool call to answer: the observations go back as user messages
    assert server.requests[1].messages[-2:] == [
        {"role": "assistant", "content": "I will look at calc.py first."},
        {"role": "user", "content": obs1},
    ]
    assert server.requests[2].messages[-1] == {"role": "user", "content": obs2}


async def test_context_budget_drops_old_turns():
    budget = 3000
    steps = 10
    script = [tool_reply("bash", {"command": f"cat part{i}.txt"}) for i in range(steps)]
    with ScriptedServer(script) as server:
        async with make(server, context_budget_tokens=budget) as agent:
            await start(agent)
            results = [await agent.act(TASK)]
            for i in range(1, steps):
                results.append(await agent.act(f"output {i}\n" + "x" * 3000))
    cuts = [e for r in results for e in r.events if e["type"] == "context_cut"]
    assert cuts and all(e["dropped"] > 0 for e in cuts)
    for request in server.requests:
        assert len(request.raw) // 4 <= budget
        pairs = request.messages
        for i, m in enumerate(pairs):  # every tool message answers the assistant right before it
            if m["role"] == "tool":
                assert pairs[i - 1]["role"] == "assistant" and pairs[i - 1]["tool_calls"][0]["id"] == m["tool_call_id"]
    last = server.requests[-1].messages
    assert last[0]["role"] == "system" and last[1] == {"role": "user", "content": TASK}
    note = re.fullmatch(r"\[(\d+) earlier messages were dropped to fit the context budget\]", last[2]["content"])
    assert last[2]["role"] == "user" and note
    assert int(note.group(1)) == sum(e["dropped"] for e in cuts)
    assert last[3]["role"] == "assistant"
    assert last[-1]["role"] == "tool" and last[-1]["content"].startswith(f"output {steps - 1}\n")
    assert last[-2]["tool_calls"][0]["function"]["arguments"] == json.dumps({"command": f"cat part{steps - 2}.txt"})
    # nothing is cut while the conversation fits
    assert results[0].events == [] and results[1].events == []


async def test_context_budget_shortens_a_huge_observation():
    budget = 2000
    with ScriptedServer([tool_reply("bash", {"command": "cat big"}), tool_reply("submit", {})]) as server:
        async with make(server, context_budget_tokens=budget) as agent:
            await start(agent)
            await agent.act(TASK)
            result = await agent.act("HEAD" + "y" * 20_000 + "TAIL")
    (event,) = result.events
    assert event["type"] == "context_cut" and event["dropped"] == 0 and event["truncated_chars"] > 12_000
    request = server.requests[-1]
    assert len(request.raw) // 4 <= budget
    content = request.messages[-1]["content"]
    assert content.startswith("HEAD") and content.endswith("TAIL")
    assert "characters cut to fit the context budget" in content


async def test_config_hides_the_key():
    agent = LLMAgent(api_key=KEY, base_url="http://127.0.0.1:9/v1")
    settings = agent.config()
    assert settings["api_key"] == "***" and KEY not in json.dumps(settings)
    assert KEY not in repr(agent.cfg)
    assert LLMAgent(api_key=None).config()["api_key"] is None
    await agent.aclose()


async def test_no_key_sends_no_authorization():
    with ScriptedServer([tool_reply("submit", {})]) as server:
        async with make(server, api_key=None) as agent:
            await start(agent)
            await agent.act(TASK)
    assert "authorization" not in server.requests[0].headers


async def test_defaults_from_the_environment(monkeypatch):
    monkeypatch.setenv("SANDGYM_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    cfg = LLMConfig()
    assert (cfg.model, cfg.base_url, cfg.api_key.get_secret_value()) == ("env-model", "http://127.0.0.1:1/v1", KEY)
    monkeypatch.delenv("OPENAI_API_KEY")
    assert LLMConfig().api_key is None
    with pytest.raises(pydantic.ValidationError):
        LLMConfig(modle="typo")
    assert all(field.description for field in LLMConfig.model_fields.values())


async def test_registry_builds_it():
    agent = make_agent("llm:some-model", base_url="http://127.0.0.1:9/v1", api_key=None)
    assert isinstance(agent, LLMAgent) and agent.name == "llm" and agent.cfg.model == "some-model"
    await agent.aclose()


async def test_connection_refused_is_retried_then_raises():
    with ScriptedServer([]) as server:
        url = server.base_url  # a port that was free a moment ago and is closed now
    async with LLMAgent(base_url=url, api_key=KEY, max_retries=1, backoff_base=0.01, backoff_max=0.01) as agent:
        await start(agent)
        with pytest.raises(AgentError, match="gave up after 1 retries") as info:
            await agent.act(TASK)
    assert "ConnectError" in str(info.value) and KEY not in str(info.value)


async def test_the_key_never_reaches_the_logs(caplog):
    body = {"error": {"message": f"bad key {KEY}"}}
    script = [error(500, body={"error": {"message": f"echo {KEY}"}}), truncated(), tool_reply("bash", "{nope"),
              text_reply(f"my key is {KEY}"), error(401, body=body)]
    with caplog.at_level(logging.DEBUG):
        with ScriptedServer(script) as server:
            async with make(server) as agent:
                await start(agent)
                results = [await agent.act(TASK), await agent.act("error: bad arguments")]
                with pytest.raises(AgentError) as info:
                    await agent.act("error: no tool call")
    assert caplog.records  # retries and the malformed call were logged
    for record in caplog.records:
        assert KEY not in record.getMessage()
    assert KEY not in str(info.value)
    assert KEY not in json.dumps([r.events for r in results]) and KEY not in json.dumps(agent.config())
    assert results[0].usage.retries == 2
