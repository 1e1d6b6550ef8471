"""Errors the engine raises for bad requests; the gateway maps them to OpenAI-shaped 4xx responses."""


class InvalidRequestError(ValueError):
    """A request the engine refuses: the message names the problem, `param` the offending field."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class NotFoundError(InvalidRequestError):
    """A request names something the engine does not hold (a LoRA adapter unloaded meanwhile): a 404."""


class EngineDeadError(RuntimeError):
    """The engine's step loop stopped on an internal error; no further requests are accepted."""
