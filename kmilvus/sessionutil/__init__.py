"""Sessions: components register under an etcd lease and discover each other (Milvus' sessionutil)."""

from kmilvus.sessionutil.session import Session, SessionInfo, always_valid, list_sessions, watch_sessions

__all__ = ["Session", "SessionInfo", "always_valid", "list_sessions", "watch_sessions"]
