"""Fleet initialisation and the training program, shared by pservers and trainers (both
must build the same program so they agree on the tables)."""

from __future__ import annotations

import paddle
from elasticctr_common.trainer_json import AUTO_CROSSES, HyperParameters
from paddle.distributed import fleet
from paddle.distributed.fleet.base.role_maker import Role as FleetRole
from paddle.distributed.fleet.base.role_maker import UserDefinedRoleMaker

from .auto_crosses import auto_cross_count
from .model import AccessorParams, CtrModel, async_strategy, build_ctr_model
from .networks import checked_network
from .roles import Role

SHARDS_PER_PSERVER = 8  # sparse table shards: one file each per checkpoint


def init_fleet(role: Role) -> None:
    """Fleet with the role we derived, not Paddle's env matching (see roles.py)."""
    paddle.enable_static()  # before fleet.init, which otherwise sets up dygraph collectives
    maker = UserDefinedRoleMaker(
        is_collective=False,
        init_gloo=False,
        server_endpoints=role.pserver_endpoints,
        worker_num=role.trainers,
        role=FleetRole.SERVER if role.is_server else FleetRole.WORKER,
        current_id=role.index,
    )
    fleet.init(maker)


def cross_count(crosses: list[list[int]] | str, slot_count: int) -> int:
    """How many crosses a model has: those given, or as many as auto_crosses chooses (which
    pairs, trainer 0 of a new model learns from the data later; the pservers and the
    network need only their number)."""
    return auto_cross_count(slot_count) if crosses == AUTO_CROSSES else len(crosses)


def build_training_program(hyper: HyperParameters, slot_count: int, pservers: int) -> CtrModel:
    """The training program of `hyper`'s network; a user's network module is checked on a
    probe batch first (networks.NetworkError if it cannot be used)."""
    paddle.enable_static()
    inputs = slot_count + cross_count(hyper.crosses, slot_count)  # a cross is an input
    network = checked_network(hyper, inputs)
    dense = [(feature.name, feature.dim) for feature in hyper.dense_features]
    net = build_ctr_model(
        inputs, hyper.sparse_dim, hyper.embedding_dim, hyper.fc_sizes, network, dense,
        hyper.dense_l2, hyper.dense_rule(),
    )  # fmt: skip
    accessor = AccessorParams(
        hyper.embedx_threshold, hyper.nonclk_coeff, hyper.click_coeff,
        hyper.show_click_decay_rate, hyper.deletion(),
    )  # fmt: skip
    strategy = async_strategy(
        hyper.embedding_dim,
        hyper.sparse_rule(),
        hyper.sparse_initial_range,
        shard_num=SHARDS_PER_PSERVER * pservers,
        accessor=accessor,
    )
    optimizer = fleet.distributed_optimizer(
        paddle.optimizer.Adam(learning_rate=hyper.learning_rate), strategy
    )
    optimizer.minimize(net.loss)
    return net


def dense_parameter_names(program: paddle.static.Program) -> list[str]:
    from .model import SPARSE_TABLE

    return [p.name for p in program.all_parameters() if p.name != SPARSE_TABLE]


def shrink_sparse_table() -> None:
    """Trainer 0, after a pass: the accessor decays every id's show/click and deletes the
    ids scoring below its delete threshold (a no-op with decay 1 and threshold 0)."""
    fleet.fleet._runtime_handle._shrink()
