"""KServe's Open Inference Protocol over gRPC (docs/serving.md, "Open Inference Protocol"):
the GRPCInferenceService on its own port, in the HTTP server's event loop, over the same
model, batcher, impressions and counting as the REST routes (app.py).

ModelInfer takes the same inputs as v2 REST (a tensor per slot and dense feature, or
`lines`; v2.py), as `raw_input_contents` (tritonclient's default) or typed `contents`, and
answers `probability` FP32 [n] in `raw_output_contents`, with `request_id` (and, when some
instances failed, `failed_instances` and `error`) in the answer's parameters and the
request id also in the trailing metadata `x-request-id`. A failed request ends with the
gRPC status of its HTTP one (400 INVALID_ARGUMENT, 404 NOT_FOUND, 413 RESOURCE_EXHAUSTED,
401 UNAUTHENTICATED, 503 UNAVAILABLE, 500 INTERNAL) and the same message. With a token,
every call carries the metadata `authorization: Bearer <token>` (as every v2 REST route
needs the header; the kubelet probes HTTP's /readyz).
Requests are counted under their method's path (`/inference.GRPCInferenceService/...`)
with their HTTP status, so the error-rate alerts see them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from elasticctr_common.feedback import REQUEST_ID_HEADER

from . import v2
from .app import ServingApp, v2_scores
from .batcher import Prediction, Unavailable
from .generated import grpc_predict_v2_pb2 as pb
from .instances import BadRequest, Parsed
from .model import DenseModel
from .recent import INTERNAL, Failure

log = logging.getLogger("elasticctr_serving.grpc")

# gRPC status of each HTTP status serving answers with.
STATUS_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
}
# The typed contents field of each datatype serving takes.
CONTENTS = {
    "UINT64": "uint64_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "BYTES": "bytes_contents",
}
UNAUTHENTICATED = "missing or wrong bearer token (metadata authorization: Bearer <serving_token>)"
# A message as large as the REST body limit allows (gRPC's own default is 4 MiB).
MESSAGE_OPTIONS = ("grpc.max_receive_message_length", "grpc.max_send_message_length")


class Failed(Exception):
    """A call's end with this HTTP status (mapped to gRPC's) and message."""

    def __init__(self, status: int, message: str, failure: Failure | None = None) -> None:
        super().__init__(message)
        self.status, self.failure = status, failure


Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


class InferenceService:
    """The service's methods, each counted and authorized like an HTTP route."""

    def __init__(self, app: ServingApp) -> None:
        self.app = app

    def handler(self) -> grpc.GenericRpcHandler:
        methods: dict[str, tuple[Handler, type[Any]]] = {
            "ServerLive": (self.server_live, pb.ServerLiveRequest),
            "ServerReady": (self.server_ready, pb.ServerReadyRequest),
            "ModelReady": (self.model_ready, pb.ModelReadyRequest),
            "ServerMetadata": (self.server_metadata, pb.ServerMetadataRequest),
            "ModelMetadata": (self.model_metadata, pb.ModelMetadataRequest),
            "ModelInfer": (self.model_infer, pb.ModelInferRequest),
        }
        return grpc.method_handlers_generic_handler(
            v2.GRPC_SERVICE,
            {
                name: grpc.unary_unary_rpc_method_handler(
                    self._counted(name, method),
                    request_deserializer=message.FromString,
                    response_serializer=_serialize,
                )
                for name, (method, message) in methods.items()
            },
        )

    def _counted(self, name: str, method: Handler) -> Handler:
        path = f"/{v2.GRPC_SERVICE}/{name}"

        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            started, what = time.perf_counter(), f"gRPC {name}"
            try:
                if not self.app.token_matches(_authorization(context)):
                    raise Failed(401, UNAUTHENTICATED)
                answer = await method(request, context)
            except Failed as err:
                status, failure, message = err.status, err.failure, str(err)
            except Exception as err:  # a bug answers INTERNAL; the server goes on
                log.exception("gRPC %s failed", name)
                message = f"internal error: {type(err).__name__}: {err}"
                status, failure = 500, Failure(INTERNAL, message)
            else:
                self.app.count(path, 200, started, None, what)
                return answer
            # A call the client cancelled is not counted, as HTTP's (the task's cancellation
            # goes past both handlers).
            self.app.count(path, status, started, failure, what)
            await context.abort(STATUS_CODES.get(status, grpc.StatusCode.INTERNAL), message)

        return call

    async def server_live(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerLiveResponse(live=True)

    async def server_ready(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerReadyResponse(ready=self.app.manager.ready() and not self.app.stopping)

    async def model_ready(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        model = self._named(request.name, request.version, active=False)
        return pb.ModelReadyResponse(ready=model is not None and not self.app.stopping)

    async def server_metadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerMetadataResponse(
            name=v2.SERVER_NAME, version=v2.SERVER_VERSION, extensions=v2.EXTENSIONS
        )

    async def model_metadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        model = self._named(request.name, request.version)
        assert model is not None
        meta = v2.model_metadata(model.version, model.space)
        tensors = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta["name"],
            versions=meta["versions"],
            platform=meta["platform"],
            inputs=[tensors(**t) for t in meta["inputs"]],
            outputs=[tensors(**t) for t in meta["outputs"]],
        )

    def _named(self, name: str, version: str, active: bool = True) -> DenseModel | None:
        """The served model if the call names it (a version, if given, must be the one
        served); Failed otherwise. Without a model: Failed 503, or None when `active` is
        False (a readiness question)."""
        if name != v2.MODEL_NAME:
            raise Failed(404, f"unknown model {name!r:.80}: this serving serves {v2.MODEL_NAME!r}")
        model = self.app.manager.active()
        if model is None:
            if not active:
                return None
            raise Failed(503, "no model version is loaded yet")
        _check_version(version, model)
        return model

    async def model_infer(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if request.model_name != v2.MODEL_NAME:
            raise Failed(
                404, f"unknown model {request.model_name!r:.80}: this serving serves "
                f"{v2.MODEL_NAME!r}",
            )  # fmt: skip
        decoded: list[v2.InferRequest] = []

        async def read() -> Any:
            return request

        def parse(message: Any, model: DenseModel) -> Parsed:
            _check_version(message.model_version, model)
            decoded.append(_decode(message))
            data_format = model.meta.get("data_format", "elasticctr")
            return v2.to_parsed(decoded[0], model.space, data_format, self.app.max_instances)

        try:
            prediction, request_id = await self.app.score(read, parse)
        except BadRequest as err:
            raise Failed(err.status, str(err)) from None
        except Unavailable as err:
            raise Failed(503, str(err), Failure(err.cause, str(err))) from None
        context.set_trailing_metadata(((REQUEST_ID_HEADER.lower(), request_id),))
        return _answer(request, prediction, request_id)


def _check_version(version: str, model: DenseModel) -> None:
    if version and version != str(model.version):
        raise Failed(
            404,
            f"model {v2.MODEL_NAME!r} version {version!r:.40} is not served: serving version "
            f"{model.version} (or leave the version out)",
        )


def _authorization(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key.lower() == "authorization":
            return value if isinstance(value, str) else ""
    return ""


def _serialize(message: Any) -> bytes:
    return bytes(message.SerializeToString())


def _decode(message: Any) -> v2.InferRequest:
    """A ModelInferRequest as the REST form's InferRequest; BadRequest naming the problem."""
    if not message.inputs:
        raise BadRequest('"inputs" is empty: nothing to predict')
    raw = list(message.raw_input_contents)
    if raw and len(raw) != len(message.inputs):
        raise BadRequest(
            f"{len(raw)} raw_input_contents for {len(message.inputs)} inputs: give each input "
            "its raw contents, in input order, or none"
        )
    inputs: dict[str, v2.Tensor] = {}
    for n, item in enumerate(message.inputs):
        name = item.name
        if name in inputs:
            raise BadRequest(f"input {name!r} is given twice")
        given = [field.name for field, _ in item.contents.ListFields()]
        if raw and given:
            raise BadRequest(f"input {name!r}: contents and raw_input_contents both given")
        expected = CONTENTS.get(item.datatype)
        if not raw and expected is not None and given not in ([], [expected]):
            raise BadRequest(
                f"input {name!r}: datatype {item.datatype} takes its data in {expected}, "
                f"got {', '.join(given)}"
            )
        values = list(getattr(item.contents, expected)) if expected and not raw else []
        inputs[name] = v2.tensor(
            name, item.datatype, list(item.shape), raw[n] if raw else None, values
        )
    outputs = []
    for item in message.outputs:
        if item.name != v2.OUTPUT:
            raise BadRequest(
                f"unknown output {item.name!r}: the model's one output is {v2.OUTPUT!r}"
            )
        outputs.append(item.name)
    return v2.InferRequest(inputs, message.id or None, True, outputs)


def _answer(request: Any, prediction: Prediction, request_id: str) -> Any:
    scores, given = v2_scores(prediction, request_id)
    parameters = {
        key: pb.InferParameter(int64_param=value)
        if isinstance(value, int)
        else pb.InferParameter(string_param=value)
        for key, value in given.items()
    }
    output = pb.ModelInferResponse.InferOutputTensor(
        name=v2.OUTPUT, datatype="FP32", shape=[len(scores)]
    )
    return pb.ModelInferResponse(
        model_name=v2.MODEL_NAME,
        model_version=str(prediction.version),
        id=request.id,
        parameters=parameters,
        outputs=[output],
        raw_output_contents=[scores.astype("<f4").tobytes()],
    )


class GrpcServer:
    """The service on `host:port`, started and stopped with the HTTP application."""

    def __init__(self, app: ServingApp, host: str, port: int, grace: float) -> None:
        self.app, self.address, self.grace = app, f"{host}:{port}", grace
        self.server: grpc.aio.Server | None = None
        self.port = port

    async def start(self, _: object = None) -> None:
        limit = self.app.max_body_bytes
        self.server = grpc.aio.server(options=[(option, limit) for option in MESSAGE_OPTIONS])
        self.server.add_generic_rpc_handlers((InferenceService(self.app).handler(),))
        self.port = self.server.add_insecure_port(self.address)
        await self.server.start()
        log.info("gRPC (Open Inference Protocol) on port %d", self.port)

    async def stop(self, _: object = None) -> None:
        if self.server is not None:
            await self.server.stop(self.grace)  # calls in flight finish within the grace
