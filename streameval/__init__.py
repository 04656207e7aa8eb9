"""streameval: streaming evaluation of ranking and recommendation systems."""

from streameval.config import Settings, load_settings
from streameval.errors import ConfigError, InputError, StreamevalError
from streameval.pipeline import Pipeline

__version__ = "0.1.0"
__all__ = ["ConfigError", "InputError", "Pipeline", "Settings", "StreamevalError", "load_settings"]
