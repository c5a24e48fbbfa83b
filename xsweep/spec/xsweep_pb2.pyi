from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Mlp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MLP_UNSPECIFIED: _ClassVar[Mlp]
    GELU: _ClassVar[Mlp]
    SWIGLU: _ClassVar[Mlp]

class Schedule(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCHEDULE_UNSPECIFIED: _ClassVar[Schedule]
    GPIPE: _ClassVar[Schedule]
    ONE_F_ONE_B: _ClassVar[Schedule]

class Recompute(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECOMPUTE_UNSPECIFIED: _ClassVar[Recompute]
    NO_RECOMPUTE: _ClassVar[Recompute]
    SELECTIVE: _ClassVar[Recompute]
    FULL: _ClassVar[Recompute]

class Precision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRECISION_UNSPECIFIED: _ClassVar[Precision]
    BF16: _ClassVar[Precision]
    FP8: _ClassVar[Precision]

class MoeDispatcher(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MOE_DISPATCHER_UNSPECIFIED: _ClassVar[MoeDispatcher]
    ALLTOALL: _ClassVar[MoeDispatcher]
    DEEPEP: _ClassVar[MoeDispatcher]

class Resharding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESHARDING_UNSPECIFIED: _ClassVar[Resharding]
    LCM: _ClassVar[Resharding]
    HETAUTO: _ClassVar[Resharding]
    ALPACOMM: _ClassVar[Resharding]

class FabricKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FABRIC_KIND_UNSPECIFIED: _ClassVar[FabricKind]
    RAIL_OPTIMIZED: _ClassVar[FabricKind]
    FAT_TREE: _ClassVar[FabricKind]
MLP_UNSPECIFIED: Mlp
GELU: Mlp
SWIGLU: Mlp
SCHEDULE_UNSPECIFIED: Schedule
GPIPE: Schedule
ONE_F_ONE_B: Schedule
RECOMPUTE_UNSPECIFIED: Recompute
NO_RECOMPUTE: Recompute
SELECTIVE: Recompute
FULL: Recompute
PRECISION_UNSPECIFIED: Precision
BF16: Precision
FP8: Precision
MOE_DISPATCHER_UNSPECIFIED: MoeDispatcher
ALLTOALL: MoeDispatcher
DEEPEP: MoeDispatcher
RESHARDING_UNSPECIFIED: Resharding
LCM: Resharding
HETAUTO: Resharding
ALPACOMM: Resharding
FABRIC_KIND_UNSPECIFIED: FabricKind
RAIL_OPTIMIZED: FabricKind
FAT_TREE: FabricKind

class Model(_message.Message):
    __slots__ = ("preset", "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads", "vocab_size", "seq_length", "mlp", "dropout", "num_experts", "moe_top_k", "expert_ffn_hidden_size", "num_shared_experts", "shared_expert_ffn_hidden_size", "moe_first_dense_layers", "moe_capacity_factor", "moe_max_nodes")
    PRESET_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    FFN_HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_ATTENTION_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    SEQ_LENGTH_FIELD_NUMBER: _ClassVar[int]
    MLP_FIELD_NUMBER: _ClassVar[int]
    DROPOUT_FIELD_NUMBER: _ClassVar[int]
    NUM_EXPERTS_FIELD_NUMBER: _ClassVar[int]
    MOE_TOP_K_FIELD_NUMBER: _ClassVar[int]
    EXPERT_FFN_HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_SHARED_EXPERTS_FIELD_NUMBER: _ClassVar[int]
    SHARED_EXPERT_FFN_HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    MOE_FIRST_DENSE_LAYERS_FIELD_NUMBER: _ClassVar[int]
    MOE_CAPACITY_FACTOR_FIELD_NUMBER: _ClassVar[int]
    MOE_MAX_NODES_FIELD_NUMBER: _ClassVar[int]
    preset: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    vocab_size: int
    seq_length: int
    mlp: Mlp
    dropout: bool
    num_experts: int
    moe_top_k: int
    expert_ffn_hidden_size: int
    num_shared_experts: int
    shared_expert_ffn_hidden_size: int
    moe_first_dense_layers: int
    moe_capacity_factor: float
    moe_max_nodes: int
    def __init__(self, preset: _Optional[str] = ..., num_layers: _Optional[int] = ..., hidden_size: _Optional[int] = ..., ffn_hidden_size: _Optional[int] = ..., num_attention_heads: _Optional[int] = ..., num_kv_heads: _Optional[int] = ..., vocab_size: _Optional[int] = ..., seq_length: _Optional[int] = ..., mlp: _Optional[_Union[Mlp, str]] = ..., dropout: _Optional[bool] = ..., num_experts: _Optional[int] = ..., moe_top_k: _Optional[int] = ..., expert_ffn_hidden_size: _Optional[int] = ..., num_shared_experts: _Optional[int] = ..., shared_expert_ffn_hidden_size: _Optional[int] = ..., moe_first_dense_layers: _Optional[int] = ..., moe_capacity_factor: _Optional[float] = ..., moe_max_nodes: _Optional[int] = ...) -> None: ...

class Training(_message.Message):
    __slots__ = ("global_batch_size", "schedule", "resharding", "zero_stage", "total_tokens", "recompute", "sequence_parallel", "flash_attention", "virtual_pipeline_stages", "dp_overlap", "dp_bucket_params", "precision", "tp_comm_overlap", "expert_parallel", "moe_imbalance", "pp_p2p_overlap", "fp8_param_gather", "moe_dispatcher", "moe_fp8_dispatch", "software")
    GLOBAL_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    RESHARDING_FIELD_NUMBER: _ClassVar[int]
    ZERO_STAGE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    FLASH_ATTENTION_FIELD_NUMBER: _ClassVar[int]
    VIRTUAL_PIPELINE_STAGES_FIELD_NUMBER: _ClassVar[int]
    DP_OVERLAP_FIELD_NUMBER: _ClassVar[int]
    DP_BUCKET_PARAMS_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    TP_COMM_OVERLAP_FIELD_NUMBER: _ClassVar[int]
    EXPERT_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    MOE_IMBALANCE_FIELD_NUMBER: _ClassVar[int]
    PP_P2P_OVERLAP_FIELD_NUMBER: _ClassVar[int]
    FP8_PARAM_GATHER_FIELD_NUMBER: _ClassVar[int]
    MOE_DISPATCHER_FIELD_NUMBER: _ClassVar[int]
    MOE_FP8_DISPATCH_FIELD_NUMBER: _ClassVar[int]
    SOFTWARE_FIELD_NUMBER: _ClassVar[int]
    global_batch_size: int
    schedule: Schedule
    resharding: Resharding
    zero_stage: int
    total_tokens: float
    recompute: Recompute
    sequence_parallel: bool
    flash_attention: bool
    virtual_pipeline_stages: int
    dp_overlap: bool
    dp_bucket_params: int
    precision: Precision
    tp_comm_overlap: bool
    expert_parallel: int
    moe_imbalance: float
    pp_p2p_overlap: bool
    fp8_param_gather: bool
    moe_dispatcher: MoeDispatcher
    moe_fp8_dispatch: bool
    software: str
    def __init__(self, global_batch_size: _Optional[int] = ..., schedule: _Optional[_Union[Schedule, str]] = ..., resharding: _Optional[_Union[Resharding, str]] = ..., zero_stage: _Optional[int] = ..., total_tokens: _Optional[float] = ..., recompute: _Optional[_Union[Recompute, str]] = ..., sequence_parallel: _Optional[bool] = ..., flash_attention: _Optional[bool] = ..., virtual_pipeline_stages: _Optional[int] = ..., dp_overlap: _Optional[bool] = ..., dp_bucket_params: _Optional[int] = ..., precision: _Optional[_Union[Precision, str]] = ..., tp_comm_overlap: _Optional[bool] = ..., expert_parallel: _Optional[int] = ..., moe_imbalance: _Optional[float] = ..., pp_p2p_overlap: _Optional[bool] = ..., fp8_param_gather: _Optional[bool] = ..., moe_dispatcher: _Optional[_Union[MoeDispatcher, str]] = ..., moe_fp8_dispatch: _Optional[bool] = ..., software: _Optional[str] = ...) -> None: ...

class ScaleUp(_message.Message):
    __slots__ = ("bandwidth_gbps", "latency_ns", "link")
    BANDWIDTH_GBPS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_NS_FIELD_NUMBER: _ClassVar[int]
    LINK_FIELD_NUMBER: _ClassVar[int]
    bandwidth_gbps: float
    latency_ns: float
    link: str
    def __init__(self, bandwidth_gbps: _Optional[float] = ..., latency_ns: _Optional[float] = ..., link: _Optional[str] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("gpu", "num_gpus", "nic", "scale_up", "cluster")
    GPU_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    NIC_FIELD_NUMBER: _ClassVar[int]
    SCALE_UP_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    gpu: str
    num_gpus: int
    nic: str
    scale_up: ScaleUp
    cluster: int
    def __init__(self, gpu: _Optional[str] = ..., num_gpus: _Optional[int] = ..., nic: _Optional[str] = ..., scale_up: _Optional[_Union[ScaleUp, _Mapping]] = ..., cluster: _Optional[int] = ...) -> None: ...

class InterClusterLink(_message.Message):
    __slots__ = ("bandwidth_gbps", "latency_ns")
    BANDWIDTH_GBPS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_NS_FIELD_NUMBER: _ClassVar[int]
    bandwidth_gbps: float
    latency_ns: float
    def __init__(self, bandwidth_gbps: _Optional[float] = ..., latency_ns: _Optional[float] = ...) -> None: ...

class Fabric(_message.Message):
    __slots__ = ("kind", "oversubscription", "nodes_per_rack", "switch_latency_ns", "inter_cluster")
    KIND_FIELD_NUMBER: _ClassVar[int]
    OVERSUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    NODES_PER_RACK_FIELD_NUMBER: _ClassVar[int]
    SWITCH_LATENCY_NS_FIELD_NUMBER: _ClassVar[int]
    INTER_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    kind: FabricKind
    oversubscription: float
    nodes_per_rack: int
    switch_latency_ns: float
    inter_cluster: InterClusterLink
    def __init__(self, kind: _Optional[_Union[FabricKind, str]] = ..., oversubscription: _Optional[float] = ..., nodes_per_rack: _Optional[int] = ..., switch_latency_ns: _Optional[float] = ..., inter_cluster: _Optional[_Union[InterClusterLink, _Mapping]] = ...) -> None: ...

class Cluster(_message.Message):
    __slots__ = ("nodes", "fabric")
    NODES_FIELD_NUMBER: _ClassVar[int]
    FABRIC_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    fabric: Fabric
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ..., fabric: _Optional[_Union[Fabric, _Mapping]] = ...) -> None: ...

class DeviceGroup(_message.Message):
    __slots__ = ("id", "ranks", "pp_stage", "dp_replica", "first_layer", "last_layer", "micro_batch_size", "num_micro_batches", "context_parallel")
    ID_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    PP_STAGE_FIELD_NUMBER: _ClassVar[int]
    DP_REPLICA_FIELD_NUMBER: _ClassVar[int]
    FIRST_LAYER_FIELD_NUMBER: _ClassVar[int]
    LAST_LAYER_FIELD_NUMBER: _ClassVar[int]
    MICRO_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_MICRO_BATCHES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    id: int
    ranks: _containers.RepeatedScalarFieldContainer[int]
    pp_stage: int
    dp_replica: int
    first_layer: int
    last_layer: int
    micro_batch_size: int
    num_micro_batches: int
    context_parallel: int
    def __init__(self, id: _Optional[int] = ..., ranks: _Optional[_Iterable[int]] = ..., pp_stage: _Optional[int] = ..., dp_replica: _Optional[int] = ..., first_layer: _Optional[int] = ..., last_layer: _Optional[int] = ..., micro_batch_size: _Optional[int] = ..., num_micro_batches: _Optional[int] = ..., context_parallel: _Optional[int] = ...) -> None: ...

class DeploymentPlan(_message.Message):
    __slots__ = ("name", "model", "training", "cluster", "device_groups")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    DEVICE_GROUPS_FIELD_NUMBER: _ClassVar[int]
    name: str
    model: Model
    training: Training
    cluster: Cluster
    device_groups: _containers.RepeatedCompositeFieldContainer[DeviceGroup]
    def __init__(self, name: _Optional[str] = ..., model: _Optional[_Union[Model, _Mapping]] = ..., training: _Optional[_Union[Training, _Mapping]] = ..., cluster: _Optional[_Union[Cluster, _Mapping]] = ..., device_groups: _Optional[_Iterable[_Union[DeviceGroup, _Mapping]]] = ...) -> None: ...
