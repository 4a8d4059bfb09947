"""Each served version's online quality reaches the MLflow run that trained it (the
joiner's OnlineReporter), against a real MLflow server, read back with MLflow's own client:
metric history by step = version; a version not registered is skipped; an MLflow that
does not answer is reported in `last_error`, never raised."""

from __future__ import annotations

import math
import time
import uuid

import pytest
from elasticctr_common.online_eval import Quality
from elasticctr_common.ports import free_port
from elasticctr_common.registry import ModelRegistry
from elasticctr_joiner.report import OnlineReporter, run_metrics

pytestmark = pytest.mark.slow


def test_each_versions_online_quality_goes_to_its_training_run(mlflow_server) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_server.tracking_uri)
    name = f"elasticctr-{uuid.uuid4().hex[:8]}"
    run = client.create_run(client.create_experiment(name)).info.run_id
    registry = ModelRegistry(mlflow_server.tracking_uri, name)
    registry.register(5, "s3://bucket/models/5", run_id=run)
    assert registry.run_of(5) == run and registry.run_of(6) is None
    reporter = OnlineReporter(registry)
    try:
        good = Quality(examples=1200, clicks=48, auc=0.74, calibration=1.03, log_loss=0.15)
        one_class = Quality(examples=10, clicks=0, auc=math.nan, calibration=math.nan,
                            log_loss=0.02)  # fmt: skip
        reporter.report({5: good, 6: good})  # 6 is not registered (yet): skipped
        reporter.submit({5: one_class})  # the thread reports the newest figures
        deadline = time.monotonic() + 30
        while reporter.reported.get(5, 0) < 2:
            assert time.monotonic() < deadline, reporter.status()
            time.sleep(0.1)
    finally:
        reporter.stop()
    history = client.get_metric_history(run, "online_auc")
    assert [(m.step, m.value) for m in history] == [(5, 0.74)]  # NaN is left out
    losses = client.get_metric_history(run, "online_log_loss")
    assert sorted((m.step, m.value) for m in losses) == [(5, 0.02), (5, 0.15)]
    examples = client.get_metric_history(run, "online_examples")
    assert sorted(m.value for m in examples) == [10.0, 1200.0]
    assert reporter.status()["runs"] == {"5": run} and reporter.last_error == ""
    assert 6 not in reporter.reported


def test_an_mlflow_that_does_not_answer_is_said_not_raised() -> None:
    down = ModelRegistry(f"http://127.0.0.1:{free_port()}", "ctr", timeout=2)
    reporter = OnlineReporter(down)
    try:
        reporter.report({3: Quality(100, 5, 0.7, 1.0, 0.2)})
    finally:
        reporter.stop()
    assert reporter.last_error.startswith("version 3: MLflow model-versions/search")
    assert reporter.reported == {}


def test_run_metrics_leave_out_what_is_undefined() -> None:
    figures = run_metrics(Quality(10, 0, math.nan, math.nan, 0.3))
    assert figures == {"online_examples": 10.0, "online_clicks": 0.0, "online_log_loss": 0.3}


def test_mlflows_page_charts_each_versions_online_quality(mlflow_server) -> None:
    """The page a person looks at: MLflow's own UI, in a real headless browser, charts the
    figures the reporter logged, version by version (step = version); its screenshot is
    kept with the run's artifacts (tests/support/browser.py)."""
    from mlflow.tracking import MlflowClient
    from PIL import Image

    from tests.support.browser import render

    client = MlflowClient(mlflow_server.tracking_uri)
    name = f"elasticctr-{uuid.uuid4().hex[:8]}"
    experiment = client.create_experiment(name)
    run = client.create_run(experiment).info.run_id  # an online job's run: many versions
    registry = ModelRegistry(mlflow_server.tracking_uri, name)
    figures = {1: 0.71, 2: 0.745, 3: 0.69}
    for version in figures:
        registry.register(version, f"s3://bucket/models/{version}", run_id=run)
    reporter = OnlineReporter(registry)
    try:
        reporter.report(
            {v: Quality(1000 * v, 40 * v, auc, 1 + v / 50, 0.15) for v, auc in figures.items()}
        )
    finally:
        reporter.stop()
    assert reporter.last_error == "", reporter.last_error
    history = client.get_metric_history(run, "online_auc")
    assert sorted((m.step, m.value) for m in history) == sorted(figures.items())

    page = f"{mlflow_server.tracking_uri}/#/experiments/{experiment}/runs/{run}/model-metrics"
    dom, screenshot = render(page, "mlflow-online-quality.png")
    for metric in run_metrics(Quality(1000, 40, 0.7, 1.0, 0.15)):
        assert f">{metric}<" in dom, f"MLflow's page shows no chart titled {metric}"
    assert ">Step<" in dom  # charted by step: the version
    image = Image.open(screenshot)
    assert image.size == (1400, 1000)
    assert len(image.convert("L").getcolors(256) or ()) > 16  # a page was drawn, not a blank
