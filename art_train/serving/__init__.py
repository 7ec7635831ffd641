"""Engine replicas behind one endpoint: the router (picks a replica), the replica set (retries, restarts),
the embedded engine's worker process with its client, and replicas as Ray actors (`ray_launcher`; Ray is
imported only when one is asked for)."""

from .ray_replicas import RayWorkerEngine, ray_launcher
from .remote_engine import WorkerEngine
from .replicas import Launch, Replica, ReplicaSet, local_launcher
from .router import Router, session_key

__all__ = ["Launch", "RayWorkerEngine", "Replica", "ReplicaSet", "Router", "WorkerEngine", "local_launcher",
           "ray_launcher", "session_key"]
