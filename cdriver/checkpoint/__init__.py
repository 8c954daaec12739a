"""The kubelet plugin's record of prepared claims: versioned, checksummed, locked, atomic.

`model` holds the records (claim states, recorded devices), `native` the file's content
(cdriver's checksummed section beside upstream's parts), `upstream` the upstream plugin's
layouts, and `store` the file itself (lock, atomic writes, reboots).
"""

from cdriver.checkpoint.model import (
    Checkpoint,
    CheckpointError,
    ClaimDevice,
    ClaimRecord,
    ClaimState,
    CorruptCheckpoint,
    IntendedDevice,
    RecordedDevice,
    intended_device,
    recorded_device,
)
from cdriver.checkpoint.native import MAX_CHECKPOINT_BYTES, checksum, decode, encode
from cdriver.checkpoint.store import CheckpointStore, apply_boot_id, read_boot_id
from cdriver.checkpoint.upstream import from_upstream, go_json, kubelet_checksum, to_upstream

__all__ = [
    "MAX_CHECKPOINT_BYTES",
    "Checkpoint",
    "CheckpointError",
    "CheckpointStore",
    "ClaimDevice",
    "ClaimRecord",
    "ClaimState",
    "CorruptCheckpoint",
    "IntendedDevice",
    "RecordedDevice",
    "apply_boot_id",
    "checksum",
    "decode",
    "encode",
    "from_upstream",
    "go_json",
    "intended_device",
    "kubelet_checksum",
    "read_boot_id",
    "recorded_device",
    "to_upstream",
]
