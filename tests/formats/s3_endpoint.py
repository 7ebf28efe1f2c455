"""A real S3 endpoint on loopback for the tests: moto's server in a subprocess, and a
proxy in front of it that injects failures (500s, 403s, dropped connections) on reads."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import socket
import subprocess
import sys
import threading
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FaultProxy:
    """Forwards HTTP to ``port``; GETs with a Range header first consume ``plan``
    ("500", "403" or "drop"), one fault per request, counting what it injected."""

    def __init__(self, port: int) -> None:
        self.plan: list[str] = []
        self.injected: list[str] = []
        self.reads = 0
        lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                fault = None
                if self.command == "GET" and "Range" in self.headers:
                    with lock:
                        proxy.reads += 1
                        if proxy.plan:
                            fault = proxy.plan.pop(0)
                            proxy.injected.append(fault)
                if fault == "drop":
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault in ("500", "403"):
                    code = "InternalError" if fault == "500" else "AccessDenied"
                    text = (
                        f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>"
                        f"injected</Message></Error>"
                    ).encode()
                    self.send_response(int(fault))
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    self.wfile.write(text)
                    return
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = f"127.0.0.1:{port}"
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                # a HEAD's length is the object's, not the (empty) body's
                self.send_header(
                    "Content-Length",
                    resp.getheader("Content-Length", "0")
                    if self.command == "HEAD"
                    else str(len(data)),
                )
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class S3Endpoint:
    """moto's S3 server on loopback (a subprocess), and a fault proxy in front of it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError("moto's S3 server did not start")
            time.sleep(0.1)
        self.proxy = FaultProxy(self.port)
        self.url = f"http://127.0.0.1:{self.port}"
        self.proxied_url = f"http://127.0.0.1:{self.proxy.port}"

    def options(self, proxied: bool = False) -> dict:
        """s3fs storage options (botocore's own retries off: feedline's retry)."""
        return {
            "key": "testing",
            "secret": "testing",
            "skip_instance_cache": True,
            "client_kwargs": {
                "endpoint_url": self.proxied_url if proxied else self.url,
                "region_name": "us-east-1",
            },
            "config_kwargs": {"retries": {"max_attempts": 1, "mode": "standard"}},
        }

    def bucket(self, name: str):
        """Create bucket ``name`` (boto3, moto's own dependency); an s3fs file system on
        this endpoint to fill it."""
        import boto3
        import s3fs

        boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket=name)
        return s3fs.S3FileSystem(**self.options())

    def close(self) -> None:
        self.proxy.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def double_y(example: dict) -> dict:
    """A map for the worker test (module level, so workers can import it)."""
    return {**example, "y": example["y"] * 2}
