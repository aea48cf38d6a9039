#!/usr/bin/env python3
"""ctest's serve_browser: `nanoddp serve`'s chat page in headless Chromium.

Trains a tiny checkpoint, starts the server on a free port, and drives Chromium through
chromedriver's W3C WebDriver HTTP API (urllib only, no Selenium): types into #message, clicks
#send, waits until the reply (.assistant) has data-done="1" and text, checks that it arrived as
more than one token event, sends a second message (the page keeps the conversation, and leaves its
oldest exchange out once the whole history outgrows --max_request_bytes), and saves a
screenshot to $NANODDP_SCREENSHOT (default: serve_browser.png in the working directory).

Usage: serve_browser.py NANODDP_BINARY
Exit status: 0 passed, 1 failed, 77 skipped (only when chromium or chromedriver is not installed).
"""
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SKIP = 77
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference


def fail(message):
    print(f"serve_browser: FAIL: {message}", flush=True)
    sys.exit(1)


def find_browser():
    chromium = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium") if p and os.path.exists(p)), None)
    driver = next((p for p in (shutil.which("chromedriver"), "/usr/bin/chromedriver") if p and os.path.exists(p)), None)
    if not chromium or not driver:
        print("serve_browser: SKIP: needs chromium and chromedriver (Debian: chromium chromium-driver, "
              "which scripts/setup.sh installs)", flush=True)
        sys.exit(SKIP)
    return chromium, driver


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, cwd):
    r = subprocess.run(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    if r.returncode != 0:
        fail(f"{' '.join(args)} exited {r.returncode}:\n{r.stdout}")


def make_checkpoint(nanoddp, work):
    """A tiny model on bytes (the byte tokenizer has nanochat's chat tokens), trained a few steps."""
    words = ["the cat", "a dog", "the jury", "my friend", "sees", "likes", "said", "found", "the ball", "a book"]
    with open(os.path.join(work, "corpus.jsonl"), "w") as f:
        for i in range(100):
            text = " ".join(words[(i * 7 + k * 3) % len(words)] for k in range(40)) + "."
            f.write(json.dumps({"text": text}) + "\n")
    run([nanoddp, "data", "prepare", "--input", "corpus.jsonl", "--out", "data"], work)
    run([nanoddp, "train", "--data", "data", "--out", "out", "--depth", "2", "--aspect_ratio", "32", "--head_dim",
         "32", "--max_seq_len", "64", "--device_batch_size", "4", "--total_batch_size", "256", "--num_iterations",
         "4", "--eval_every", "4", "--eval_tokens", "512", "--threads", "1", "--peak_flops", "1e9"], work)
    return os.path.join(work, "out")


def start_server(nanoddp, checkpoint, work):
    log = open(os.path.join(work, "serve.log"), "w+")
    # --max_request_bytes 120: the first message's request (64 bytes) fits, the second's (the whole
    # history, at least 141 bytes) does not, so the page must leave the oldest exchange out.
    proc = subprocess.Popen([nanoddp, "serve", "--checkpoint", checkpoint, "--port", "0", "--max_tokens", "24",
                             "--max_request_bytes", "120"],
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        log.seek(0)
        m = re.search(r"serving on (http://127\.0\.0\.1:\d+)", log.read())
        if m:
            return proc, m.group(1), log
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    log.seek(0)
    fail(f"the server did not start:\n{log.read()}")


class WebDriver:
    """The few W3C WebDriver commands this test needs, over HTTP to chromedriver."""

    def __init__(self, url):
        self.url = url
        self.session = None

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as res:
                return json.loads(res.read())["value"]
        except urllib.error.HTTPError as e:
            fail(f"WebDriver {method} {path}: {e.code} {e.read().decode(errors='replace')[:2000]}")

    def start(self, chromium):
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1000,720", "--no-first-run", "--no-default-browser-check"]}}}}
        self.session = self.call("POST", "/session", caps)["sessionId"]

    def s(self, path):
        return f"/session/{self.session}{path}"

    def element(self, css):
        return self.call("POST", self.s("/element"), {"using": "css selector", "value": css})[ELEMENT]

    def script(self, source, *args):
        return self.call("POST", self.s("/execute/sync"), {"script": source, "args": list(args)})


REPLY_STATE = """
const replies = document.querySelectorAll('.assistant');
const a = replies[arguments[0]];
return a ? {done: a.dataset.done || null, error: a.dataset.error || null, text: a.textContent,
            chunks: Number(a.dataset.chunks), reads: Number(a.dataset.reads),
            tokens: a.dataset.tokens || null, count: replies.length} : null;
"""


def ask(wd, text, index):
    """Types `text`, clicks Send, and waits for reply number `index` to finish; returns its state."""
    wd.call("POST", wd.s(f"/element/{wd.element('#message')}/value"), {"text": text})
    wd.call("POST", wd.s(f"/element/{wd.element('#send')}/click"), {})
    deadline = time.time() + 30
    state = None
    while time.time() < deadline:
        state = wd.script(REPLY_STATE, index)
        if state and (state["done"] or state["error"]):
            break
        time.sleep(0.05)
    if not state or state["error"] or state["done"] != "1":
        fail(f"reply {index} did not complete: {state}")
    if not state["text"]:
        fail(f"reply {index} is empty: {state}")
    return state


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    nanoddp = os.path.abspath(sys.argv[1])
    chromium, chromedriver = find_browser()
    shot = os.environ.get("NANODDP_SCREENSHOT") or os.path.join(os.getcwd(), "serve_browser.png")
    work = tempfile.mkdtemp(prefix="serve_browser_", dir=os.getcwd())
    server = driver = None
    wd = None
    started = time.time()
    try:
        server, url, log = start_server(nanoddp, make_checkpoint(nanoddp, work), work)
        port = free_port()
        driver = subprocess.Popen([chromedriver, f"--port={port}"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        wd = WebDriver(f"http://127.0.0.1:{port}")
        deadline = time.time() + 20
        while True:
            try:
                if wd.call("GET", "/status")["ready"]:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.time() > deadline:
                fail("chromedriver did not become ready")
            time.sleep(0.1)
        wd.start(chromium)
        wd.call("POST", wd.s("/url"), {"url": url})
        if wd.call("GET", wd.s("/title")) != "nanoddp chat":
            fail("the page's title is not 'nanoddp chat'")

        first = ask(wd, "Hello! Who said that?", 0)
        print(f"serve_browser: reply 1: {first['chunks']} token events in {first['reads']} network reads, "
              f"{first['tokens']} tokens: {first['text']!r}", flush=True)
        if first["chunks"] < 2:
            fail(f"the reply came as {first['chunks']} token event(s), not streamed token by token")
        second = ask(wd, "Tell me more.", 1)
        print(f"serve_browser: reply 2: {second['chunks']} token events in {second['reads']} network reads",
              flush=True)
        users = wd.script("return document.querySelectorAll('.user').length")
        if users != 2:
            fail(f"{users} user messages on the page, expected 2")
        notes = wd.script("return Array.from(document.querySelectorAll('.note')).map(n => n.textContent)")
        if not any("request limit" in n for n in notes):
            fail(f"the second request outgrew --max_request_bytes 120 but no note says the oldest turns went: {notes}")

        png = base64.b64decode(wd.call("GET", wd.s("/screenshot")))
        if not png.startswith(b"\x89PNG"):
            fail("the screenshot is not a PNG")
        with open(shot, "wb") as f:
            f.write(png)
        print(f"serve_browser: screenshot ({len(png)} bytes) in {shot}", flush=True)

        server.send_signal(signal.SIGTERM)
        if server.wait(timeout=20) != 0:
            log.seek(0)
            fail(f"the server exited {server.returncode} on SIGTERM:\n{log.read()}")
        print(f"serve_browser: passed in {time.time() - started:.1f} s", flush=True)
    finally:
        if wd and wd.session:
            try:
                wd.call("DELETE", wd.s(""))
            except Exception:
                pass
        for p in (driver, server):
            if p and p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
