"""The benchmark harness's server start: the listener that answers must be the process it started."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

from scenarios.bench import corpus, harness


class _Impostor(http.server.BaseHTTPRequestHandler):
    """Answers every GET with 200: what another test's node on a reused port looks like."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"status":"ok"}')

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_port_taken_by_another_server_is_not_mistaken_for_ours(tmp_path: Path) -> None:
    impostor = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Impostor)
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    taken = int(impostor.server_address[1])
    data, _ = corpus.fresh_data_dir(tmp_path, "node")
    server = harness.Server(data)
    server.port, server.url = taken, f"http://127.0.0.1:{taken}"
    try:
        with server:
            assert server.port != taken  # the start saw `cannot listen` and moved to a free port
            assert server.proc is not None
            assert harness.listens(server.proc.pid, server.port)
            assert not harness.listens(server.proc.pid, taken)
    finally:
        impostor.shutdown()
        impostor.server_close()
