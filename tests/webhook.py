"""A webhook receiver for the alert tests: a real HTTP server on 127.0.0.1 that records every POST.

Typical use:
    endpoint = Endpoint(); ...; endpoint.bodies[0]["text"]; endpoint.close()
"""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "T000/B000/s3cr3tT0k3n"


class Endpoint:
    """A webhook receiver: records every POST; answers `status` after `delay_s`."""

    def __init__(self, status: int = 200, delay_s: float = 0.0) -> None:
        self.bodies: list[dict] = []
        self.arrived_t: list[float] = []  # wall time each body in `bodies` arrived
        self.num_requests = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                endpoint.num_requests += 1
                body = self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(delay_s)
                if status == 200:
                    endpoint.arrived_t.append(time.time())
                    endpoint.bodies.append(json.loads(body))
                try:
                    self.send_response(status)
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:  # the client gave up waiting
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/{TOKEN}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
