"""Drive a deployed stack one request at a time (batch 1) and record what each request did.

The `chat` and `generate` APIs and where tokens, speculative fields and durations come from: docs/bench.md, "What a
run measures". `generate` asks like SGLang's own few-shot GSM8K benchmark; counting stream chunks would under-report
tokens by the accept length; engine timing is read by sparkgate/sglang/request_timing.py.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

from sparkgate.bench import gsm8k_scoring
from sparkgate.bench.workloads import Item, Workload
from sparkgate.sglang import request_timing

APIS = ("chat", "generate")


@dataclass(frozen=True)
class Sampling:
    name: str
    temperature: float
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None


GREEDY = Sampling("greedy", 0.0)
# The published protocol (the Ling notebook's Spark recipe): temperature 0.6, top_p 0.95, top_k 29, seed 42.
PUBLISHED_SAMPLED = Sampling("sampled", 0.6, 0.95, 29, 42)


@dataclass(frozen=True)
class Target:
    url: str
    model: str
    api: str = "chat"
    api_key: str | None = None
    time_scale: float = 1.0
    timeout_s: float = 900.0  # per read, wall seconds: a long thinking answer streams for minutes
    spec_details: bool = True  # ask the chat layer for per-request speculative fields


@dataclass
class RequestRecord:
    index: int
    item_id: str
    api: str
    prompt_chars: int
    completion_tokens: int = 0
    prompt_tokens: int | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    decode_s: float | None = None
    tpot_ms: float | None = None
    text_chunks: int = 0
    accept_length: float | None = None
    spec_verify_ct: int | None = None
    spec_accept_rate: float | None = None
    finish_reason: str | None = None
    expected: str | None = None
    extracted: str | None = None
    extracted_by: str | None = None
    correct: bool | None = None
    output: str = ""
    error: str | None = None
    wall_started: float | None = None  # time.time() at send, for the log
    timing: str = "client"  # where ttft_s / e2e_s / decode_s come from: "engine" (meta_info) or "client"
    client_ttft_s: float | None = None  # the client's stopwatch, wall seconds / time_scale
    client_decode_s: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


class RequestFailed(Exception):
    pass


def _body(target: Target, item: Item, sampling: Sampling, max_tokens: int, fixed_length: bool) -> tuple[str, dict]:
    chosen = {key: getattr(sampling, key) for key in ("top_p", "top_k", "seed") if getattr(sampling, key) is not None}
    if target.api == "chat":
        body: dict = {
            "model": target.model,
            "messages": [{"role": "user", "content": item.prompt}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": max_tokens,
            "temperature": sampling.temperature,
            **chosen,
        }
        if fixed_length:
            body["ignore_eos"] = True
        if target.spec_details:
            body["return_spec_tokens_details"] = True
        return "/v1/chat/completions", body
    if "seed" in chosen:
        chosen["sampling_seed"] = chosen.pop("seed")  # SGLang's SamplingParams name
    params: dict = {"max_new_tokens": max_tokens, "temperature": sampling.temperature, **chosen}
    if fixed_length:
        params["ignore_eos"] = True
    elif item.expected is not None:
        params["stop"] = ["\nQuestion:"]  # raw few-shot text: the model would write the next question
    return "/generate", {"text": item.prompt, "sampling_params": params, "stream": True}


def _events(target: Target, path: str, body: dict) -> Iterator[tuple[float, dict]]:
    """POST and yield (perf_counter at arrival, parsed SSE event) until [DONE] or the end of the stream."""
    parts = urllib.parse.urlsplit(target.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=target.timeout_s)
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if target.api_key:
        headers["Authorization"] = f"Bearer {target.api_key}"
    try:
        conn.request("POST", parts.path.rstrip("/") + path, body=json.dumps(body).encode(), headers=headers)
        response = conn.getresponse()
        if response.status != 200:
            raw = response.read()[:300].decode("utf-8", "replace")
            raise RequestFailed(f"HTTP {response.status} from {path}: {raw.strip()}")
        while True:
            line = response.readline()
            if not line:
                return
            arrived = time.perf_counter()
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return
            try:
                yield arrived, json.loads(payload)
            except json.JSONDecodeError:
                raise RequestFailed(f"bad stream event from {path}: {payload[:80]!r}") from None
    except (OSError, http.client.HTTPException) as exc:
        raise RequestFailed(f"{path}: {type(exc).__name__}: {exc}") from None
    finally:
        conn.close()


def _spec_fields(record: RequestRecord, details: dict) -> None:
    verify = details.get("spec_verify_ct")
    if verify:
        record.spec_verify_ct = int(verify)
        if details.get("spec_accept_length") is not None:
            record.accept_length = float(details["spec_accept_length"])
        if details.get("spec_accept_rate") is not None:
            record.spec_accept_rate = float(details["spec_accept_rate"])


def run_one(target: Target, index: int, item: Item, sampling: Sampling, max_tokens: int,
            fixed_length: bool = False) -> RequestRecord:
    record = RequestRecord(index, item.id, target.api, len(item.prompt), expected=item.expected)
    path, body = _body(target, item, sampling, max_tokens, fixed_length)
    scale = target.time_scale
    record.wall_started = time.time()
    sent = time.perf_counter()
    first = last = None
    content: list[str] = []
    reasoning: list[str] = []
    usage_tokens = None
    final_meta: dict | None = None
    try:
        for arrived, event in _events(target, path, body):
            if target.api == "chat":
                if isinstance(event.get("usage"), dict) and event["usage"].get("completion_tokens") is not None:
                    usage_tokens = int(event["usage"]["completion_tokens"])
                    record.prompt_tokens = event["usage"].get("prompt_tokens")
                details = (event.get("sglext") or {}).get("spec_tokens_details")
                if isinstance(details, dict):
                    _spec_fields(record, details)
                for choice in event.get("choices") or []:
                    delta = choice.get("delta") or {}
                    piece, thought = delta.get("content") or "", delta.get("reasoning_content") or ""
                    if piece or thought:
                        first = first if first is not None else arrived
                        last = arrived
                        record.text_chunks += 1
                        content.append(piece)
                        reasoning.append(thought)
                    if choice.get("finish_reason"):
                        record.finish_reason = choice["finish_reason"]
                        if first is not None:
                            last = arrived  # the end of the final step, when it comes without text
            else:
                meta = event.get("meta_info") or {}
                text = event.get("text") or ""
                if text:
                    first = first if first is not None else arrived
                    last = arrived
                    record.text_chunks += 1
                    content[:] = [text]  # /generate streams the cumulative text
                reason = meta.get("finish_reason")
                if reason:
                    record.finish_reason = reason.get("type") if isinstance(reason, dict) else str(reason)
                    usage_tokens = request_timing.count(meta, "completion_tokens") or 0
                    record.prompt_tokens = meta.get("prompt_tokens")
                    _spec_fields(record, meta)
                    final_meta = meta
    except RequestFailed as exc:
        record.error = str(exc)
        return record
    record.output = "".join(content)
    if usage_tokens is None:
        record.error = ("no usage.completion_tokens in the stream (stream_options.include_usage not honoured); "
                        "tokens are never counted from chunks" if target.api == "chat"
                        else "stream ended without a final chunk (no finish_reason)")
        return record
    record.completion_tokens = usage_tokens
    if first is not None and last is not None:
        record.client_ttft_s = (first - sent) / scale
        record.client_decode_s = (last - first) / scale
        record.ttft_s, record.e2e_s, record.decode_s = record.client_ttft_s, (last - sent) / scale, record.client_decode_s
    if final_meta is not None:
        try:
            engine = request_timing.from_meta(final_meta, record.completion_tokens)
        except request_timing.TimingMissing as exc:
            record.error = f"{exc}; a /generate run judges speed on the engine's own timing only"
            return record
        record.timing = "engine"
        record.ttft_s, record.e2e_s, record.decode_s = engine.ttft_s, engine.e2e_s, engine.decode_s
    if record.decode_s is not None and record.completion_tokens > 1 and record.decode_s > 0:
        record.tpot_ms = 1000.0 * record.decode_s / (record.completion_tokens - 1)
    if record.accept_length is None and record.spec_verify_ct:
        record.accept_length = record.completion_tokens / record.spec_verify_ct
    if item.expected is not None:
        extracted, how = gsm8k_scoring.extract(record.output)
        if extracted is None:
            extracted, how = gsm8k_scoring.extract("".join(reasoning))
            how = f"reasoning {how}" if extracted is not None else how
        record.extracted, record.extracted_by = extracted, how
        record.correct = gsm8k_scoring.is_correct(extracted, item.expected)
    return record


ProgressFn = Callable[[RequestRecord], None]


def run(target: Target, workload: Workload, sampling: Sampling, max_tokens: int,
        on_record: ProgressFn = lambda _record: None, *, max_consecutive_errors: int = 3,
        items: Sequence[Item] | None = None) -> tuple[list[RequestRecord], str | None]:
    """Every item once, in order, one at a time. Returns (records, why it stopped early or None).

    A run stops after `max_consecutive_errors` failed requests in a row: a gate that closed mid-run answers
    503 to everything, and measuring a closed gate measures nothing."""
    records: list[RequestRecord] = []
    failures = 0
    for index, item in enumerate(items if items is not None else workload.items):
        record = run_one(target, index, item, sampling, max_tokens, workload.fixed_length)
        records.append(record)
        on_record(record)
        failures = failures + 1 if record.error else 0
        if failures >= max_consecutive_errors:
            hint = ""
            if target.api == "chat" and target.spec_details and "HTTP 400" in (record.error or ""):
                hint = ("; an engine without sglext support may reject return_spec_tokens_details: try --api "
                        "generate")
            return records, f"stopped after {failures} consecutive failed requests (last: {record.error}){hint}"
    return records, None
