"""A project (namespace) in a CCR enterprise instance, as a Pulumi dynamic resource, over the
CCR OpenAPI (https://ccr.<region>.baidubce.com/v1/instances/<id>/projects).

The instance itself is bought by hand (prepaid, docs/clouds.md); the stack owns the project.
The project is public: the pods carry no imagePullSecrets, so nodes pull anonymously.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider

from components.cluster.baidu.openapi import OpenApi


class _ProjectProvider(ResourceProvider):
    def _registry(self, api: OpenApi, props: dict[str, Any]) -> str:
        """<instance's public host>/<project>: what image references start with."""
        info = api.call("GET", f"/v1/instances/{props['instance_id']}")["info"]
        url = str(info["publicURL"])
        host = urllib.parse.urlsplit(url).netloc or url
        return f"{host}/{props['project']}"

    def create(self, props: dict[str, Any]) -> CreateResult:
        api = OpenApi(str(props["endpoint"]))
        api.call(
            "POST",
            f"/v1/instances/{props['instance_id']}/projects",
            body={"projectName": props["project"], "public": "true"},
        )
        ident = f"{props['instance_id']}/{props['project']}"
        return CreateResult(ident, {**props, "registry": self._registry(api, props)})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        api = OpenApi(str(props["endpoint"]))
        project = api.find(
            "GET", f"/v1/instances/{props['instance_id']}/projects/{props['project']}"
        )
        if project is None:
            return ReadResult("", {})
        live = {"public": project.get("public") == "true"}
        return ReadResult(id_, {**props, **live, "registry": self._registry(api, props)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        keys = ("endpoint", "instance_id", "project")
        replaces = [key for key in keys if olds.get(key) != news.get(key)]
        # `public` drifted (changed in the console): replacing restores it.
        if olds.get("public") is False:
            replaces.append("public")
        return DiffResult(changes=bool(replaces), replaces=replaces, delete_before_replace=True)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        api = OpenApi(str(props["endpoint"]))
        # Already gone (404) is as good as deleted.
        api.find("DELETE", f"/v1/instances/{props['instance_id']}/projects/{props['project']}")


class CcrProject(Resource, module="baidu", name="CcrProject"):
    registry: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        endpoint: str,
        instance_id: str,
        project: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            _ProjectProvider(),
            name,
            {
                "endpoint": endpoint,
                "instance_id": instance_id,
                "project": project,
                "public": True,
                "registry": None,
            },
            opts,
        )
