"""lockstep: formal checking of the concurrency and state protocols of LLM inference engines."""

__version__ = "0.1.0"
