"""An S3 API server on loopback for the object-storage tests: moto's S3 service, started once per
test session (as s3fs's own tests do), and a fresh bucket per test.

Moto's standalone server (`ThreadedMotoServer`) chooses a service for every request by listing
moto's ~150 service folders, and closes every connection, so each request also costs the client
a new TCP connection. Its S3 application alone, served by tornado's HTTP/1.1 server (keep-alive;
tornado comes with distributed), answers the same requests for half the CPU: 600 requests
(put, head, get) took 5.0-5.9 CPU-s against 2.9-3.0.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading

import pytest

_buckets = itertools.count()
SERVER_THREAD = "gpuetl-test-s3-server"


class _NotFromTheServer(logging.Filter):
    """Tornado logs every 4xx answer; a missing key is a usual answer here, not news."""

    def filter(self, record):
        return record.threadName != SERVER_THREAD


class S3Server:
    """moto's S3 application on a tornado HTTPServer, on its own event loop in a daemon thread."""

    def __init__(self, app):
        self.app = app
        self.ready = threading.Event()
        self.quiet = _NotFromTheServer()
        self.thread = threading.Thread(target=self._serve, name=SERVER_THREAD, daemon=True)

    def _serve(self):
        import tornado.httpserver
        import tornado.netutil
        import tornado.wsgi

        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
        self.server = tornado.httpserver.HTTPServer(tornado.wsgi.WSGIContainer(self.app), max_body_size=1 << 36)
        self.server.add_sockets(sockets)
        self.port = sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()
        self.loop.close()

    def start(self) -> str:
        logging.getLogger("tornado.access").addFilter(self.quiet)
        self.thread.start()
        self.ready.wait()
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        async def close():
            self.server.stop()
            await self.server.close_all_connections()
            self.loop.stop()

        asyncio.run_coroutine_threadsafe(close(), self.loop)
        self.thread.join(timeout=30)
        logging.getLogger("tornado.access").removeFilter(self.quiet)


@pytest.fixture(scope="session")
def s3_endpoint():
    pytest.importorskip("s3fs")
    moto_app = pytest.importorskip("moto.moto_server.werkzeug_app")
    pytest.importorskip("tornado.wsgi")
    server = S3Server(moto_app.create_backend_app("s3"))
    endpoint = server.start()
    import s3fs

    yield endpoint, s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint},
                                      skip_instance_cache=True)
    server.stop()


class Store:
    """A bucket of the loopback server, and a client to arrange and look at it."""

    def __init__(self, endpoint: str, fs, bucket: str):
        self.endpoint, self.fs, self.bucket = endpoint, fs, bucket
        self.fs.mkdir(bucket)

    def url(self, rel: str = "") -> str:
        return f"s3://{self.bucket}/{rel}"

    def put(self, rel: str, data: bytes) -> None:
        self.fs.pipe_file(f"{self.bucket}/{rel}", data)

    def get(self, rel: str) -> bytes:
        self.fs.invalidate_cache()
        return self.fs.cat_file(f"{self.bucket}/{rel}")

    def keys(self, prefix: str = "") -> list[str]:
        self.fs.invalidate_cache()
        base = f"{self.bucket}/"
        return sorted(k[len(base):] for k in self.fs.find(base + prefix))


AWS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL",
           "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_REGION")


@pytest.fixture
def s3(s3_endpoint, monkeypatch, tmp_path):
    """A fresh bucket; the AWS environment points at the loopback server (no config files read)."""
    for name in AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint[0])
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))        # the sink's local staging, per test
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)            # re-read TMPDIR
    return Store(*s3_endpoint, f"gpuetl-test-{os.getpid()}-{next(_buckets)}")


class FaultProxy:
    """A loopback HTTP proxy in front of the S3 server that answers chosen requests itself: a 503
    SlowDown, a 403 AccessDenied, or a connection reset, `times` times each (None: always).
    `faults` is a list of [method, key substring, kind, times]; `hits` counts what it did;
    `requests` logs what it passed on: (method, path, Range header or None, body bytes sent back)."""

    def __init__(self, upstream: str):
        import http.client
        import http.server
        import socket
        import struct
        import threading
        from urllib.parse import urlsplit

        target = urlsplit(upstream)
        self.faults: list[list] = []
        self.hits: dict[str, int] = {}
        self.requests: list[tuple[str, str, str | None, int]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _fault(self):
                for fault in proxy.faults:
                    method, key, kind, times = fault
                    if method in (self.command, "*") and key in self.path and (times is None or times > 0):
                        if times is not None:
                            fault[3] -= 1
                        proxy.hits[kind] = proxy.hits.get(kind, 0) + 1
                        return kind
                return None

            def _answer(self, status, code, message):
                body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                        f"<Message>{message}</Message></Error>").encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(0 if self.command == "HEAD" else len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                kind = self._fault()
                if kind == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                if kind == "503":
                    return self._answer(503, "SlowDown", "Please reduce your request rate.")
                if kind == "403":
                    return self._answer(403, "AccessDenied", "Access Denied")
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                proxy.requests.append((self.command, self.path, self.headers.get("Range"),
                                       0 if self.command == "HEAD" else len(data)))
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(k, v)
                length = resp.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(data))
                self.send_header("Content-Length", length)           # a HEAD tells the object's size
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def faulty_s3(s3, monkeypatch):
    """`s3`, with AWS_ENDPOINT_URL pointing at a FaultProxy in front of the server."""
    proxy = FaultProxy(s3.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    yield s3, proxy
    proxy.close()
