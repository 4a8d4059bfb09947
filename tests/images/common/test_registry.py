"""MLflow's model registry as the trainer and cube-transfer use it, against a real MLflow
server: a version registered once however often it is asked, the serving alias moved, and
failures reported as RegistryError (never anything else)."""

from __future__ import annotations

import uuid

import pytest
from elasticctr_common.ports import free_port
from elasticctr_common.registry import ModelRegistry, RegistryError

pytestmark = pytest.mark.slow


@pytest.fixture
def registry(mlflow_server) -> ModelRegistry:
    return ModelRegistry(mlflow_server.tracking_uri, f"elasticctr-{uuid.uuid4().hex[:8]}")


def test_a_version_is_registered_once_and_the_alias_follows(registry):
    first = registry.register(5, "s3://bucket/models/5", tags={"eval_auc": "0.79"})
    assert registry.register(5, "s3://bucket/models/5") == first  # a retried publish
    second = registry.register(6, "s3://bucket/models/6")
    assert (registry.find(5), registry.find(6), registry.find(7)) == (first, second, None)
    assert registry.alias() is None
    assert registry.set_alias(6) == second and registry.alias() == 6
    assert registry.set_alias(5) == first and registry.alias() == 5  # a rollback


def test_failures_are_registry_errors_that_say_what(registry, mlflow_server):
    with pytest.raises(
        RegistryError, match=f"version 9 of {registry.model_name} is not registered"
    ):
        registry.set_alias(9)
    # MLflow refuses a local source outside a run's artifacts (the demo's file:// store).
    with pytest.raises(RegistryError, match="INVALID_PARAMETER_VALUE"):
        registry.register(1, "file:///tmp/models/1")
    down = ModelRegistry(f"http://127.0.0.1:{free_port()}", "x", timeout=2)
    with pytest.raises(RegistryError, match="model-versions/search"):
        down.find(1)


def test_the_registry_of_an_environment():
    assert ModelRegistry.from_env({}) is None
    assert ModelRegistry.from_env({"MLFLOW_TRACKING_URI": "http://mlflow:5000"}) is None
    env = {"MLFLOW_TRACKING_URI": "http://mlflow:5000", "ELASTICCTR_REGISTERED_MODEL": "ctr"}
    plain = ModelRegistry.from_env(env)
    assert plain is not None and (plain.model_name, plain.headers) == ("ctr", {})
    token = ModelRegistry.from_env(env | {"MLFLOW_TRACKING_TOKEN": "t0k"}, "other")
    assert token is not None and token.model_name == "other"
    assert token.headers == {"Authorization": "Bearer t0k"}
    basic = ModelRegistry.from_env(
        env | {"MLFLOW_TRACKING_USERNAME": "u", "MLFLOW_TRACKING_PASSWORD": "p"}
    )
    assert basic is not None and basic.headers == {"Authorization": "Basic dTpw"}
    with pytest.raises(ValueError, match="http"):
        ModelRegistry("databricks", "ctr")
