"""Engine replicas behind one endpoint: the router (picks a replica), the replica set (retries, restarts),
and the embedded engine's worker process with its client."""

from .remote_engine import WorkerEngine
from .replicas import Launch, Replica, ReplicaSet, local_launcher
from .router import Router, session_key

__all__ = ["Launch", "Replica", "ReplicaSet", "Router", "WorkerEngine", "local_launcher", "session_key"]
