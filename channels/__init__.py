"""Reducers, field helpers, replay and snapshot policy for LangGraph's `DeltaChannel`.

See docs/channels.md for when to use a delta channel, how to choose
``snapshot_every``, each reducer's semantics and the batching law.
"""

from deltalog.channels.fields import (
    DEFAULT_SNAPSHOT_EVERY,
    DeltaMessages,
    DeltaMessagesState,
    delta,
)
from deltalog.channels.policy import (
    MAX_SUPERSTEPS_SINCE_SNAPSHOT,
    ChannelReplayCost,
    aexplain,
    explain,
    read_counters,
)
from deltalog.channels.reducers import (
    DELETE,
    REMOVE_ALL_MESSAGES,
    AppendReducer,
    DeltaReducer,
    FoldReducer,
    MergeReducer,
    MessagesReducer,
    SumReducer,
    UnionReducer,
    UniqueAppendReducer,
    WindowReducer,
    append,
    append_unique,
    fold,
    merge,
    messages,
    total,
    union,
    window,
)
from deltalog.channels.replay import (
    NULL_TASK_ID,
    ChannelSource,
    Reconstructor,
    delta_channels,
    replay,
    replay_history,
)

__all__ = [
    "DEFAULT_SNAPSHOT_EVERY",
    "DELETE",
    "MAX_SUPERSTEPS_SINCE_SNAPSHOT",
    "NULL_TASK_ID",
    "REMOVE_ALL_MESSAGES",
    "AppendReducer",
    "ChannelReplayCost",
    "ChannelSource",
    "DeltaMessages",
    "DeltaMessagesState",
    "DeltaReducer",
    "FoldReducer",
    "MergeReducer",
    "MessagesReducer",
    "Reconstructor",
    "SumReducer",
    "UnionReducer",
    "UniqueAppendReducer",
    "WindowReducer",
    "aexplain",
    "append",
    "append_unique",
    "delta",
    "delta_channels",
    "explain",
    "fold",
    "merge",
    "messages",
    "read_counters",
    "replay",
    "replay_history",
    "total",
    "union",
    "window",
]
