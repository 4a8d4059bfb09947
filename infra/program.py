"""The ElasticCTR environment: stack config -> cluster -> components -> stack outputs.

One rule maps the config to the components: a component's args take its section's
settings field by field, under the same names (`cpu=config.cube.cpu`), beside what the
program derives (images, stores, routes, secrets as Outputs). Args restate no default:
each is written once, in infra/config.py. trainer.json's settings are the exception that
has a rule of its own (`trainer_settings`: by the field's name in the contract).
"""

from __future__ import annotations

from typing import Any

import pulumi
from elasticctr_common.contract import NETWORK_FILE
from elasticctr_common.lines import DenseFeature
from elasticctr_common.metrics import ENDPOINTS
from elasticctr_common.trainer_json import HyperParameters, Runner, section_of

from components.bucket_access import BucketUser
from components.cluster import ClusterResult
from components.cube import SHARD_ACCOUNT, TRANSFER_ACCOUNT, CanaryArgs, Cube, CubeArgs
from components.hdfs import Hdfs, HdfsArgs, client_routes
from components.joiner import SERVICE_ACCOUNT as JOINER_ACCOUNT
from components.joiner import Joiner, JoinerArgs
from components.joiner import status_url as joiner_status_url
from components.kafka import Kafka, KafkaArgs
from components.kube import KubeTarget
from components.mlflow import SERVICE_ACCOUNT as MLFLOW_ACCOUNT
from components.mlflow import Mlflow, MlflowArgs, RegistryClient
from components.namespace import Namespace, NamespaceArgs
from components.network import Route
from components.object_storage import ObjectStorage, ObjectStorageArgs
from components.prometheus import Prometheus, PrometheusArgs
from components.serving import AUTH_SECRET, TOKEN_KEY, Serving, ServingArgs
from components.serving import SERVICE_ACCOUNT as SERVING_ACCOUNT
from components.training import SERVICE_ACCOUNT as TRAINING_ACCOUNT
from components.training import Training, TrainingArgs
from components.volcano import Volcano, VolcanoArgs
from infra import capacity, guard, load_config, outputs, preflight
from infra.access import bucket_users, joins_into_bucket, workload_keys
from infra.clusters import build_cluster
from infra.config import PROGRAM_SETTINGS, StackConfig
from infra.images import project_images
from infra.load_config import as_secret
from infra.volcano_chart import go_module_chart


def trainer_settings(config: StackConfig) -> tuple[HyperParameters, dict[str, Any]]:
    """trainer.json's model and the runner's settings the stack decides. A training key
    goes to the part that has a field of its name: a new setting needs no line here, and
    a key that neither part (nor PROGRAM_SETTINGS) knows fails at preview."""
    training = config.training.model_dump(exclude=set(PROGRAM_SETTINGS))
    data = config.data
    runner = {k: v for k, v in training.items() if section_of(k) == "runner"} | {
        "start_date_hr": data.start,
        # Online follows new hours for good (data.end is for offline passes only).
        "end_date_hr": data.end if config.training.mode == "offline" else None,
        "data_wait_seconds": data.wait_minutes * 60,
        "online_poll_seconds": data.poll_seconds,
        "data_format": data.format,
        # With the feedback loop the job follows the joiner's partitions.
        "partition_minutes": (
            config.feedback.partition_minutes
            if config.feedback.enabled
            else Runner.partition_minutes
        ),
    }
    model = {k: v for k, v in training.items() if section_of(k) == "hyper_parameters"}
    # A .py file of the project is mounted in the pods (the training ConfigMap); a module
    # name is the trainer image's.
    module = model["network_module"]
    model["network_module"] = NETWORK_FILE if module.endswith(".py") else module or None
    dense = [DenseFeature(f.name, f.dim) for f in data.dense_features]
    return HyperParameters(sparse_dim=data.sparse_dim, dense_features=dense, **model), runner


def _storage_args(
    config: StackConfig, cluster: ClusterResult, target: KubeTarget, users: tuple[BucketUser, ...]
) -> ObjectStorageArgs:
    """The bucket the cloud made (storage mode cloud), or the one the config names."""
    if cluster.bucket is not None:
        bucket = cluster.bucket
        return ObjectStorageArgs(
            target=target,
            mode="external",
            bucket=bucket.bucket,
            region=bucket.region,
            endpoint=bucket.endpoint,
            users=users,
            access_key=bucket.access_key,
            secret_key=bucket.secret_key,
            user_keys=workload_keys(config),
            identity_routes=bucket.identity_routes,
        )
    # Mode cloud always comes with a cloud bucket (the config checks cloud != existing).
    assert config.storage.mode != "cloud"
    return ObjectStorageArgs(
        target=target,
        mode="minio" if config.storage.mode == "minio" else "external",
        bucket=config.storage.bucket,
        region=config.storage.region,
        endpoint=config.storage.endpoint,
        users=users,
        access_key=as_secret(config.storage.access_key),
        secret_key=as_secret(config.storage.secret_key),
        user_keys=workload_keys(config),
        minio_image=config.images.minio,
        minio_resources=(config.storage.size, config.storage.cpu, config.storage.mem),
    )


def main() -> None:
    # Every config problem is reported here, before any resource is registered.
    loaded = load_config.load()
    config: StackConfig = loaded.stack
    # ...and what it names in a cluster that exists already (a Volcano queue, node pools).
    missing = preflight.check_cluster(config)
    if missing:
        raise load_config.ConfigError(missing)
    # Changes a running stack cannot take safely are refused here too (infra/guard.py).
    stack_shape = guard.check(loaded)
    # Every pod registered from here on is counted, to compare with the cluster's room.
    tally = capacity.Tally()
    tally.start()
    volcano_chart = go_module_chart() if config.volcano.chart == "go-module" else None
    users = bucket_users(config)
    cluster = build_cluster(config, users)
    images = project_images(config, cluster)
    skip_await = config.cluster.skip_await

    namespace = Namespace(
        "namespace",
        NamespaceArgs(
            target=KubeTarget(
                provider=cluster.provider,
                namespace=config.namespace,
                image_pull_policy=config.images.pull_policy,
                skip_await=skip_await,
            ),
            slot_conf=loaded.slot_conf_text,
            create=config.create_namespace,
        ),
    )
    target = namespace.target

    scheduler: tuple[pulumi.Resource, ...] = ()
    if not (config.volcano.managed or cluster.volcano_managed):
        volcano = Volcano(
            "volcano",
            VolcanoArgs(
                provider=cluster.provider,
                wait_for_ready=not skip_await,
                chart_path=volcano_chart,
                image_registry=config.volcano.image_registry,
                image_pull_policy=config.images.pull_policy,
                queue=config.training.queue,
            ),
        )
        scheduler = (volcano.ready,)

    storage = ObjectStorage("storage", _storage_args(config, cluster, target, users))
    stores = storage.stores  # each workload's own credentials

    hdfs_address: pulumi.Output[str] = pulumi.Output.from_input("")
    services: tuple[Route, ...] = ()  # what trainers reach besides pservers and the bucket
    if config.hdfs.mode != "none":
        services += client_routes(config.hdfs.mode, config.hdfs.address, config.hdfs.datanode_port)
        hdfs_address = Hdfs(
            "hdfs",
            HdfsArgs(
                target=target,
                mode=config.hdfs.mode,
                address=config.hdfs.address,
                image=config.images.hadoop,
                datanodes=config.hdfs.datanodes,
                replication=config.hdfs.replication,
                namenode_storage=config.hdfs.namenode_storage,
                datanode_storage=config.hdfs.datanode_storage,
                cpu=config.hdfs.cpu,
                mem=config.hdfs.mem,
                clients=("trainer", "joiner") if config.feedback.enabled else ("trainer",),
            ),
        ).address

    mlflow_url: pulumi.Output[str] | None = None
    registry: RegistryClient | None = None
    if config.mlflow.enabled:
        mlflow = Mlflow(
            "mlflow",
            MlflowArgs(
                target=target,
                image=images["mlflow"],
                store=stores[MLFLOW_ACCOUNT],
                storage=config.mlflow.storage,
                cpu=config.mlflow.cpu,
                mem=config.mlflow.mem,
                # Trainers log runs, cube-transfer moves the serving alias, the joiner
                # logs each version's online quality.
                clients=(
                    "trainer",
                    "cube-transfer",
                    *(("joiner",) if config.feedback.enabled else ()),
                ),
            ),
        )
        mlflow_url = mlflow.url
        services += mlflow.client_routes
        # Each published version registered under the job's name (its MLflow experiment).
        registry = RegistryClient(mlflow.url, config.training.job_name)

    cube = Cube(
        "cube",
        CubeArgs(
            target=target,
            image=images["cube"],
            store=stores[SHARD_ACCOUNT],
            transfer_store=stores[TRANSFER_ACCOUNT],
            shards=config.cube_shards,
            replicas=config.cube.replicas,
            timeout_ms=config.cube.timeout_ms,
            retry=config.cube.retry,
            backup_request_ms=config.cube.backup_request_ms,
            load_balancer=config.cube.load_balancer,
            cpu=config.cube.cpu,
            mem=config.cube.mem,
            storage=config.cube.storage,
            keep_versions=config.cube.keep_versions,
            base_every=config.cube.base_every,
            max_chain_fraction=config.cube.max_chain_fraction,
            transfer_cpu=config.cube.transfer_cpu,
            transfer_mem=config.cube.transfer_mem,
            node_pool=config.cube.node_pool,
            priority_class=config.cube.priority_class,
            registry=registry,
            canary=CanaryArgs(
                fraction=config.canary.fraction,
                margin=config.canary.margin,
                confidence=config.canary.confidence,
                min_clicks=config.canary.min_clicks,
                max_seconds=config.canary.max_minutes * 60,
                joiner_url=joiner_status_url(target.namespace),
            )
            if config.canary.enabled
            else None,
        ),
    )

    def data_uri(path: str) -> pulumi.Output[str]:
        """A path of the training data's source (HDFS or the bucket) as a URI."""
        relative = path.strip("/")
        if config.data.source == "hdfs":
            return hdfs_address.apply(lambda address: f"{address}/{relative}")
        return pulumi.Output.from_input(stores[TRAINING_ACCOUNT].uri(relative))

    train_data_uri = data_uri(config.data.dataset_path)
    eval_path = config.training.eval_path
    hyper_parameters, runner_settings = trainer_settings(config)
    training = Training(
        "training",
        TrainingArgs(
            target=target,
            image=images["trainer"],
            store=stores[TRAINING_ACCOUNT],
            slot_conf_map=namespace.slot_conf_map,
            network_text=loaded.network_text,
            job_name=config.training.job_name,
            trainers=config.trainers,
            pservers=config.pservers,
            cpu=config.training.cpu,
            mem=config.training.mem,
            train_data_uri=train_data_uri,
            eval_data_uri=data_uri(eval_path) if eval_path else None,
            hyper_parameters=hyper_parameters,
            runner_settings=runner_settings,
            queue=config.training.queue,
            node_pool=config.training.node_pool,
            priority_class=config.training.priority_class,
            hdfs_ugi=as_secret(config.data.ugi),
            mlflow_url=mlflow_url,
            services=services,
            depends_on=scheduler,
        ),
    )

    feedback = config.feedback
    kafka: Kafka | None = None
    joiner_url: pulumi.Input[str] = ""
    if feedback.enabled:
        k = feedback.kafka
        kafka = Kafka(
            "kafka",
            KafkaArgs(
                target=target,
                mode=k.mode,
                impressions_topic=k.impressions_topic,
                clicks_topic=k.clicks_topic,
                image=config.images.kafka,
                storage=k.storage,
                cpu=k.cpu,
                mem=k.mem,
                retention_hours=k.retention_hours,
                priority_class=feedback.priority_class,
                bootstrap_servers=k.bootstrap_servers,
                security_protocol=k.security_protocol,
                sasl_mechanism=k.sasl_mechanism,
                username=as_secret(k.username),
                password=as_secret(k.password),
                ca_cert=k.ca_cert,
            ),
        )
        into_bucket = joins_into_bucket(config)
        hdfs_mode = config.hdfs.mode
        assert into_bucket or hdfs_mode != "none"  # data.source hdfs needs an HDFS (config)
        joiner_url = Joiner(
            "joiner",
            JoinerArgs(
                target=target,
                image=images["serving"],
                kafka=kafka.client,
                dataset_uri=train_data_uri,
                partition_minutes=feedback.partition_minutes,
                join_window=feedback.join_window,
                topic_partitions=k.topic_partitions,
                cpu=feedback.joiner_cpu,
                mem=feedback.joiner_mem,
                store=stores[JOINER_ACCOUNT] if into_bucket else None,
                data_routes=(
                    stores[JOINER_ACCOUNT].routes
                    if into_bucket
                    else client_routes(
                        "external" if hdfs_mode == "external" else "in-cluster",
                        config.hdfs.address,
                        config.hdfs.datanode_port,
                    )
                ),
                hdfs_ugi=None if into_bucket else as_secret(config.data.ugi),
                priority_class=feedback.priority_class,
                registry=registry,
                status_clients=("cube-transfer",) if config.canary.enabled else (),
            ),
        ).url

    serving = Serving(
        "serving",
        ServingArgs(
            target=target,
            image=images["serving"],
            store=stores[SERVING_ACCOUNT],
            slot_conf_map=namespace.slot_conf_map,
            cube_conf_map=cube.config_map,
            cube_conf_hash=cube.config_hash,
            cube_transfer_url=cube.transfer_url,
            cube_routes=cube.client_routes,
            cube_shards=tuple(cube.shard_sets),
            sparse_dim=config.data.sparse_dim,
            replicas=config.serving.replicas,
            max_replicas=config.serving.max_replicas,
            target_cpu_percent=config.serving.target_cpu_percent,
            cpu=config.serving.cpu,
            mem=config.serving.mem,
            service_type=config.serving.service_type,
            node_pool=config.serving.node_pool,
            priority_class=config.serving.priority_class,
            source_ranges=tuple(config.serving.source_ranges),
            auth=config.serving.auth == "token",
            service_annotations=(
                cluster.load_balancer_annotations
                if config.serving.service_type == "LoadBalancer"
                else None
            ),
            feedback=kafka.client if kafka is not None else None,
            feedback_sample_rate=feedback.sample_rate,
            feedback_buffer_records=feedback.buffer_records,
            feedback_compression=feedback.compression,
        ),
    )

    monitoring = config.monitoring
    prometheus_url: pulumi.Input[str] = ""
    if monitoring.prometheus != "off":
        prometheus_url = Prometheus(
            "prometheus",
            PrometheusArgs(
                target=target,
                prometheus=monitoring.prometheus,
                operator=monitoring.operator,
                scraper_namespace=monitoring.scraper_namespace,
                scrape_interval=monitoring.scrape_interval,
                retention=monitoring.retention,
                storage=monitoring.storage,
                cpu=monitoring.cpu,
                mem=monitoring.mem,
                priority_class=monitoring.priority_class,
                api_server_ports=(
                    preflight.api_server_ports(config)
                    if monitoring.prometheus == "in-cluster"
                    else ()
                ),
                processes=tuple(p for p in ENDPOINTS if p != "joiner" or feedback.enabled),
                image=config.images.prometheus,
                serving_token=(AUTH_SECRET, TOKEN_KEY) if serving.token is not None else None,
                alert_for=monitoring.alert_for,
            ),
            pulumi.ResourceOptions(depends_on=[serving]),
        ).url

    pulumi.export(outputs.NAMESPACE, namespace.name)
    pulumi.export(outputs.SERVING_URL, serving.url)
    pulumi.export(outputs.SERVING_GRPC, serving.grpc_address)
    if serving.token is not None:
        pulumi.export(outputs.SERVING_TOKEN, serving.token)
    pulumi.export(outputs.MLFLOW_URL, mlflow_url or "")
    pulumi.export(outputs.JOINER_URL, joiner_url)
    pulumi.export(outputs.PROMETHEUS_URL, prometheus_url)
    pulumi.export(outputs.BUCKET, storage.bucket)
    pulumi.export(outputs.STORAGE_ENDPOINT, storage.endpoint)
    pulumi.export(outputs.HDFS_ADDRESS, hdfs_address)
    pulumi.export(outputs.TRAINING_JOB, training.job_name)
    pulumi.export(outputs.TRAINER0_LOGS, training.trainer0_logs)
    pulumi.export(outputs.CUBE_SHARDS, cube.shards)
    pulumi.export(outputs.CUBE_LAYOUT, cube.layout)
    pulumi.export(outputs.CUBE_TRANSFER_URL, cube.transfer_url)
    if cluster.kubeconfig is not None:
        pulumi.export(outputs.KUBECONFIG, pulumi.Output.secret(cluster.kubeconfig))
    pulumi.export(guard.SHAPE_OUTPUT, stack_shape)
    preflight.check_capacity(config, tally)
