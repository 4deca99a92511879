"""The errors the client raises.

A refusal by the server is an APIError subclass named after the server's own
status code (common/status.h), so a caller can tell what to do from the
class: fix the request (InvalidArgumentError, NotFoundError,
FailedPreconditionError), fix the credentials (UnauthenticatedError,
PermissionDeniedError), or try again later (``retryable``: Unavailable,
Aborted, DeadlineExceeded, ResourceExhausted, the server's own rule
IsRetryable).

The server answers a refusal with ``{"error": {"code": ..., "message": ...}}``,
and a message about one field starts with that field's path, e.g.
``spaces[0].params.lr.low: must be < high``. The path is ``APIError.field``.
"""

import re

__all__ = [
    "HeteroTuneError", "ServerUnreachableError", "RedirectRefusedError", "APIError", "InvalidArgumentError", "UnauthenticatedError",
    "PermissionDeniedError", "NotFoundError", "AlreadyExistsError", "FailedPreconditionError", "AbortedError",
    "ResourceExhaustedError", "CancelledError", "UnimplementedError", "UnavailableError", "DeadlineExceededError",
    "InternalError", "DataLossError", "TrialPruned", "field_of",
]


class HeteroTuneError(Exception):
    """The base of every error this package raises (TrialPruned aside, which is not an error)."""


class ServerUnreachableError(HeteroTuneError):
    """No HTTP answer: the server is down, the address is wrong, or TLS failed."""

    def __init__(self, url, reason):
        super().__init__(f"cannot reach hpo-server at {url}: {reason} "
                         "(is it running? set HPO_REST_SERVER or pass server=)")
        self.url = url
        self.reason = reason


class RedirectRefusedError(HeteroTuneError):
    """The server's address answered with a redirect (HTTP 3xx), which the client does not follow.

    hpo-server never redirects, so the redirect came from something in front
    of it (a proxy, a load balancer, a misconfigured address). Following it
    would send the request, and its bearer token, wherever the redirect
    points: another host, or plain http after https. Pass the address the
    server really has as server= (or HPO_REST_SERVER) instead.

    Attributes:
      url: the server as given to Client ("https://host:port").
      status: the redirect's HTTP status (301, 302, 307, ...).
      location: where it pointed (absolute), or None when it named nowhere.
      method, path: the request.
    """

    def __init__(self, url, status, location, method="", path=""):
        where = f"to {location}" if location else "without a Location"
        super().__init__(f"{method} {path}: the server at {url} answered {status}, a redirect {where}; "
                         "not followed: the client sends requests and its token only to the server it was "
                         "given. hpo-server itself never redirects; if that address is the server, pass it "
                         "as server= or set HPO_REST_SERVER".lstrip())
        self.url = url
        self.status = status
        self.location = location
        self.method = method
        self.path = path


# "spaces[0].params.lr.low: must be < high" -> "spaces[0].params.lr.low". The path is the
# text before the first ": " when that text has no space: "line 3: ..." and
# "experiment 7 has ended (...)" name no field. Keys may hold ':' (metric names
# like "val:loss"), hence the lazy match up to ": " rather than up to ':'.
_FIELD = re.compile(r"^(\S+?): ")
_QUERY_FIELD = re.compile(r"^query parameter (\S+?): ")


def field_of(message):
    """The path of the field a server message is about, or None."""
    m = _QUERY_FIELD.match(message) or _FIELD.match(message)
    return m.group(1) if m else None


class APIError(HeteroTuneError):
    """The server refused a request (an HTTP status of 400 or more).

    Attributes:
      status: the HTTP status (400, 404, ...).
      code: the server's status code name ("InvalidArgument", ...), or "" when
        the answer was not the server's JSON (a proxy's page, say).
      message: the server's sentence, e.g. "spaces[0].params.lr.low: must be < high".
      field: the path of the bad field ("spaces[0].params.lr.low"), or None
        when the message is not about one field.
      method, path: the request.
      retry_after: seconds the server asked to wait before trying again, or None.
    """

    retryable = False

    def __init__(self, status, code, message, method="", path="", retry_after=None):
        super().__init__(f"{method} {path}: {status} {code or 'error'}: {message}".lstrip())
        self.status = status
        self.code = code
        self.message = message
        self.field = field_of(message)
        self.method = method
        self.path = path
        self.retry_after = retry_after


class InvalidArgumentError(APIError, ValueError):
    """A bad request: a spec, a body or a query parameter (``field`` names it)."""


class UnauthenticatedError(APIError):
    """No token, or the wrong one (set HPO_TOKEN or pass token=)."""


class PermissionDeniedError(APIError):
    """Refused where it came from (a Host or Origin the server does not allow)."""


class NotFoundError(APIError, LookupError):
    """No such experiment, trial or route."""


class AlreadyExistsError(APIError):
    pass


class FailedPreconditionError(APIError):
    """Not now, in this state: the experiment has ended, the trial is finished, ..."""


class AbortedError(APIError):
    retryable = True


class ResourceExhaustedError(APIError):
    retryable = True


class CancelledError(APIError):
    pass


class UnimplementedError(APIError):
    pass


class UnavailableError(APIError):
    retryable = True


class DeadlineExceededError(APIError):
    retryable = True


class InternalError(APIError):
    pass


class DataLossError(APIError):
    pass


_BY_CODE = {
    "InvalidArgument": InvalidArgumentError,
    "Unauthenticated": UnauthenticatedError,
    "PermissionDenied": PermissionDeniedError,
    "NotFound": NotFoundError,
    "AlreadyExists": AlreadyExistsError,
    "FailedPrecondition": FailedPreconditionError,
    "Aborted": AbortedError,
    "ResourceExhausted": ResourceExhaustedError,
    "Cancelled": CancelledError,
    "Unimplemented": UnimplementedError,
    "Unavailable": UnavailableError,
    "DeadlineExceeded": DeadlineExceededError,
    "Internal": InternalError,
    "DataLoss": DataLossError,
}


def error_for(status, code, message, method, path, retry_after):
    """The APIError subclass for the server's code (APIError itself for an unknown one)."""
    return _BY_CODE.get(code, APIError)(status, code, message, method, path, retry_after)


class TrialPruned(Exception):
    """Raised by an objective of Experiment.optimize to end its trial early.

    After a report whose decision says to stop (``should_prune``), the server
    has already ended the trial; raising this just leaves the objective.
    """
