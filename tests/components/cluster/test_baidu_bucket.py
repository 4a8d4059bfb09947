"""The BOS bucket's dynamic provider against an S3 API (moto): BOS is reached through its
S3-compatible endpoint, so any S3 server stands in for it here."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from components.cluster.baidu.bos import _BucketProvider
from components.cluster.baidu.openapi import ACCESS_KEY_ENV, SECRET_KEY_ENV
from tests.support.services import S3Server


@pytest.fixture
def props(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    # The deployer's Baidu keys; moto takes any.
    monkeypatch.setenv(ACCESS_KEY_ENV, s3_server.access_key)
    monkeypatch.setenv(SECRET_KEY_ENV, s3_server.secret_key)
    return {
        "endpoint": s3_server.endpoint_url,
        "region": s3_server.region,
        "bucket": "elasticctr-bos-test",
    }


def test_bucket_create_read_delete(s3_server: S3Server, props: dict[str, Any]) -> None:
    provider = _BucketProvider()
    created = provider.create(props)
    assert created.id == "elasticctr-bos-test"
    assert provider.read(created.id, props).id == created.id
    provider.delete(created.id, props)
    assert provider.read(created.id, props).id == ""  # gone: refresh drops it
    provider.delete(created.id, props)  # deleting a missing bucket is done already


def test_a_bucket_with_models_is_not_deleted(s3_server: S3Server, props: dict[str, Any]) -> None:
    provider = _BucketProvider()
    created = provider.create({**props, "bucket": "elasticctr-bos-kept"})
    s3_server.client().put_object(Bucket=created.id, Key="models/donefile", Body=b"{}")
    with pytest.raises(ClientError, match="BucketNotEmpty"):
        provider.delete(created.id, props)
    assert provider.read(created.id, props).id == created.id


def test_only_a_new_name_or_endpoint_replaces_the_bucket(props: dict[str, Any]) -> None:
    provider = _BucketProvider()
    assert not provider.diff("b", props, dict(props)).changes
    assert provider.diff("b", props, {**props, "bucket": "other"}).replaces == ["bucket"]
