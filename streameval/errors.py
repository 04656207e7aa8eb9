"""Typed errors. Every message says what is wrong and, where it can, what to do."""


class StreamevalError(Exception):
    """Base of every error streameval raises on purpose."""


class ConfigError(StreamevalError):
    """A configuration key has an unknown name, a bad value, or an impossible combination."""


class InputError(StreamevalError):
    """An input file or topic cannot be read (missing, unreadable, not co-partitioned...)."""


class StateError(StreamevalError):
    """Checkpointed state cannot be read back (undecodable, or written by another version)."""
