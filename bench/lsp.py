"""Drives `kiln lsp` over stdio as an editor does and times it on a generated 2,000-line document.

Prints medians (and min / max) over RUNS runs of: didChange -> publishDiagnostics (as received:
the server checks a change after a quiet spell at once), hover and completion round trips.
Usage: python3 bench/lsp.py KILN_BINARY [RUNS]
"""

import json
import statistics
import subprocess
import sys
import time

URI = "file:///tmp/kiln-lsp-bench/big.exp"


def document(width):
    lines = [
        'experiment "big" {',
        "  data {",
        "    source synthetic(inputs: normal([64]), targets: randint(10), count: 1000)",
        "    batch 32",
        "  }",
        "  model {",
        "    input [64]",
    ]
    i = 0
    while len(lines) < 1985:
        lines.append(f"    block b{i} {{")
        for j in range(4):
            lines.append(f"      l{i}_{j}: linear({width})")
            lines.append("      relu")
        lines.append("    }")
        i += 1
    lines += [
        "    head: linear(10)",
        "  }",
        "  optimizer adam(lr: 1e-3)",
        "  train {",
        "    epochs 1",
        "    loss cross_entropy",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


class Server:
    def __init__(self, kiln):
        self.proc = subprocess.Popen([kiln, "lsp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.next_id = 0

    def send(self, message):
        body = json.dumps(message).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def read(self):
        length = None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("the server closed its output")
            line = line.strip()
            if not line:
                break
            if line.startswith(b"Content-Length:"):
                length = int(line.split(b":")[1])
        return json.loads(self.proc.stdout.read(length))

    def request(self, method, params):
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            m = self.read()
            if m.get("id") == self.next_id:
                return m

    def notify(self, method, params):
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def diagnostics(self, version):
        while True:
            m = self.read()
            if m.get("method") == "textDocument/publishDiagnostics" and m["params"]["version"] == version:
                return m["params"]["diagnostics"]


def summary(name, values):
    print(f"{name:<44} median {statistics.median(values):7.2f} ms"
          f"   min {min(values):7.2f}   max {max(values):7.2f}   ({len(values)} runs)")


def main():
    kiln = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    server = Server(kiln)
    server.request("initialize", {"capabilities": {}})
    server.notify("initialized", {})
    text = document(64)
    lines = text.count("\n")
    server.notify("textDocument/didOpen", {"textDocument": {
        "uri": URI, "languageId": "kiln", "version": 1, "text": text}})
    first = server.diagnostics(1)
    assert first == [], first[:3]
    # A layer in the middle of the document, and the start of a line in a block of the model.
    middle = next(n for n, l in enumerate(text.split("\n")) if n > lines // 2 and "linear(" in l)
    diag, hover, completion = [], [], []
    for run in range(runs):
        version = run + 2
        changed = document(64 + (run % 2) * 8)
        start = time.perf_counter()
        server.notify("textDocument/didChange", {
            "textDocument": {"uri": URI, "version": version},
            "contentChanges": [{"text": changed}]})
        got = server.diagnostics(version)
        diag.append((time.perf_counter() - start) * 1000)
        assert got == [], got[:3]
        start = time.perf_counter()
        h = server.request("textDocument/hover", {
            "textDocument": {"uri": URI}, "position": {"line": middle, "character": 7}})
        hover.append((time.perf_counter() - start) * 1000)
        assert "output" in h["result"]["contents"]["value"], h
        start = time.perf_counter()
        c = server.request("textDocument/completion", {
            "textDocument": {"uri": URI}, "position": {"line": middle, "character": 6}})
        completion.append((time.perf_counter() - start) * 1000)
        assert any(i["label"] == "conv2d" for i in c["result"]), c
    print(f"document: {lines} lines, {len(text)} bytes")
    summary("didChange -> publishDiagnostics", diag)
    summary("hover round trip", hover)
    summary("completion round trip", completion)
    server.request("shutdown", None)
    server.notify("exit", None)
    sys.exit(server.proc.wait(timeout=10))


if __name__ == "__main__":
    main()
