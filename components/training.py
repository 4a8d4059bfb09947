"""The training job: a Volcano Job with a `pserver` task and a `trainer` task running Paddle
fleet's asynchronous parameter server (docs/architecture.md, "Training").

Volcano's admission webhook rejects every change of a Job's spec except `minAvailable` and
task replicas, and a new trainer or pserver count also changes the pods' environment
(PADDLE_TRAINERS_NUM, PADDLE_PSERVERS_IP_PORT_LIST). So any spec change replaces the Job:
Pulumi deletes the old one, then creates the new one under the same name (its pods' host
names derive from it), and the new trainers resume from the last checkpoint.

So the Job must be stored exactly as the program sends it, or every `pulumi up` would see a
change and replace it. Volcano's mutating webhook (v1.15.0, pkg/webhooks/admission/jobs/
mutate/mutate_job.go) replaces the whole task list, re-encoded by its Go types, as soon as
one task lacks `minAvailable` or `maxRetry`: quantities come back canonical ("2048Mi" ->
"2Gi") and empty lists vanish. The program therefore writes what the webhook would default
(each task's minAvailable = its replicas, maxRetry 3; the job's queue, scheduler, maxRetry and
minAvailable), canonical quantities (components/kube.py) and no empty list, and the webhook
changes nothing (tests/support/volcano_webhook.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from elasticctr_common.contract import (
    CHECKPOINTS,
    MODELS,
    SLOT_CONF,
    TRAINER_JSON,
    TrainerEnv,
)
from elasticctr_common.trainer_json import HyperParameters, Runner, TrainerConfig

from components import kube
from components.bucket_access import BucketUser
from components.kube import KubeTarget
from components.network import Route, allow_egress, allow_ingress
from components.object_storage import ObjectStore

PSERVER_PORT = 30240
TYPE = "elasticctr:training:Training"
OLD_TYPE = "elasticctr:training:PsJob"
CONFIG_MAP = "training-config"
UGI_SECRET = "hdfs-ugi"
SERVICE_ACCOUNT = "training"
# A trainer's exit code for a pass that failed its checks: bad data, or a model version refused
# before publishing; a pserver's or trainer's for a checkpoint of another model layout
# (elasticctr_trainer.BAD_DATA_EXIT_CODE). A rerun would fail alike.
BAD_DATA_EXIT_CODE = 3
TERMINATE_ON_BAD_DATA = {"exitCode": BAD_DATA_EXIT_CODE, "action": "TerminateJob"}
WORK_SIZE = "20Gi"  # per-pod scratch (emptyDir) for staged data and checkpoints
# Restarts of the whole job (and of a task) before Volcano gives up: its default, written out.
MAX_RETRY = 3


@dataclass(frozen=True)
class TrainingArgs:
    target: KubeTarget
    image: pulumi.Input[str]  # a pinned tag, or the digest of a build
    store: ObjectStore
    slot_conf_map: pulumi.Input[str]
    job_name: str
    trainers: int
    pservers: int
    cpu: float
    mem: float  # GiB per pod
    train_data_uri: pulumi.Input[str]  # hdfs://.../train_data or s3://bucket/train_data
    eval_data_uri: pulumi.Input[str] | None  # held-out data: evaluate and gate
    # trainer.json's settings the stack decides (the contract's types, elasticctr_common
    # .trainer_json): the whole model, and the runner's settings by name (mode, passes,
    # hours, waits, the publish gate); the component adds the URIs and paths it owns.
    hyper_parameters: HyperParameters
    runner_settings: Mapping[str, Any]
    queue: str
    node_pool: str  # pservers and trainers on this pool's nodes; "": any node
    # The Job's (Volcano orders and preempts jobs by it) and its pods'; "": the default.
    priority_class: str = ""
    hdfs_ugi: pulumi.Input[str] | None = None  # secret, "user,password"
    mlflow_url: pulumi.Input[str] | None = None
    # What trainers reach besides the pservers and the bucket: HDFS, MLflow (their routes).
    services: tuple[Route, ...] = ()
    depends_on: tuple[pulumi.Resource, ...] = ()  # e.g. the Volcano release (its CRDs)
    # model custom with a .py file of the project: its text, shipped in the training
    # ConfigMap as network.py (contract.NETWORK_FILE in the pods); None: no file to ship.
    network_text: str | None = None


def bucket_user(*datasets: str) -> BucketUser:
    """Trainers export versions and checkpoint (pservers upload their shards), keep two
    checkpoints (and delete older ones), and read the hours and the held-out data from
    `datasets` when the data is in the bucket; they never delete a model version."""
    return BucketUser(
        SERVICE_ACCOUNT,
        ("pserver", "trainer"),
        read=datasets,
        write=(MODELS, CHECKPOINTS),
        delete=(CHECKPOINTS,),
    )


def pserver_endpoints(job_name: str, pservers: int) -> str:
    """Host names Volcano's svc plugin gives the pserver pods, with the pserver port."""
    return ",".join(f"{job_name}-pserver-{i}.{job_name}:{PSERVER_PORT}" for i in range(pservers))


def trainer_config(
    args: TrainingArgs, train_data_uri: str, eval_data_uri: str | None = None
) -> TrainerConfig:
    """/etc/elasticctr/trainer.json: the stack's settings, and where things are."""
    runner = Runner(
        train_data_uri=train_data_uri,
        eval_data_uri=eval_data_uri,
        slot_conf=SLOT_CONF,
        model_uri=args.store.uri(MODELS),
        checkpoint_uri=args.store.uri(CHECKPOINTS),
        mlflow_experiment=args.job_name,
        work_dir=kube.DATA_DIR,
        **args.runner_settings,
    )
    return TrainerConfig(runner, args.hyper_parameters)


class Training(pulumi.ComponentResource):
    job_name: pulumi.Output[str]
    trainer0_logs: pulumi.Output[str]

    def __init__(
        self, name: str, args: TrainingArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        if args.trainers < 1 or args.pservers < 1:
            raise ValueError(
                f"{name}: trainers and pservers must be >= 1, "
                f"got {args.trainers} and {args.pservers}"
            )
        # The type was PsJob: the alias keeps the URNs of existing stacks (and, inherited,
        # of every child), so the rename replaces nothing.
        opts = pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(aliases=[pulumi.Alias(type_=OLD_TYPE)])
        )
        super().__init__(TYPE, name, None, opts)
        target = args.target

        config_map = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata=target.metadata(CONFIG_MAP, "training"),
            data={
                "trainer.json": pulumi.Output.all(args.train_data_uri, args.eval_data_uri).apply(
                    lambda uris: trainer_config(args, *uris).to_json()
                ),
                **({"network.py": args.network_text} if args.network_text is not None else {}),
            },
            opts=target.opts(self),
        )
        ugi_secret = None
        if args.hdfs_ugi is not None:
            ugi_secret = k8s.core.v1.Secret(
                f"{name}-hdfs-ugi",
                metadata=target.metadata(UGI_SECRET, "training"),
                string_data={TrainerEnv.HDFS_UGI: pulumi.Output.secret(args.hdfs_ugi)},
                opts=target.opts(self),
            )
        account = kube.service_account(target, SERVICE_ACCOUNT, "training", self)

        env: list[k8s.core.v1.EnvVarArgsDict] = [
            *kube.env(
                {
                    TrainerEnv.PSERVERS: pserver_endpoints(args.job_name, args.pservers),
                    TrainerEnv.TRAINERS_NUM: str(args.trainers),
                    TrainerEnv.PSERVER_PORT: str(PSERVER_PORT),
                    "HOME": "/tmp",
                }
            ),
            kube.field_env(TrainerEnv.POD_IP, "status.podIP"),
            *args.store.env(),
        ]
        if args.mlflow_url is not None:
            env += kube.env({TrainerEnv.MLFLOW_TRACKING_URI: args.mlflow_url})
        secrets = args.store.secret_files()
        if ugi_secret is not None:
            secrets += kube.secret_files(
                "hdfs-ugi", ugi_secret.metadata["name"], [TrainerEnv.HDFS_UGI]
            )
        env += secrets.env

        # The config's content is part of the pod template, so a new config restarts the job.
        config_hash = config_map.data.apply(lambda data: kube.digest(data or {}))

        def task(role: str, replicas: int, policies: list[dict[str, Any]]) -> dict[str, Any]:
            container = kube.container(
                target,
                role,
                args.image,
                ["python", "-m", "elasticctr_trainer", "run"],
                args=["--config", TRAINER_JSON],
                env=[*env, *kube.env({TrainerEnv.ROLE: role.upper()})],
                ports={"pserver": PSERVER_PORT} if role == "pserver" else None,
                cpu=args.cpu,
                mem=args.mem,
                # Scratch of the trainer image (work_dir): staged hours, checkpoint shards.
                mounts=[
                    kube.CONFIG_MOUNT,
                    {"name": "work", "mount_path": kube.DATA_DIR},
                    *secrets.mounts,
                ],
            )
            template = kube.pod_template(
                role,
                [container],
                [
                    kube.config_volume(config_map.metadata["name"], args.slot_conf_map),
                    {"name": "work", "empty_dir": {"size_limit": WORK_SIZE}},
                    *secrets.volumes,
                ],
                service_account=account.metadata["name"],
                annotations={"elasticctr.io/config-sha256": config_hash},
                # Volcano restarts the whole job on a failed pod: a lone restarted pserver
                # would have lost its part of the model.
                restart_policy="Never",
                node_pool=args.node_pool,
                priority_class=args.priority_class,
                recommended_labels=False,  # a new template replaces the Job (kube.pod_template)
            )
            spec: dict[str, Any] = {
                "name": role,
                "replicas": replicas,
                # What Volcano's webhook would default (module docstring): set here, the
                # webhook leaves the tasks as sent.
                "minAvailable": replicas,
                "maxRetry": MAX_RETRY,
                "template": kube.api_fields(template),
            }
            if policies:  # Volcano's type drops an empty list (omitempty)
                spec["policies"] = policies
            return spec

        job = k8s.apiextensions.CustomResource(
            f"{name}-job",
            api_version="batch.volcano.sh/v1alpha1",
            kind="Job",
            metadata=target.metadata(args.job_name, "training"),
            spec={
                **({"priorityClassName": args.priority_class} if args.priority_class else {}),
                "minAvailable": args.trainers + args.pservers,
                "schedulerName": "volcano",
                "queue": args.queue,
                "maxRetry": MAX_RETRY,
                "policies": [
                    {"event": "PodEvicted", "action": "RestartJob"},
                    {"event": "PodFailed", "action": "RestartJob"},
                ],
                "plugins": {"svc": [], "env": []},
                "tasks": [
                    # A checkpoint of another model layout (exit code 3) fails every start.
                    task("pserver", args.pservers, [TERMINATE_ON_BAD_DATA]),
                    task(
                        "trainer",
                        args.trainers,
                        [
                            # Bad data (or a refused model) fails every run alike: end the
                            # job, do not retry.
                            # Task policies come before the job's PodFailed -> RestartJob.
                            TERMINATE_ON_BAD_DATA,
                            {"event": "TaskCompleted", "action": "CompleteJob"},
                        ],
                    ),
                ],
            },
            opts=target.opts(
                self,
                replace_on_changes=["spec"],
                delete_before_replace=True,
                depends_on=[config_map, account, *args.depends_on],
            ),
        )
        allow_ingress(
            target,
            f"{name}-pserver-ingress",
            "pserver",
            [PSERVER_PORT],
            ["trainer", "pserver"],
            self,
        )
        # Pservers upload their checkpoint shards; trainers read data, export versions,
        # checkpoint and log runs. Nobody connects to a trainer.
        pservers = Route("pserver", (PSERVER_PORT,))
        allow_egress(
            target, f"{name}-pserver-egress", "pserver", [pservers, *args.store.routes], self
        )
        allow_egress(
            target,
            f"{name}-trainer-egress",
            "trainer",
            [pservers, *args.store.routes, *args.services],
            self,
        )

        self.job = job
        self.job_name = pulumi.Output.from_input(args.job_name)
        self.trainer0_logs = pulumi.Output.concat(
            "kubectl -n ", target.namespace, f" logs -f {args.job_name}-trainer-0"
        )
        self.register_outputs({"job_name": self.job_name, "trainer0_logs": self.trainer0_logs})
