"""A scripted OpenAI-compatible model for end-to-end tests.

It reads the Chat Completions request our server sends and answers with streamed chunks, driven
by markers in the latest user message, so a test scripts the model's behaviour through the
prompt it types into a real client:

- `[think]`                      reasoning_content deltas, then the answer text
- `[tool NAME {json-args}]`      one tool call, then (after its result) a sentence quoting it
- `[tools N1 {a1} N2 {a2}]`      two tool calls in one message (parallel), then a summary
- `[parallel K NAME {args}]`     K calls of NAME in one message (ids call_q1..call_qK), then
                                 an answer quoting every
                                 result in the order the request carries them
- `[script write-read PATH TEXT]` Write(PATH, TEXT), then Read(PATH), then an answer quoting it
- `[script write-shell PATH TEXT]` Write(PATH, TEXT), then Shell("cat PATH"), then an answer
- `[reads N PATH]`                Read(PATH) N times, one call per step, then an answer
- `[slow SECONDS]`               a pause before the answer (heartbeat tests)
- `[helper STEP]`                a helper (Task child): UpdateCurrentStep(STEP), then a report
- `[brief]`                      a short answer however long the message (benchmarks)
- `[fail]`                       HTTP 500 with a provider error body
- `[usage N C]`                  the answer's usage reports N prompt tokens, C of them cached
                                 (each call of the turn; the context meter's tests)
- `[overflow]` / `[overflow-openai]` HTTP 400 "context length exceeded" (llama-server's body /
                                 OpenAI's) while the request holds no compaction summary
- a summary request (its user message starts "Transcript to summarize:") gets a fixed summary
- a describing request (its user message starts "Describe the attached image(s).", with the
  images as image_url parts) gets "BRAIN VISION saw N image(s): MIME (B bytes), ..." counting
  the images it received; with `[vision-fail]` in the user's text, HTTP 400
- model `brain-small`: usage reports the request's size (its bytes / 4) as the prompt tokens,
  so a small configured window fills the way a real model's would
- otherwise                      "You said: <text>"

Everything it answers is deterministic, so tests can assert exact text.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import msgspec

from .upstream import Received, Reply

CHUNK = 4


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    return json.dumps(
        {
            "id": "chatcmpl-brain",
            "object": "chat.completion.chunk",
            "model": "brain-1",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def _usage(prompt: int, completion: int, cached: int = 0) -> str:
    return json.dumps(
        {
            "id": "chatcmpl-brain",
            "object": "chat.completion.chunk",
            "model": "brain-1",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }
    )


LLAMA_SERVER_OVERFLOW = (
    '{"error":{"code":400,"message":"request (9412 tokens) exceeds the available context size '
    '(8192 tokens), try increasing it","type":"exceed_context_size_error",'
    '"n_prompt_tokens":9412,"n_ctx":8192}}'
)
OPENAI_OVERFLOW = (
    '{"error":{"message":"This model\'s maximum context length is 8192 tokens. However, your '
    'messages resulted in 9412 tokens. Please reduce the length of the messages.",'
    '"type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}'
)
SUMMARY_REQUEST = "Transcript to summarize:"
COMPACTED = "[The earlier part of this conversation was compacted"
VISION_REQUEST = "Describe the attached image(s)."
VISION_FAILURE = '{"error":{"message":"brain: this image cannot be read","type":"invalid_request"}}'


def vision_reply(content: Any, prompt: str) -> Reply:
    """The describing call's answer: what images it received, each by its data URL."""
    if "[vision-fail]" in prompt:
        return Reply.json(400, VISION_FAILURE)
    urls = [
        p["image_url"]["url"]
        for p in content
        if isinstance(p, dict) and p.get("type") == "image_url"
    ]
    seen = [f"{u[5 : u.index(';')]} ({len(u) - u.index(',') - 1} base64 chars)" for u in urls]
    return text_reply(f"BRAIN VISION saw {len(urls)} image(s): {', '.join(seen)}.")


def summary_of(transcript: str) -> str:
    """The brain's summary: deterministic, names how much it read, and keeps a `[reads ...]`
    script it saw going (a turn cut inside carries on from the summary)."""
    text = f"BRAIN SUMMARY of {transcript.count('## User')} user messages."
    if m := _READS.search(transcript):
        text += f" Still doing: {m.group(0)}"
    return text


def text_reply(
    text: str, *, thinking: str = "", delay_s: float = 0.0, prompt_tokens: int = 100
) -> Reply:
    events = [_chunk({"role": "assistant", "content": ""})]
    for i in range(0, len(thinking), CHUNK):
        events.append(_chunk({"reasoning_content": thinking[i : i + CHUNK]}))
    for i in range(0, len(text), CHUNK):
        events.append(_chunk({"content": text[i : i + CHUNK]}))
    events.append(_chunk({}, "stop"))
    events.append(_usage(prompt_tokens, max(1, len(text) // 4), cached=40))
    events.append("[DONE]")
    return Reply.events(events, delay_s=delay_s)


def tool_reply(
    calls: list[tuple[str, str, dict[str, Any]]], text: str = "", prompt_tokens: int = 120
) -> Reply:
    events = [_chunk({"role": "assistant", "content": None})]
    if text:
        events.append(_chunk({"content": text}))
    for index, (call_id, name, args) in enumerate(calls):
        raw = json.dumps(args)
        first = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        events.append(_chunk({"tool_calls": [first]}))
        for i in range(0, len(raw), 7):
            part = {"index": index, "function": {"arguments": raw[i : i + 7]}}
            events.append(_chunk({"tool_calls": [part]}))
    events.append(_chunk({}, "tool_calls"))
    events.append(_usage(prompt_tokens, 30))
    events.append("[DONE]")
    return Reply.events(events)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


# The user message our Chat adapter adds after tool results to carry their images: part of the
# tool round, not something the user typed.
TOOL_IMAGES_PREFIX = "Attached image(s) from tool result:"


def is_tool_images(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and _text_of(content).startswith(TOOL_IMAGES_PREFIX)


_TOOL = re.compile(r"\[tool (\S+) (\{.*?\})\]")
_TOOLS = re.compile(r"\[tools (\S+) (\{.*?\}) (\S+) (\{.*?\})\]")
_PARALLEL = re.compile(r"\[parallel ([0-9]+) (\S+) (\{.*?\})\]")
_DECODER = msgspec.json.Decoder(dict[str, Any])
_SCRIPT = re.compile(r"\[script (write-read|write-shell) (\S+) (.+?)\]")
_SLOW = re.compile(r"\[slow ([0-9.]+)\]")
_HELPER = re.compile(r"\[helper ([^\]]+)\]")
_USAGE = re.compile(r"\[usage ([0-9]+) ([0-9]+)\]")


def _with_usage(reply: Reply, prompt_tokens: int, cached: int) -> Reply:
    """`reply` with its usage event reporting `prompt_tokens` (`cached` of them cached)."""
    for i, chunk in enumerate(reply.chunks):
        if chunk.startswith(b"data: {") and b'"usage"' in chunk:
            event = json.loads(chunk[len(b"data: ") :])
            completion = event["usage"]["completion_tokens"]
            reply.chunks[i] = f"data: {_usage(prompt_tokens, completion, cached)}\n\n".encode()
    return reply


_READS = re.compile(r"\[reads (\d+) (\S+)\]")


def _counted(body: str, prompt_tokens: int) -> str:
    """A recorded refusal with the request's own count (as a real server gives it) in place of
    the 9,412 tokens of the recording."""
    return body.replace("9412", str(prompt_tokens))


def overflow(received: Received) -> Reply:
    """llama-server's refusal of `received`, counting it as brain-small's usage does."""
    return Reply.json(400, _counted(LLAMA_SERVER_OVERFLOW, len(received.body) // 4))


def answer(received: Received) -> Reply:
    # One parse of the request, with msgspec: the stand-in for a provider should not charge
    # a server for the size of its request the way a twice-run `json.loads` did (430 µs for
    # a 16 KB request, 229 for 6 KB; the regression guard's first delta counts it).
    body = _DECODER.decode(received.body)
    reply = _respond(received, body)
    users = [m for m in body["messages"] if m["role"] == "user" and not is_tool_images(m)]
    if users and (m := _USAGE.search(_text_of(users[-1]["content"]))):
        return _with_usage(reply, int(m.group(1)), int(m.group(2)))
    return reply


def _respond(received: Received, body: dict[str, Any]) -> Reply:
    messages = body["messages"]
    last_user = next(
        (
            i
            for i in range(len(messages) - 1, -1, -1)
            if messages[i]["role"] == "user" and not is_tool_images(messages[i])
        ),
        0,
    )
    prompt = _text_of(messages[last_user]["content"])
    after = messages[last_user + 1 :]
    results = [m for m in after if m["role"] == "tool"]
    if "[fail]" in prompt:
        return Reply.json(
            500, '{"error":{"message":"brain: scripted failure","type":"server_error"}}'
        )
    if prompt.startswith(SUMMARY_REQUEST):
        return text_reply(summary_of(prompt))
    if prompt.startswith(VISION_REQUEST):
        return vision_reply(messages[last_user]["content"], prompt)
    compacted = any(
        m["role"] == "user" and _text_of(m["content"]).startswith(COMPACTED) for m in messages
    )
    if "[overflow]" in prompt and not compacted:
        return overflow(received)
    if "[overflow-openai]" in prompt and not compacted:
        return Reply.json(400, _counted(OPENAI_OVERFLOW, len(received.body) // 4))
    if body.get("model") == "brain-small":
        return _sized(_answer(prompt, results), len(received.body) // 4)
    return _answer(prompt, results)


def _sized(reply: Reply, prompt_tokens: int) -> Reply:
    """`reply` with its usage chunk reporting `prompt_tokens` (what a real model would count)."""
    count = f'"prompt_tokens": {prompt_tokens}'.encode()
    chunks = [
        re.sub(rb'"prompt_tokens": \d+', count, c) if b'"usage"' in c else c for c in reply.chunks
    ]
    return dataclasses.replace(reply, chunks=chunks)


def _answer(prompt: str, results: list[dict[str, Any]]) -> Reply:
    if m := _READS.search(prompt):
        count, path = int(m.group(1)), m.group(2)
        done = max(
            (int(r["tool_call_id"][6:]) for r in results if r["tool_call_id"][6:].isdigit()),
            default=0,
        )
        if done < count:
            return tool_reply([(f"call_r{done + 1}", "Read", {"path": path})])
        return text_reply(f"Read it {count} times.")
    if m := _SCRIPT.search(prompt):
        kind, path, text = m.groups()
        if not results:
            return tool_reply([("call_w1", "Write", {"path": path, "contents": text})])
        if len(results) == 1:
            if kind == "write-read":
                return tool_reply([("call_r1", "Read", {"path": path})])
            return tool_reply([("call_s1", "Shell", {"command": f"cat {path}"})])
        return text_reply(f"Done. The file says: {_text_of(results[-1]['content'])[:200]}")
    if (m := _HELPER.search(prompt)) and "[tool " not in prompt and "[tools " not in prompt:
        if not results:
            return tool_reply([("call_h1", "UpdateCurrentStep", {"current_step": m.group(1)})])
        return text_reply(f"Helper report: {m.group(1)} done, 3 files found.")
    if m := _PARALLEL.search(prompt):
        count, name, args = int(m.group(1)), m.group(2), json.loads(m.group(3))
        if not results:
            calls = [(f"call_q{i}", name, args) for i in range(1, count + 1)]
            return tool_reply(calls)
        order = " ".join(r["tool_call_id"] for r in results)
        joined = " | ".join(_text_of(r["content"])[:40] for r in results)
        return text_reply(f"All {len(results)} answered, in order {order}: {joined}")
    if m := _TOOLS.search(prompt):
        n1, a1, n2, a2 = m.groups()
        if not results:
            return tool_reply([("call_p1", n1, json.loads(a1)), ("call_p2", n2, json.loads(a2))])
        joined = " | ".join(_text_of(r["content"])[:80] for r in results)
        return text_reply(f"Both tools answered: {joined}")
    if m := _TOOL.search(prompt):
        name, args = m.groups()
        if not results:
            return tool_reply([("call_t1", name, json.loads(args))], text="Let me check.")
        return text_reply(f"The tool said: {_text_of(results[-1]['content'])[:200]}")
    delay = float(m.group(1)) if (m := _SLOW.search(prompt)) else 0.0
    if "[think]" in prompt:
        return text_reply("I thought about it.", thinking="Let me reason step by step.")
    if "[brief]" in prompt:
        return text_reply(f"Noted: {prompt[:40]}")
    if delay:
        reply = text_reply(f"You said: {prompt}")
        reply.chunks.insert(1, b"")
        reply.delay_s = delay / max(1, len(reply.chunks))
        return reply
    return text_reply(f"You said: {prompt}")
