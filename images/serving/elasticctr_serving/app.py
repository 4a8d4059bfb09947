"""The HTTP API (docs/serving.md): aiohttp on one event loop; parsing happens on the loop
(natively, native.py), lookups and predictions on the batch workers (batcher.py).

- POST /ElasticCTRPredictionService/inference  ElasticCTR's client contract
- POST /predict                                 plain JSON
- POST /click                                   clicks on answered instances (feedback.py)
- GET  /healthz  /readyz  /status  /metrics
- KServe's Open Inference Protocol (v2 REST, v2.py): GET /v2, /v2/health/{live,ready},
  /v2/models/elasticctr[/versions/V][/ready]; POST /v2/models/elasticctr[/versions/V]/infer

Every answer carries its request id (`request_id` in the body, `X-Request-Id`); with the
feedback loop on, each instance answered is an impression under that id (feedback.py).

Given a token (SERVING_AUTH_TOKEN), every request but the kubelet's probes (/healthz,
/readyz) must carry `Authorization: Bearer <token>` (RFC 6750), compared in constant time;
others get 401. /readyz then tells an unauthenticated caller only whether it is ready.

Every prediction request's outcome is counted (recent.py: /status's `requests`, the
`failures_total` metric by cause), and a 5xx answer is logged with its cause, at most once
per cause per `failure_log_seconds`.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import numpy as np
import orjson
from aiohttp import web
from aiohttp.typedefs import Handler
from aiohttp.web_runner import GracefulExit
from elasticctr_common.feedback import CLICK_PATH, REQUEST_ID_HEADER, valid_request_id
from numpy.typing import NDArray

from . import native, v2
from .batcher import Batcher, Prediction, Unavailable
from .feasign_check import ReducedFeasignCheck
from .feedback import FeedbackLog, RequestIds
from .instances import BadRequest, Parsed, load_json, parse_request
from .metrics import ServingMetrics
from .model import DenseModel
from .recent import INTERNAL, LOG_PERIOD_SECONDS, NO_MODEL, Failure, FailureLog, RecentRequests
from .rollout import ModelManager

log = logging.getLogger("elasticctr_serving.app")
INFERENCE_PATH = "/ElasticCTRPredictionService/inference"
PATHS = {INFERENCE_PATH, "/predict", CLICK_PATH, "/healthz", "/readyz", "/status", "/metrics"}
MAX_CLICKS = 1000  # per /click request
PROBES = {"/healthz", "/readyz"}  # the kubelet's: no credentials
V2_MODEL = "/v2/models/{name}"
V2_VERSION = V2_MODEL + "/versions/{version}"
V2_INFER = {V2_MODEL + "/infer", V2_VERSION + "/infer"}
# what users call: counted in /status
PREDICTIONS = {INFERENCE_PATH, "/predict", *V2_INFER, v2.GRPC_INFER}
# Why an answer is a 5xx, as the handler knew it, for the counting in `_errors`.
FAILURE = web.ResponseKey("elasticctr_failure", Failure)
REALM = 'Bearer realm="elasticctr-serving"'
Body = TypeVar("Body")  # a request as its protocol gives it: HTTP's bytes, a gRPC message


def _json(
    body: object, status: int = 200, version: int | None = None, request_id: str = ""
) -> web.Response:
    headers = {"X-Model-Version": str(version)} if version is not None else {}
    if request_id:
        headers[REQUEST_ID_HEADER] = request_id
    return web.Response(
        body=orjson.dumps(body), status=status, content_type="application/json", headers=headers
    )


# Some instances of the request failed: every instance's entry says whether it did (a
# prediction, or its own error); the status and err_code say "look at each" (Multi-Status).
PARTIAL = 207
INSTANCE_ERROR = 500  # the err_code of a failed instance: the model cannot score it


def _failures(prediction: Prediction) -> list[tuple[int, str, str]]:
    """(instance, cause, message) of each failed instance, in instance order."""
    return [
        (i, f.cause, f"instance {i}: {f.message}") for i, f in sorted(prediction.failures.items())
    ]


def elasticctr_answer(prediction: Prediction, request_id: str) -> web.Response:
    predictions: list[dict[str, object]] = [
        {"prob0": p0, "prob1": p1} for p0, p1 in prediction.probabilities.tolist()
    ]
    body = {
        "predictions": predictions,
        "err_code": 0,
        "err_msg": "",
        "version": prediction.version,
        "request_id": request_id,
    }
    if not prediction.failures:
        return _json(body, version=prediction.version, request_id=request_id)
    failed = _failures(prediction)
    for i, cause, message in failed:
        predictions[i] = {"err_code": INSTANCE_ERROR, "err_msg": message, "cause": cause}
    body["err_code"] = PARTIAL
    body["err_msg"] = (
        f"{len(failed)} of {len(predictions)} instances failed, each answered with its "
        f"err_code and err_msg; the first: {failed[0][2]}"
    )
    return _json(body, PARTIAL, prediction.version, request_id)


def elasticctr_error(status: int, message: str) -> web.Response:
    return _json({"predictions": [], "err_code": status, "err_msg": message}, status)


def plain_answer(prediction: Prediction, request_id: str) -> web.Response:
    scores: list[float | None] = prediction.probabilities[:, 1].tolist()
    body: dict[str, object] = {
        "version": prediction.version,
        "predictions": scores,
        "request_id": request_id,
    }
    if not prediction.failures:
        return _json(body, version=prediction.version, request_id=request_id)
    failed = _failures(prediction)
    for i, _, _ in failed:
        scores[i] = None
    body["errors"] = [{"instance": i, "cause": c, "error": m} for i, c, m in failed]
    return _json(body, PARTIAL, prediction.version, request_id)


def plain_error(status: int, message: str) -> web.Response:
    """Also the v2 protocol's error form."""
    return _json({"error": message}, status)


def v2_scores(
    prediction: Prediction, request_id: str, nan_is: str = ""
) -> tuple[NDArray[np.float32], dict[str, str | int]]:
    """The Open Inference Protocol's answer to a prediction, either transport: the scores,
    NaN for a failed instance (`nan_is`: how the transport shows it), and the parameters:
    the request id and, when some instances failed, how many and why."""
    scores = prediction.probabilities[:, 1].astype(np.float32)
    parameters: dict[str, str | int] = {"request_id": request_id}
    if prediction.failures:
        failed = _failures(prediction)
        scores[[i for i, _, _ in failed]] = np.nan
        parameters["failed_instances"] = len(failed)
        parameters["error"] = (
            f"{len(failed)} of {len(scores)} instances failed, their probability is NaN"
            f"{nan_is}; the first: {failed[0][2]}"
        )
    return scores, parameters


def v2_answer(decoded: v2.InferRequest, prediction: Prediction, request_id: str) -> web.Response:
    """200 even when some instances failed (v2 clients take any other status for a failed
    request): their probability is NaN (null in JSON), and the parameters say why."""
    scores, parameters = v2_scores(prediction, request_id, " (null in JSON)")
    body, header_length = v2.answer(decoded, prediction.version, scores, parameters)
    headers = {"X-Model-Version": str(prediction.version), REQUEST_ID_HEADER: request_id}
    content_type = "application/json"
    if header_length is not None:
        headers[v2.HEADER_LENGTH] = str(header_length)
        content_type = "application/octet-stream"
    return web.Response(body=body, content_type=content_type, headers=headers)


def _graceful_exit() -> None:
    raise GracefulExit  # what aiohttp's own signal handler raises: run_app shuts down


class ServingApp:
    def __init__(
        self,
        manager: ModelManager,
        batcher: Batcher,
        metrics: ServingMetrics,
        *,
        max_body_bytes: int,
        max_instances: int,
        token: str = "",
        feedback: FeedbackLog | None = None,
        failure_log_seconds: float = LOG_PERIOD_SECONDS,
    ) -> None:
        self.manager, self.batcher, self.metrics = manager, batcher, metrics
        self.feedback = feedback
        self.ids = feedback.ids if feedback is not None else RequestIds()
        self.recent = RecentRequests()
        self.failure_log = FailureLog(log, failure_log_seconds)
        self.max_body_bytes, self.max_instances = max_body_bytes, max_instances
        self.started_at = time.time()
        self.stopping = False
        self.feasigns = ReducedFeasignCheck()
        self._expected = f"Bearer {token}".encode() if token else b""

    def build(self) -> web.Application:
        # aiohttp's own limit is a backstop for bodies without Content-Length.
        app = web.Application(
            client_max_size=self.max_body_bytes, middlewares=[self._errors, self._auth]
        )
        app.router.add_post(INFERENCE_PATH, self.inference)
        app.router.add_post("/predict", self.predict)
        app.router.add_post(CLICK_PATH, self.click)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/status", self.status)
        app.router.add_get("/metrics", self.metrics_text)
        app.router.add_get("/v2", self.v2_server)
        app.router.add_get("/v2/health/live", self.v2_live)
        app.router.add_get("/v2/health/ready", self.v2_ready)
        for prefix in (V2_MODEL, V2_VERSION):
            app.router.add_get(prefix, self.v2_model)
            app.router.add_get(prefix + "/ready", self.v2_model_ready)
            app.router.add_post(prefix + "/infer", self.v2_infer)
        return app

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Latency and counts of every request; aiohttp's own errors (404, 405) as JSON."""
        started = time.perf_counter()
        path = request.path if request.path in PATHS else "other"
        resource = request.match_info.route.resource
        if resource is not None and resource.canonical.startswith("/v2"):
            path = resource.canonical  # the route, not the path: a bounded label set
        try:
            response = await handler(request)
        except web.HTTPException as err:
            response = plain_error(err.status, f"{request.method} {request.path}: {err.reason}")
        except Exception as err:  # a bug in a handler answers 500; the server goes on
            log.exception("%s %s failed", request.method, request.path)
            message = f"internal error: {type(err).__name__}: {err}"
            response = plain_error(500, message)
            response[FAILURE] = Failure(INTERNAL, message)
        if self.stopping:  # the client reconnects, to a replica that is staying
            response.force_close()
        self.count(
            path,
            response.status,
            started,
            response.get(FAILURE),
            f"{request.method} {request.path}",
        )
        return response

    def count(
        self, path: str, status: int, started: float, failure: Failure | None, what: str
    ) -> None:
        """A request's outcome (`status` as HTTP's, whatever the protocol): counted and
        timed under its path; a prediction's also in the recent window, and a 5xx by its
        cause in the metrics and (rate-limited) the log."""
        self.metrics.requests.inc(1, path, str(status))
        self.metrics.latency.observe(time.perf_counter() - started, path)
        if path not in PREDICTIONS:
            return
        if status >= 500:
            failure = failure or Failure(INTERNAL, f"HTTP {status}")
            self.metrics.failures.inc(1, failure.cause)
            self.failure_log.failed(status, what, failure)
        self.recent.record(status, failure)

    def stop_on_signal(self, app: web.Application, delay: float) -> None:
        """On SIGTERM (or SIGINT): answer /readyz 503 and close each connection after its
        answer for `delay` seconds, still serving (time for Kubernetes to take the pod out
        of the Service's endpoints), then stop: aiohttp stops accepting and waits for the
        requests in flight (run_app's shutdown_timeout)."""

        async def install(app: web.Application) -> None:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self._begin_stop, loop, delay)

        app.on_startup.append(install)

    def _begin_stop(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        if self.stopping:
            return
        self.stopping = True
        log.info("stopping: not ready, closing connections; stop accepting in %g s", delay)
        loop.call_later(delay, _graceful_exit)

    def authorized(self, request: web.Request) -> bool:
        """No token configured, or the request's Authorization header is the token's."""
        return self.token_matches(request.headers.get("Authorization", ""))

    def token_matches(self, authorization: str) -> bool:
        """An Authorization value (HTTP's header, gRPC's metadata) is the token's, or no
        token is configured."""
        if not self._expected:
            return True
        return hmac.compare_digest(authorization.encode(), self._expected)

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in PROBES or self.authorized(request):
            return await handler(request)
        message = "missing or wrong bearer token (Authorization: Bearer <serving_token>)"
        if request.path == INFERENCE_PATH:
            response = elasticctr_error(401, message)
        else:
            response = plain_error(401, message)
        response.headers["WWW-Authenticate"] = REALM
        return response

    async def inference(self, request: web.Request) -> web.Response:
        def parse(body: bytes, model: DenseModel) -> Parsed:
            return parse_request(body, model.space, self.max_instances, False)

        return await self._predict(request, parse, elasticctr_answer, elasticctr_error)

    async def predict(self, request: web.Request) -> web.Response:
        def parse(body: bytes, model: DenseModel) -> Parsed:
            return parse_request(body, model.space, self.max_instances, True)

        return await self._predict(request, parse, plain_answer, plain_error)

    async def v2_infer(self, request: web.Request) -> web.Response:
        unknown = self._v2_unknown_name(request)
        if unknown is not None:
            return unknown
        decoded: list[v2.InferRequest] = []

        def parse(body: bytes, model: DenseModel) -> Parsed:
            self._v2_check_version(request, model)
            decoded.append(v2.decode(body, request.headers.get(v2.HEADER_LENGTH)))
            data_format = model.meta.get("data_format", "elasticctr")
            return v2.to_parsed(decoded[0], model.space, data_format, self.max_instances)

        def answer(prediction: Prediction, request_id: str) -> web.Response:
            return v2_answer(decoded[0], prediction, request_id)

        return await self._predict(request, parse, answer, plain_error)

    async def _predict(
        self,
        request: web.Request,
        parse: Callable[[bytes, DenseModel], Parsed],
        answer: Callable[[Prediction, str], web.Response],
        error: Callable[[int, str], web.Response],
    ) -> web.Response:
        try:
            prediction, request_id = await self.score(partial(self._read, request), parse)
            return answer(prediction, request_id)
        except BadRequest as err:
            return error(err.status, str(err))
        except Unavailable as err:
            response = error(503, str(err))
            response[FAILURE] = Failure(err.cause, str(err))
            return response

    async def _read(self, request: web.Request) -> bytes:
        length = request.content_length
        if length is not None and length > self.max_body_bytes:
            raise BadRequest(self._too_large(length), 413)
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise BadRequest(self._too_large(None), 413) from None

    async def score(
        self,
        read: Callable[[], Awaitable[Body]],
        parse: Callable[[Body, DenseModel], Parsed],
    ) -> tuple[Prediction, str]:
        """One prediction request of any protocol: its body (read after the batcher knows a
        request is coming), the model its id picks, parsing, the batch, the impressions.
        The prediction and the request's id; BadRequest or Unavailable."""
        self.batcher.arrive()
        queued = False
        try:
            body = await read()
            # The id is the request's before it is scored: it picks the canary's share.
            request_id = self.ids.next()
            model = self.manager.model_for(request_id)
            if model is None:
                raise Unavailable("no model version is loaded yet", NO_MODEL)
            parse_started = time.perf_counter()
            parsed = parse(body, model)
            sent = len(parsed.keys) - parsed.crossed  # the crossed ids are serving's
            self.feasigns.observe(model.space.sparse_dim, sent, parsed.largest_feasign)
            self.metrics.stage_seconds.inc(time.perf_counter() - parse_started, "parse")
            if len(parsed.keys) > self.batcher.max_keys:
                crossed = f" and {parsed.crossed} crossed ids" if parsed.crossed else ""
                raise BadRequest(
                    f"{sent} feasigns{crossed} in one request, more than the limit "
                    f"{self.batcher.max_keys} (the keys cube takes in one lookup)",
                    413,
                )
            future = self.batcher.submit(parsed, model)
            queued = True
            prediction = await future
            if self.feedback is not None:
                scores: list[float | None] = prediction.probabilities[:, 1].tolist()
                for i in prediction.failures:
                    scores[i] = None
                self.feedback.log_request(
                    request_id, parsed, model.space.slots, prediction.version, scores
                )
            return prediction, request_id
        finally:
            if not queued:
                self.batcher.leave()

    def _too_large(self, length: int | None) -> str:
        size = f"{length} bytes" if length is not None else "the body"
        return f"{size} is over the request body limit of {self.max_body_bytes} bytes"

    async def click(self, request: web.Request) -> web.Response:
        """{"request_id": ID, "instance": I} or {"clicks": [...]} -> 202 {"accepted": n}.
        Whether the id was answered is the joiner's to tell (it counts unknown ids)."""
        if self.feedback is None:
            return plain_error(404, "the feedback loop is off on this serving (feedback.enabled)")
        length = request.content_length
        if length is not None and length > self.max_body_bytes:
            return plain_error(413, self._too_large(length))
        try:
            clicks = _clicks(await request.read())
        except BadRequest as err:
            self.metrics.clicks.inc(1, "rejected")
            return plain_error(err.status, str(err))
        accepted = 0
        for request_id, index in clicks:
            if not self.feedback.click(request_id, index):
                message = (
                    f"the click buffer is full (the stream is unreachable?): {accepted} of "
                    f"{len(clicks)} clicks accepted, send the rest again"
                )
                return _json({"error": message, "accepted": accepted}, 503)
            accepted += 1
        return _json({"accepted": accepted}, 202)

    async def healthz(self, request: web.Request) -> web.Response:
        return _json({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        if self.stopping:
            return _json({"ready": False, "reason": "stopping"}, 503)
        model, ready = self.manager.active(), self.manager.ready()
        if not self.authorized(request):  # the kubelet: ready or not, nothing more
            return _json({"ready": ready}, 200 if ready else 503)
        if model is None:
            if ready:
                reason = "cube has no committed version yet: nothing is trained"
                return _json({"ready": True, "version": None, "reason": reason})
            reason = self.manager.last_error or "no model version loaded yet"
            return _json({"ready": False, "reason": reason}, 503)
        return _json({"ready": True, "version": model.version}, version=model.version)

    def _v2_unknown_name(self, request: web.Request) -> web.Response | None:
        name = request.match_info["name"]
        if name == v2.MODEL_NAME:
            return None
        return plain_error(404, f"unknown model {name!r}: this serving serves {v2.MODEL_NAME!r}")

    def _v2_check_version(self, request: web.Request, model: DenseModel) -> None:
        """BadRequest 404 when the path names a version other than the one served."""
        version = request.match_info.get("version")
        if version is not None and version != str(model.version):
            raise BadRequest(
                f"model {v2.MODEL_NAME!r} version {version!r:.40} is not served: "
                f"serving version {model.version} (or leave the version out)",
                404,
            )

    def _v2_active(self, request: web.Request) -> DenseModel | web.Response:
        """The model the path names, or the error answer."""
        unknown = self._v2_unknown_name(request)
        if unknown is not None:
            return unknown
        model = self.manager.active()
        if model is None:
            return plain_error(503, "no model version is loaded yet")
        try:
            self._v2_check_version(request, model)
        except BadRequest as err:
            return plain_error(err.status, str(err))
        return model

    async def v2_server(self, request: web.Request) -> web.Response:
        return _json(
            {"name": v2.SERVER_NAME, "version": v2.SERVER_VERSION, "extensions": v2.EXTENSIONS}
        )

    async def v2_live(self, request: web.Request) -> web.Response:
        return _json({"live": True})

    async def v2_ready(self, request: web.Request) -> web.Response:
        ready = self.manager.ready() and not self.stopping
        return _json({"ready": ready}, 200 if ready else 503)

    async def v2_model(self, request: web.Request) -> web.Response:
        model = self._v2_active(request)
        if isinstance(model, web.Response):
            return model
        return _json(v2.model_metadata(model.version, model.space), version=model.version)

    async def v2_model_ready(self, request: web.Request) -> web.Response:
        model = self._v2_active(request)
        if isinstance(model, web.Response):
            if model.status != 503:
                return model
            return _json({"name": v2.MODEL_NAME, "ready": False}, 503)
        ready = not self.stopping
        body = {"name": v2.MODEL_NAME, "version": str(model.version), "ready": ready}
        return _json(body, 200 if ready else 503, version=model.version)

    async def status(self, request: web.Request) -> web.Response:
        stats = self.batcher.cube.stats
        body = {
            **self.manager.status(),
            "requests": self.recent.snapshot(),
            "started_at": self.started_at,
            "parser": "native" if native.parser() is not None else "python",
            "batching": {
                "workers": len(self.batcher.threads),
                "max_batch": self.batcher.max_batch,
                "max_wait_ms": self.batcher.max_wait * 1000,
            },
            "cube": {
                "shards": self.manager.cube_conf.shard,
                "replicas": self.manager.cube_conf.dup,
                "max_keys": self.batcher.max_keys,
                "seeks": stats.seeks,
                "keys": stats.keys,
                "missing_keys": stats.missing_keys,
                "retries": stats.retries,
                "hedges": stats.hedges,
            },
            "feedback": self.feedback.status() if self.feedback else {"enabled": False},
        }
        return _json(body)

    async def metrics_text(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.render().encode(),
            headers={
                "Content-Type": "text/plain; version=0.0.4; charset=utf-8",
                "X-Content-Type-Options": "nosniff",
            },
        )


def _clicks(body: bytes) -> list[tuple[str, int]]:
    """(request id, instance) of each click in a /click body; BadRequest naming the bad one."""
    request = load_json(body)
    if isinstance(request, dict) and "clicks" in request:
        items = request["clicks"]
        if not isinstance(items, list) or not items:
            raise BadRequest('"clicks" must be a non-empty list of {"request_id", "instance"}')
        if len(items) > MAX_CLICKS:
            raise BadRequest(f"{len(items)} clicks in one request, more than {MAX_CLICKS}", 413)
    else:
        items = [request]
    clicks = []
    for n, item in enumerate(items):
        where = f"click {n}: " if len(items) > 1 else ""
        if not isinstance(item, dict):
            raise BadRequest(f'{where}expected an object {{"request_id": ..., "instance": ...}}')
        request_id, index = item.get("request_id"), item.get("instance")
        if not valid_request_id(request_id):
            raise BadRequest(
                f"{where}request_id must be the id serving answered with (letters, digits, "
                f"'.', '_', ':', '-', at most 64), got {request_id!r:.80}"
            )
        if type(index) is not int or index < 0:
            raise BadRequest(f"{where}instance must be an integer >= 0, got {index!r:.40}")
        assert isinstance(request_id, str)
        clicks.append((request_id, index))
    return clicks
