"""S3 and DynamoDB I/O of fanfit: the key layout of a job, array and JSON objects, job records.

S3 is the source of truth. Everything a step writes goes to a deterministic key, so a retried step
overwrites its own object with the same content and nothing is counted twice. Arrays travel as
``.npz``/``.npy`` read with ``allow_pickle=False``: no object in the bucket is ever unpickled.

Four modules: :mod:`.keys` (the key layout of a job: every S3 key and prefix), :mod:`.objects`
(:class:`JobStore`: JSON and array objects in S3), :mod:`.sources` (a user's ``s3://`` data read in
place: its header on the client, the whole object on the server) and :mod:`.tables` (the DynamoDB tables: the job
table, :class:`JobRecords`; the throughput table, :class:`ThroughputRecords`; and the partition
table, :class:`Partitions`: running jobs' shares of the account, Dorm). Their names are re-exported
here: callers write ``storage.plan_key(job_id)`` and ``storage.JobStore``.
"""

from fanfit.storage.keys import (
    DATA_KEY_PATTERN,
    check_data_key,
    check_job_key,
    data_key,
    folds_key,
    input_folds_key,
    input_init_key,
    is_train_round_key,
    job_prefix,
    map_runs_prefix,
    plan_key,
    predictions_key,
    preds_key,
    preds_prefix,
    prepare_record_key,
    result_key,
    schedule_key,
    shard_id_of_preds_key,
    spec_key,
    stage_inputs_key,
    stage_prefix,
    train_partial_key,
    train_round_key,
    train_round_plan_key,
    train_rounds_prefix,
    train_state_index,
    train_state_key,
    train_state_prefix,
    train_throughput_key,
    units_key,
    wave_key,
)
from fanfit.storage.objects import (
    JobStore,
    decode_data,
    encode_data,
)
from fanfit.storage.sources import (
    SOURCE_FORMATS,
    RangedObject,
    S3Object,
    SourceHeader,
    parse_s3_uri,
    read_source,
    read_source_header,
    source_format,
    source_size,
)
from fanfit.storage.tables import (
    JOB_STATUS_CANCELLED,
    JOB_STATUS_FAILED,
    JOB_STATUS_RUNNING,
    JOB_STATUS_SUCCEEDED,
    PARTITIONS_EPOCH_KEY,
    PARTITIONS_HISTORY_LIMIT,
    JobRecords,
    Partitions,
    ThroughputRecords,
)

__all__ = [
    "DATA_KEY_PATTERN",
    "JOB_STATUS_CANCELLED",
    "JOB_STATUS_FAILED",
    "JOB_STATUS_RUNNING",
    "JOB_STATUS_SUCCEEDED",
    "JobRecords",
    "JobStore",
    "PARTITIONS_EPOCH_KEY",
    "PARTITIONS_HISTORY_LIMIT",
    "Partitions",
    "RangedObject",
    "S3Object",
    "SOURCE_FORMATS",
    "SourceHeader",
    "ThroughputRecords",
    "check_data_key",
    "check_job_key",
    "data_key",
    "decode_data",
    "encode_data",
    "folds_key",
    "input_folds_key",
    "input_init_key",
    "is_train_round_key",
    "job_prefix",
    "map_runs_prefix",
    "parse_s3_uri",
    "plan_key",
    "predictions_key",
    "preds_key",
    "preds_prefix",
    "prepare_record_key",
    "read_source",
    "read_source_header",
    "result_key",
    "schedule_key",
    "shard_id_of_preds_key",
    "source_format",
    "source_size",
    "spec_key",
    "stage_inputs_key",
    "stage_prefix",
    "train_partial_key",
    "train_round_key",
    "train_round_plan_key",
    "train_rounds_prefix",
    "train_state_index",
    "train_state_key",
    "train_state_prefix",
    "train_throughput_key",
    "units_key",
    "wave_key",
]
