"""The benchmark harness: the listener that answers must be the process it started; CPU time per process and per
its main thread."""

from __future__ import annotations

import http.server
import subprocess
import sys
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


def test_the_main_threads_cpu_is_told_apart_from_the_processes() -> None:
    # a process whose second thread burns CPU while its main thread sleeps: the process's CPU grows, the main
    # thread's hardly (what the ingest bench's event-loop row rests on)
    script = (
        "import threading, time\n"
        "def burn():\n"
        "    end = time.process_time() + 0.6\n"
        "    while time.process_time() < end:\n"
        "        pass\n"
        "t = threading.Thread(target=burn); t.start(); t.join()\n"
        "print('done', flush=True)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "done"
        whole, main = harness.cpu_seconds(proc.pid), harness.cpu_seconds(proc.pid, main_thread=True)
        assert whole >= 0.5
        assert main < whole - 0.4
    finally:
        proc.kill()
        proc.wait()
