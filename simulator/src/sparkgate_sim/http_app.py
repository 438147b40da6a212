"""The HTTP surface: SGLang 0.5.23's routes and shapes on a stdlib ThreadingHTTPServer (HTTP/1.1
keep-alive, chunked SSE streaming), SGLang's API-key rule, and the sim-only admin routes."""

from __future__ import annotations

import collections
import contextlib
import json
import secrets
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from sparkgate_sim import admin_routes, faults, openai_api, textgen
from sparkgate_sim.engine import Engine, GenRequest
from sparkgate_sim.lifecycle import NotReady, Restarted
from sparkgate_sim.resolve import MODEL_ARCH, MODEL_TYPE, context_len

SGLANG_VERSION = "0.5.23"
ADMIN_PREFIX = "/admin/"


class HttpError(Exception):
    def __init__(self, status: int, body: Any = None):
        super().__init__(status)
        self.status = status
        self.body = body


class SimHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    engine: Engine  # set on the subclass made by make_server

    # ------------------------------------------------------------------ plumbing
    def log_message(self, format: str, *args: Any) -> None:
        pass  # access lines are written by _access(), in uvicorn's format

    def _access(self, status: int) -> None:
        client = f"{self.client_address[0]}:{self.client_address[1]}"
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        self.engine.log.access(client, self.command, self.path, status, phrase)

    def _send(self, status: int, body: Any = None, content_type: str = "application/json") -> None:
        if body is None:
            data = b""
        elif isinstance(body, (bytes, str)):
            data = body.encode() if isinstance(body, str) else body
        else:
            data = json.dumps(body).encode()
        self.send_response_only(status)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-length", str(len(data)))
        if body is not None:
            self.send_header("content-type", content_type)
        self.end_headers()
        self.wfile.write(data)
        self._access(status)

    def _body(self) -> dict:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            body = json.loads(raw)
        except ValueError:
            raise HttpError(400, {"error": {"message": "Invalid JSON body", "type": "invalid_request_error"}}) from None
        if not isinstance(body, dict):
            raise HttpError(400, {"error": {"message": "Request body must be a JSON object", "type": "invalid_request_error"}})
        return body

    def _authorized(self, path: str) -> bool:
        """SGLang's --api-key / --admin-api-key rule (admin_routes.decide); the sim-only /admin/ routes
        (faults, stats) are outside it."""
        if path.startswith(ADMIN_PREFIX):
            return True
        r = self.engine.resolved
        return admin_routes.decide(self.command, path, self.headers.get("authorization"), r.get("api_key"),
                                   r.get("admin_api_key")) == 0

    def _dispatch(self) -> None:
        method, path = self.command, urlsplit(self.path).path
        if not path.startswith(ADMIN_PREFIX):
            # "did anything reach the engine?" (admin stats), and did it come through the gateway?
            self.engine.count_route(path, forwarded=self.headers.get("X-Forwarded-For") is not None)
        try:
            if not self._authorized(path):
                raise HttpError(401, {"error": "Unauthorized"})
            handler = self._route(method, path)
            handler()
        except HttpError as exc:
            self._send(exc.status, exc.body)
        except NotReady:
            self._send(503, {"error": {"message": "The server is starting.", "type": "service_unavailable"}})
        except (BrokenPipeError, ConnectionResetError, Restarted):
            self.close_connection = True
        finally:
            with contextlib.suppress(OSError):
                self.wfile.flush()
            # crash-after-ready:N dies once the response that reached N is written, however slow the host.
            self.engine.crash_if_due()

    do_GET = do_POST = do_PUT = _dispatch

    def _route(self, method: str, path: str) -> Callable[[], None]:
        routes: dict[str, dict[str, Callable[[], None]]] = {
            "/health": {"GET": self.health},
            "/health_generate": {"GET": self.health},
            "/ready": {"GET": self.health},
            "/ping": {"GET": self.health},
            "/model_info": {"GET": self.model_info},
            "/get_model_info": {"GET": self.model_info},
            "/server_info": {"GET": self.server_info},
            "/get_server_info": {"GET": self.server_info},
            "/generate": {"POST": self.generate, "PUT": self.generate},
            "/flush_cache": {"GET": self.flush_cache, "POST": self.flush_cache},
            "/update_weights_from_disk": {"POST": self.update_weights_from_disk},
            "/set_internal_state": {"POST": self.set_internal_state, "PUT": self.set_internal_state},
            "/pause_generation": {"POST": lambda: self._send(*admin_routes.pause_generation())},
            "/continue_generation": {"POST": lambda: self._send(*admin_routes.continue_generation())},
            "/hicache/storage-backend": {
                "GET": lambda: self._send(*admin_routes.hicache_storage_backend(self.engine.resolved)),
            },
            "/v1/models": {"GET": self.models},
            "/v1/completions": {"POST": self.completions},
            "/v1/chat/completions": {"POST": self.chat_completions},
        }
        if self.engine.resolved.get("enable_metrics"):
            routes["/metrics"] = {"GET": self.metrics}
        if self.engine.knobs.admin:
            routes.update({
                "/admin/faults": {"GET": self.admin_faults, "POST": self.admin_faults},
                "/admin/stats": {"GET": self.admin_stats},
                "/admin/restart": {"POST": self.admin_restart},
            })
        if path.startswith("/v1/models/") and method == "GET":
            return lambda: self.model_card(path[len("/v1/models/") :])
        if path not in routes:
            raise HttpError(404, {"detail": "Not Found"})
        if method not in routes[path]:
            raise HttpError(405, {"detail": "Method Not Allowed"})
        return routes[path][method]

    def _require_ready(self) -> None:
        if not self.engine.is_ready():
            raise NotReady()

    # ------------------------------------------------------------------ native routes
    def health(self) -> None:
        ready = self.engine.is_ready()
        if ready and self.path.split("?")[0] in ("/health", "/health_generate"):
            self.engine.health_generate()
        self._send(200 if ready else 503)

    def flush_cache(self) -> None:
        self._require_ready()
        self._send(200, "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n", "text/plain")

    def update_weights_from_disk(self) -> None:
        body = self._body()
        self._require_ready()
        self._send(*admin_routes.update_weights_from_disk(self.engine.resolved, body))

    def set_internal_state(self) -> None:
        body = self._body()
        self._require_ready()
        self._send(*admin_routes.set_internal_state(self.engine.resolved, body))

    def model_info(self) -> None:
        self._require_ready()
        r = self.engine.resolved
        self._send(200, {
            "model_path": r["model_path"],
            "served_model_name": r["served_model_name"],
            "tokenizer_path": r["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": r["weight_version"],
            "load_format": r["load_format"],
            "reasoning_parser": r["reasoning_parser"],
            "tool_call_parser": r["tool_call_parser"],
            "disaggregation_mode": r["disaggregation_mode"],
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": MODEL_TYPE,
            "architectures": [MODEL_ARCH],
        })

    def server_info(self) -> None:
        self._require_ready()
        engine = self.engine
        info = dict(engine.resolved)
        info["launch_command"] = engine.args.launch_command
        info.update(
            status="ready",
            max_total_num_tokens=engine.token_capacity,
            # managers/tp_worker.py: min(context_len - 1, kv capacity - 1) - 5
            max_req_input_len=min(context_len(engine.resolved), engine.token_capacity) - 1 - 5,
            kv_events=None,
            startup_time=engine.startup_time,
            internal_states=[engine.internal_state()],
            version=SGLANG_VERSION,
            frontend="python",
        )
        self._send(200, info)

    def metrics(self) -> None:
        self.engine.refresh_idle_metrics()
        metrics = self.engine.metrics
        body = metrics.registry.render() if metrics is not None else ""
        self._send(200, body, "text/plain; version=0.0.4; charset=utf-8")

    def generate(self) -> None:
        body = self._body()
        self._require_ready()
        text, input_ids = body.get("text"), body.get("input_ids")
        if isinstance(text, list) or (isinstance(input_ids, list) and input_ids and isinstance(input_ids[0], list)):
            raise HttpError(400, {"error": {"message": "the simulator serves one prompt per request", "type": "invalid_request_error"}})
        if text is None and input_ids is None:
            raise HttpError(400, {"error": {"message": "Either text or input_ids should be provided.", "type": "invalid_request_error"}})
        sampling = body.get("sampling_params") or {}
        key = text if text is not None else "ids:" + ",".join(map(str, input_ids))
        stop = sampling.get("stop") or ()
        req = GenRequest(
            prompt_key=key,
            prompt_tokens=textgen.prompt_token_count(text, input_ids),
            max_new_tokens=int(sampling.get("max_new_tokens", textgen.DEFAULT_MAX_NEW_TOKENS) or 0) or None,
            sampling=sampling,
            stream=bool(body.get("stream")),
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
            rid=body.get("rid") or secrets.token_hex(16),
            ignore_eos=bool(sampling.get("ignore_eos")),
        )
        chunks = self.engine.generate(req)
        if not req.stream:
            final = collections.deque(chunks, maxlen=1)[0]  # the last chunk; earlier ones are not kept
            self._send(200, {"text": final.text, "output_ids": final.ids, "meta_info": final.meta_info})
            return
        with _Sse(self) as sse:
            for chunk in chunks:
                sse.event({"text": chunk.text, "output_ids": chunk.ids, "meta_info": chunk.meta_info})
            sse.done()

    # ------------------------------------------------------------------ OpenAI routes
    def models(self) -> None:
        self._require_ready()
        self._send(200, {"object": "list", "data": [self._card()]})

    def model_card(self, name: str) -> None:
        self._require_ready()
        if name != self.engine.served_model_name:
            raise HttpError(
                404,
                {"error": {"message": f"The model '{name}' does not exist", "type": "invalid_request_error",
                           "param": "model", "code": "model_not_found"}},
            )
        self._send(200, self._card())

    def _card(self) -> dict[str, Any]:
        name = self.engine.served_model_name
        return {"id": name, "object": "model", "created": int(self.engine.launched_at), "owned_by": "sglang",
                "root": name, "parent": None, "max_model_len": context_len(self.engine.resolved)}

    def completions(self) -> None:
        self._openai("completion", openai_api.completion_request)

    def chat_completions(self) -> None:
        parser = self.engine.resolved.get("reasoning_parser")
        self._openai("chat", lambda body: openai_api.chat_request(body, parser))

    def _openai(self, kind: str, parse: Callable[[dict], GenRequest]) -> None:
        body = self._body()
        self._require_ready()
        try:
            req = parse(body)
        except (openai_api.BadRequest, TypeError, ValueError) as exc:
            raise HttpError(400, {"object": "error", "message": str(exc), "type": "BadRequestError", "param": None, "code": 400}) from None
        shaper = openai_api.Shaper(kind, body.get("model") or self.engine.served_model_name,
                                   self.engine.resolved.get("reasoning_parser"), body)
        chunks = self.engine.generate(req)
        if not req.stream:
            last = collections.deque(chunks, maxlen=1)[0]  # the last chunk; earlier ones are not kept
            response = shaper.full(last)
            sglext = openai_api.spec_tokens_details(body, last.meta_info)
            if sglext:
                response["sglext"] = sglext
            self._send(200, response)
            return
        with _Sse(self) as sse:
            if kind == "chat":
                sse.event(shaper.first_chat_delta())
            final = None
            for chunk in chunks:
                for event in shaper.deltas(chunk):
                    sse.event(event)
                final = chunk
            # Only the final chunk carries the speculative fields; SGLang sends them in a chunk of their own
            # after the finish event, then the usage chunk (serving_chat.py, serving_completions.py).
            sglext = None if final is None else openai_api.spec_tokens_details(body, final.meta_info)
            if sglext:
                sse.event(shaper.sglext_chunk(sglext))
            if final is not None and openai_api.include_usage(body):
                sse.event(shaper.usage_chunk(final.meta_info))
            sse.done()

    # ------------------------------------------------------------------ admin (sim only)
    def admin_faults(self) -> None:
        board = self.engine.board
        if self.command == "POST":
            body = self._body()
            try:
                if "faults" in body:
                    board.replace(faults.parse_faults(body["faults"]))
                else:
                    keep = {f.name: f for f in faults.parse_faults(board.describe()["active"])}
                    keep.update((f.name, f) for f in faults.parse_faults(body.get("add") or []))
                    for name in body.get("remove") or []:
                        keep.pop(str(name).partition(":")[0], None)
                    board.replace(tuple(keep.values()))
            except faults.FaultSpecError as exc:
                raise HttpError(400, {"error": str(exc)}) from None
        self._send(200, board.describe())

    def admin_stats(self) -> None:
        engine = self.engine
        with engine._lock:
            routes = dict(sorted(engine.route_counts.items()))
            forwarded = dict(sorted(engine.forwarded_counts.items()))
            state = engine.state
            finished = engine.finished_requests
        self._send(200, {
            "state": state,
            "requests": routes,
            "total_requests": sum(routes.values()),
            "forwarded": forwarded,
            "forwarded_requests": sum(forwarded.values()),
            "generation_requests_finished": finished,
            "restarts": engine.restarts,
            "since": engine.launched_at,
            "image": engine.image.name,
            "time_scale": engine.knobs.time_scale,
            # SPARKGATE_SIM_HOST_MEMINFO's writer: attempts so far (a test waits on writes, not on the clock)
            "host_meminfo": engine.meminfo.counts() if engine.meminfo is not None else None,
            "decode_stalled_s": round(engine.stalled_s(), 3),  # simulated seconds the decode has hung
        })

    def admin_restart(self) -> None:
        self.engine.restart()
        self._send(200, {"state": "starting", "restarts": self.engine.restarts})


class _Sse:
    """`text/event-stream` over HTTP/1.1 chunked transfer encoding; flushed per event."""

    def __init__(self, handler: SimHandler):
        self.h = handler

    def __enter__(self) -> _Sse:  # noqa: PYI034 - final helper class
        h = self.h
        h.send_response_only(200)
        h.send_header("date", h.date_time_string())
        h.send_header("server", "uvicorn")
        h.send_header("content-type", "text/event-stream; charset=utf-8")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()
        h._access(200)
        return self

    def _write(self, data: bytes) -> None:
        self.h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.h.wfile.flush()

    def event(self, obj: Any) -> None:
        self._write(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def done(self) -> None:
        self._write(b"data: [DONE]\n\n")

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.h.wfile.write(b"0\r\n\r\n")
            self.h.wfile.flush()
        else:
            self.h.close_connection = True  # a half-sent stream cannot be continued
        return False


class SimServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64


def make_server(engine: Engine, host: str, port: int) -> SimServer:
    handler = type("BoundSimHandler", (SimHandler,), {"engine": engine})
    return SimServer((host, port), handler)

