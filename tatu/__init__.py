"""tatu: a small Portuguese GPT and the daemon that fine-tunes it without forgetting."""
__version__ = "0.1.0"
