"""The client follows no redirect, so its token reaches no other origin.

Real HTTP servers on 127.0.0.1 (each port its own origin, scheme+host+port)
record every request they get. The first answers with a redirect; the test
checks that the client raises RedirectRefusedError and that the place the
redirect named received nothing, Authorization header or otherwise. No
hpo-server is needed.
"""

import http.server
import shutil
import ssl
import subprocess
import threading

import pytest

import heterotune

TOKEN = "redirect-test-token"


class Recorder:
    """An HTTP(S) server on 127.0.0.1:0 that records requests and answers as told.

    `answer` is (status, headers) for every request; (200, {}) answers `{}`.
    """

    def __init__(self, answer=(200, {}), tls=None):
        self.requests = []  # (method, path, {header: value}) in arrival order
        self.answer = answer
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                recorder.requests.append((self.command, self.path, dict(self.headers.items())))
                status, headers = recorder.answer
                body = b"{}" if status == 200 else b""
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _serve

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def authorizations(self):
        return [h.get("Authorization") for _, _, h in self.requests]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def recorders():
    made = []

    def make(*args, **kwargs):
        r = Recorder(*args, **kwargs)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def call(client, method):
    if method == "GET":
        return client.list_experiments()
    return client.cancel_experiment(7, "a reason")  # a POST with a JSON body


REDIRECTS = [301, 302, 303, 307, 308]


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("status", REDIRECTS)
def test_a_redirect_to_another_port_is_refused_and_gets_nothing(recorders, status, method):
    elsewhere = recorders()
    server = recorders((status, {"Location": elsewhere.url + "/api/v1/experiments"}))
    client = heterotune.Client(server.url, TOKEN, timeout=10)
    with pytest.raises(heterotune.RedirectRefusedError) as e:
        call(client, method)
    assert elsewhere.requests == [], "the other origin got a request"
    assert server.authorizations() == ["Bearer " + TOKEN], "the named server gets one request, with the token"
    assert e.value.status == status and e.value.location == elsewhere.url + "/api/v1/experiments"
    assert e.value.url == server.url and e.value.method == method
    message = str(e.value)
    assert f"answered {status}, a redirect to {elsewhere.url}/api/v1/experiments" in message
    assert "server=" in message and "HPO_REST_SERVER" in message
    assert isinstance(e.value, heterotune.HeteroTuneError) and not isinstance(e.value, heterotune.APIError)


def test_a_redirect_to_another_host_name_is_refused(recorders):
    # "localhost" and "127.0.0.1" are two origins even on one port.
    elsewhere = recorders()
    port = elsewhere.url.rsplit(":", 1)[1]
    server = recorders((302, {"Location": f"http://localhost:{port}/api/v1/experiments"}))
    with pytest.raises(heterotune.RedirectRefusedError):
        heterotune.Client(server.url, TOKEN, timeout=10).list_experiments()
    assert elsewhere.requests == []


def test_a_redirect_on_the_same_origin_is_refused_too(recorders):
    # One rule whatever the redirect names: hpo-server never redirects, and a
    # followed 301/302 would turn a POST into a GET without its body.
    server = recorders()
    server.answer = (302, {"Location": "/elsewhere"})  # relative: the same origin
    with pytest.raises(heterotune.RedirectRefusedError) as e:
        heterotune.Client(server.url, TOKEN, timeout=10).list_experiments()
    assert e.value.location == server.url + "/elsewhere"
    assert [p for _, p, _ in server.requests] == ["/api/v1/experiments?offset=0&limit=100"]


def test_a_redirect_without_a_location_is_refused(recorders):
    server = recorders((302, {}))
    with pytest.raises(heterotune.RedirectRefusedError) as e:
        heterotune.Client(server.url, TOKEN, timeout=10).list_experiments()
    assert e.value.location is None and "without a Location" in str(e.value)


@pytest.fixture
def tls_context(tmp_path):
    """A server context whose certificate for 127.0.0.1 is its own CA (made by the openssl CLI)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl CLI to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                    str(cert)], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context, cert


def test_a_redirect_from_https_to_http_is_refused(recorders, tls_context):
    context, cert = tls_context
    plain = recorders()
    port = plain.url.rsplit(":", 1)[1]
    server = recorders((302, {"Location": f"http://127.0.0.1:{port}/api/v1/experiments"}), tls=context)
    client = heterotune.Client(server.url, TOKEN, tls_ca=str(cert), timeout=10)
    with pytest.raises(heterotune.RedirectRefusedError):
        client.list_experiments()
    assert plain.requests == [], "the token went out in plain http"
    assert server.authorizations() == ["Bearer " + TOKEN]

    # Without a redirect the same client talks to it as usual.
    server.answer = (200, {})
    assert client.request("GET", "/api/v1/experiments") == {}
