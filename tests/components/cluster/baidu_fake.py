"""A local stand-in for Baidu Cloud's CCE v2 and CCR OpenAPI, for the dynamic providers' tests.

It checks the BCE auth v1 signature of every request with its own implementation of the
algorithm (not bce-python-sdk's), keeps clusters, instance groups and CCR projects in
memory, and moves them through their phases one poll at a time, so that tests can make
creation slow, make it fail with an error text, or inject error replies.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import re
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ACCESS_KEY = "AKTEST0000000001"
SECRET_KEY = "sk-test-0000000000000001"
UNRESERVED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"


def uri_encode(text: str, keep_slash: bool = False) -> str:
    """RFC 3986 encoding as BCE auth v1 specifies it (unreserved characters kept)."""
    keep = UNRESERVED + ("/" if keep_slash else "")
    return "".join(c if c in keep else "".join(f"%{b:02X}" for b in c.encode()) for c in text)


def expected_signature(
    secret_key: str,
    auth_prefix: str,
    method: str,
    path: str,
    query: str,
    headers: dict[str, str],
    signed: list[str],
) -> str:
    signing_key = hmac.new(secret_key.encode(), auth_prefix.encode(), hashlib.sha256).hexdigest()
    pairs = sorted(
        f"{uri_encode(k)}={uri_encode(v)}"
        for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True)
        if k.lower() != "authorization"
    )
    canonical_headers = sorted(f"{uri_encode(h)}:{uri_encode(headers[h].strip())}" for h in signed)
    canonical = "\n".join(
        [
            method,
            uri_encode(urllib.parse.unquote(path), keep_slash=True),
            "&".join(pairs),
            "\n".join(canonical_headers),
        ]
    )
    return hmac.new(signing_key.encode(), canonical.encode(), hashlib.sha256).hexdigest()


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    signature_ok: bool


@dataclass
class FakeBaidu:
    """Server state and knobs; `url` is http://127.0.0.1:<port>."""

    polls_to_run: int = 2  # GETs of a new cluster before it is running
    polls_to_ready: int = 2  # GETs of an instance group before new nodes are ready
    polls_to_delete: int = 1  # GETs after a delete before the API forgets the resource
    fail_cluster_with: str = ""  # the event error text of a cluster that fails to create
    never_ready: bool = False  # clusters stay provisioning forever (timeouts)
    injected: list[tuple[str, int, str, str]] = field(default_factory=list)
    clusters: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    projects: dict[str, dict[str, Any]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    url: str = ""
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def inject(self, method_path: str, status: int, code: str, message: str) -> None:
        """The next request matching `METHOD /path-regex` gets this error reply."""
        self.injected.append((method_path, status, code, message))

    def calls(self, method: str, pattern: str = "") -> list[Seen]:
        return [s for s in self.seen if s.method == method and re.search(pattern, s.path)]

    # --------------------------------------------------------------- dispatch

    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        for index, (rule, status, code, message) in enumerate(self.injected):
            rule_method, rule_path = rule.split(" ", 1)
            if rule_method == method and re.fullmatch(rule_path, path):
                del self.injected[index]
                return status, {"code": code, "message": message, "requestId": "req-injected"}
        routes: list[tuple[str, str, Callable[..., tuple[int, Any]]]] = [
            ("POST", r"/v2/cluster", self._create_cluster),
            ("GET", r"/v2/cluster/(?P<cid>[\w-]+)", self._get_cluster),
            ("DELETE", r"/v2/cluster/(?P<cid>[\w-]+)", self._delete_cluster),
            ("GET", r"/v2/event/cluster/(?P<cid>[\w-]+)", self._cluster_event),
            ("POST", r"/v2/cluster/(?P<cid>[\w-]+)/instancegroup", self._create_group),
            ("GET", r"/v2/cluster/(?P<cid>[\w-]+)/instancegroup/(?P<gid>[\w-]+)", self._get_group),
            (
                "DELETE",
                r"/v2/cluster/(?P<cid>[\w-]+)/instancegroup/(?P<gid>[\w-]+)",
                self._delete_group,
            ),
            (
                "PUT",
                r"/v2/cluster/(?P<cid>[\w-]+)/instancegroup/(?P<gid>[\w-]+)/replicas",
                self._scale_group,
            ),
            (
                "PUT",
                r"/v2/cluster/(?P<cid>[\w-]+)/instancegroup/(?P<gid>[\w-]+)/autoscaler",
                self._autoscale_group,
            ),
            (
                "GET",
                r"/v2/kubeconfig/(?P<cid>[\w-]+)/(?P<kind>public|vpc|internal)",
                self._kubeconfig,
            ),
            ("GET", r"/v1/instances/(?P<iid>[\w-]+)", self._ccr_instance),
            ("POST", r"/v1/instances/(?P<iid>[\w-]+)/projects", self._create_project),
            ("GET", r"/v1/instances/(?P<iid>[\w-]+)/projects/(?P<name>[\w-]+)", self._get_project),
            (
                "DELETE",
                r"/v1/instances/(?P<iid>[\w-]+)/projects/(?P<name>[\w-]+)",
                self._delete_project,
            ),
        ]
        for route_method, pattern, handler in routes:
            match = re.fullmatch(pattern, path)
            if route_method == method and match:
                with self._lock:
                    return handler(query=query, body=body, **match.groupdict())
        return 404, _error("NoSuchApi", f"{method} {path} is not an API")

    # --------------------------------------------------------------- clusters

    def _create_cluster(self, query: dict[str, str], body: Any) -> tuple[int, Any]:
        spec = body.get("cluster", {})
        master = spec.get("masterConfig", {})
        missing = [k for k in ("clusterName", "k8sVersion", "vpcID") if not spec.get(k)]
        if missing or master.get("masterType") != "managed":
            return 400, _error("InvalidParam", f"cluster spec lacks {missing or 'masterType'}")
        cid = f"cce-{next(self._ids):08d}"
        self.clusters[cid] = {
            "spec": {**spec, "clusterID": cid},
            "phase": "provisioning",
            "polls": 0,
            "deleting_polls": None,
        }
        return 200, {"clusterID": cid, "requestID": "req-1"}

    def _get_cluster(self, query: dict[str, str], body: Any, cid: str) -> tuple[int, Any]:
        cluster = self.clusters.get(cid)
        if cluster is None:
            return 404, _error("ClusterNotFound", f"cluster {cid} not found")
        if cluster["deleting_polls"] is not None:
            cluster["deleting_polls"] += 1
            if cluster["deleting_polls"] > self.polls_to_delete:
                del self.clusters[cid]
                return 404, _error("ClusterNotFound", f"cluster {cid} not found")
        elif cluster["phase"] == "provisioning":
            cluster["polls"] += 1
            if self.fail_cluster_with:
                cluster["phase"] = "create_failed"
            elif not self.never_ready and cluster["polls"] >= self.polls_to_run:
                cluster["phase"] = "running"
        status = {"clusterPhase": cluster["phase"], "nodeNum": 0}
        return 200, {"cluster": {"spec": cluster["spec"], "status": status}, "requestID": "r"}

    def _delete_cluster(self, query: dict[str, str], body: Any, cid: str) -> tuple[int, Any]:
        if cid not in self.clusters:
            return 404, _error("ClusterNotFound", f"cluster {cid} not found")
        self.clusters[cid]["phase"] = "deleting"
        self.clusters[cid]["deleting_polls"] = 0
        self.clusters[cid]["delete_query"] = query
        return 200, {"requestID": "r"}

    def _cluster_event(self, query: dict[str, str], body: Any, cid: str) -> tuple[int, Any]:
        steps = [{"stepName": "CreateMaster", "stepStatus": "done"}]
        if self.fail_cluster_with:
            steps.append(
                {"stepName": "CreateBLB", "stepStatus": "failed", "errMsg": self.fail_cluster_with}
            )
        return 200, {
            "status": "create_failed" if self.fail_cluster_with else "creating",
            "steps": steps,
            "requestID": "r",
        }

    def _kubeconfig(self, query: dict[str, str], body: Any, cid: str, kind: str) -> tuple[int, Any]:
        if cid not in self.clusters:
            return 404, _error("ClusterNotFound", f"cluster {cid} not found")
        return 200, {"kubeConfigType": kind, "kubeConfig": f"apiVersion: v1\n# {cid} {kind}\n"}

    # --------------------------------------------------------------- instance groups

    def _create_group(self, query: dict[str, str], body: Any, cid: str) -> tuple[int, Any]:
        if cid not in self.clusters or self.clusters[cid]["phase"] != "running":
            return 409, _error("ClusterNotRunning", f"cluster {cid} is not running")
        template = body.get("instanceTemplate", {})
        if not template.get("instanceResource", {}).get("machineSpec"):
            return 400, _error("InvalidParam", "instanceTemplate.instanceResource.machineSpec")
        gid = f"cce-ig-{next(self._ids):08d}"
        spec = {**body, "cceInstanceGroupID": gid, "clusterID": cid}
        self.groups[gid] = {"spec": spec, "ready": 0, "polls": 0, "deleting_polls": None}
        return 200, {"instanceGroupID": gid, "requestID": "r"}

    def _group(self, cid: str, gid: str) -> dict[str, Any] | None:
        group = self.groups.get(gid)
        return group if group and group["spec"]["clusterID"] == cid else None

    def _get_group(self, query: dict[str, str], body: Any, cid: str, gid: str) -> tuple[int, Any]:
        group = self._group(cid, gid)
        if group is None:
            return 404, _error("InstanceGroupNotFound", f"instance group {gid} not found")
        if group["deleting_polls"] is not None:
            group["deleting_polls"] += 1
            if group["deleting_polls"] > self.polls_to_delete:
                del self.groups[gid]
                return 404, _error("InstanceGroupNotFound", f"instance group {gid} not found")
        else:
            group["polls"] += 1
            if group["polls"] >= self.polls_to_ready:
                group["ready"] = group["spec"]["replicas"]
        status = {"readyReplicas": group["ready"]}
        return 200, {"instanceGroup": {"spec": group["spec"], "status": status}, "requestID": "r"}

    def _scale_group(self, query: dict[str, str], body: Any, cid: str, gid: str) -> tuple[int, Any]:
        group = self._group(cid, gid)
        if group is None:
            return 404, _error("InstanceGroupNotFound", f"instance group {gid} not found")
        group["spec"]["replicas"] = int(body["replicas"])
        group["polls"] = 0
        return 200, {"requestID": "r"}

    def _autoscale_group(
        self, query: dict[str, str], body: Any, cid: str, gid: str
    ) -> tuple[int, Any]:
        group = self._group(cid, gid)
        if group is None:
            return 404, _error("InstanceGroupNotFound", f"instance group {gid} not found")
        group["spec"]["clusterAutoscalerSpec"] = body
        return 200, {"requestID": "r"}

    def _delete_group(
        self, query: dict[str, str], body: Any, cid: str, gid: str
    ) -> tuple[int, Any]:
        group = self._group(cid, gid)
        if group is None:
            return 404, _error("InstanceGroupNotFound", f"instance group {gid} not found")
        group["deleting_polls"] = 0
        group["delete_query"] = query
        return 200, {"requestID": "r"}

    # --------------------------------------------------------------- CCR

    def _ccr_instance(self, query: dict[str, str], body: Any, iid: str) -> tuple[int, Any]:
        return 200, {
            "info": {
                "id": iid,
                "status": "Running",
                "publicURL": f"https://{iid}-pub.cnc.bj.baidubce.com",
            }
        }

    def _create_project(self, query: dict[str, str], body: Any, iid: str) -> tuple[int, Any]:
        name = body["projectName"]
        if f"{iid}/{name}" in self.projects:
            return 409, _error("ProjectAlreadyExists", f"project {name} exists")
        self.projects[f"{iid}/{name}"] = {
            "projectName": name,
            "public": body.get("public", "false"),
        }
        return 200, self.projects[f"{iid}/{name}"]

    def _get_project(
        self, query: dict[str, str], body: Any, iid: str, name: str
    ) -> tuple[int, Any]:
        project = self.projects.get(f"{iid}/{name}")
        return (200, project) if project else (404, _error("ProjectNotFound", name))

    def _delete_project(
        self, query: dict[str, str], body: Any, iid: str, name: str
    ) -> tuple[int, Any]:
        if self.projects.pop(f"{iid}/{name}", None) is None:
            return 404, _error("ProjectNotFound", name)
        return 200, {}


def _error(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message, "requestId": f"req-{code.lower()}"}


def check_authorization(method: str, raw_path: str, headers: dict[str, str]) -> str:
    """ "" if the request's BCE v1 signature is right, else why not."""
    auth = headers.get("authorization", "")
    parts = auth.split("/")
    if len(parts) != 6 or parts[0] != "bce-auth-v1":
        return f"malformed authorization {auth!r}"
    _, access_key, timestamp, expiration, signed_headers, signature = parts
    if access_key != ACCESS_KEY:
        return f"unknown access key {access_key}"
    signed = signed_headers.split(";") if signed_headers else ["host"]
    if "host" not in signed or any(h not in headers for h in signed):
        return f"signed headers {signed} missing from the request"
    issued = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    if (
        not issued - timedelta(minutes=5)
        <= datetime.now(UTC)
        <= issued + timedelta(seconds=int(expiration))
    ):
        return f"signature expired or from the future ({timestamp}, {expiration}s)"
    path, _, query = raw_path.partition("?")
    prefix = f"bce-auth-v1/{access_key}/{timestamp}/{expiration}"
    wanted = expected_signature(SECRET_KEY, prefix, method, path, query, headers, signed)
    return "" if hmac.compare_digest(wanted, signature) else "signature does not match"


def serve(fake: FakeBaidu) -> ThreadingHTTPServer:
    """Start the fake on a free loopback port (daemon thread); stop with .shutdown()."""

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            problem = check_authorization(self.command, self.path, headers)
            path, _, query_text = self.path.partition("?")
            query = dict(urllib.parse.parse_qsl(query_text))
            body = json.loads(raw) if raw else None
            fake.seen.append(Seen(self.command, path, query, body, not problem))
            if problem:
                status, reply = 401, _error("SignatureDoesNotMatch", problem)
            else:
                status, reply = fake.handle(self.command, path, query, body)
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _any

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server
