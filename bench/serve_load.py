#!/usr/bin/env python3
"""Load test of an OpenAI-compatible server on loopback, bounded in time
(standard library only): `radix serve`, or llama.cpp's `llama-server` on the
same GGUF file as its peer.

Starts the server (`--server radix`: `BINARY serve --port 0 --max-batch
CLIENTS --embed-model none --model MODEL`; `--server llama-server`:
`BINARY -m MODEL -t THREADS -np CLIENTS -c CONTEXT*CLIENTS` on a free port,
so that each of its CLIENTS slots holds CONTEXT positions, as radix's), then:
1. one streamed request alone, three times: the median of its decode
   tokens/s (tokens after the first over the time after the first);
2. CLIENTS concurrent clients, each sending REQUESTS streamed requests of
   TOKENS tokens one after another: failures, aggregate decode tokens/s
   (all tokens over the wall time), time to first token p50 and p99;
3. with --rss, RSS of the server after 100 and after 1,000 small requests.
Every request is a greedy completion of the same prompt.

With --shared-prefix N, a prompt cache's scenario instead: a system prompt
of about N tokens, then one request alone (system prompt and question 0:
the time to its first token is the cold one) and CLIENTS concurrent
requests, each the system prompt and a question of its own; printed: the
first request's time to first token, the others' p50, p99 and largest, and
the largest over the first's. Prints one JSON
object on one line and exits 1 if a request failed or the deadline passed.
Example (release build, the issue's figures):

    cargo build --release -p radix-cli
    bench/serve_load.py target/release/radix --clients 16 --requests 8 --tokens 64 --rss
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

PROMPT = "Once upon a time"


MODEL = "smollm2"
# llama-server's weight repacking, as `start` found it.
REPACK = [None]


def stream(addr, max_tokens, deadline, prompt=PROMPT, usage=None):
    """One streamed completion: (time to first token, tokens, decode seconds).
    The tokens are those `usage` counts, else the chunks with text; the
    last `usage` object is stored in the dict `usage` if given."""
    host, port = addr.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=max(1.0, deadline - time.time()))
    body = json.dumps(
        {
            "model": MODEL,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    t0 = time.time()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"status {res.status}: {res.read()[:200]!r}")
    first, tokens, chunks, done = None, None, 0, False
    for line in res:
        line = line.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[len("data: "):]
        if data == "[DONE]":
            done = True
            break
        chunk = json.loads(data)
        if "error" in chunk:
            raise RuntimeError(chunk["error"]["message"])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
            if usage is not None:
                usage.update(chunk["usage"])
        if chunk.get("choices") and chunk["choices"][0].get("text"):
            chunks += 1
            if first is None:
                first = time.time()
    end = time.time()
    conn.close()
    if not done:
        raise RuntimeError("the stream ended without [DONE]")
    first = first or end
    return first - t0, chunks if tokens is None else tokens, end - first


def system_prompt(n_tokens):
    """About `n_tokens` tokens of a system prompt (numbered rules, about 20
    tokens each, so that no two sentences are alike)."""
    rules = []
    for i in range((n_tokens + 19) // 20):
        rules.append(f"Rule {i + 1}: when the user asks about topic number {i * 7 % 97}, "
                     f"answer briefly and cite section {i % 13}.")
    return "You are a helpful assistant. " + " ".join(rules) + "\n"


def shared_prefix(args, addr, deadline):
    """The prompt cache's scenario (see the module's doc)."""
    system = system_prompt(args.shared_prefix)
    question = lambda i: f"Question {i}: what is {i} plus {i + 2}? Answer:"  # noqa: E731
    # Warm up on another text, so that the first request finds nothing.
    stream(addr, 4, deadline)
    usage = {}
    first, _, _ = stream(addr, 8, deadline, system + question(0), usage)
    out = {"prompt_tokens": usage.get("prompt_tokens"), "first_ttft_s": first,
           "first_cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens")}
    ttfts, cached, failures = [], [], []
    lock = threading.Lock()

    def client(i):
        u = {}
        try:
            ttft, _, _ = stream(addr, 8, deadline, system + question(i), u)
            with lock:
                ttfts.append(ttft)
                cached.append((u.get("prompt_tokens_details") or {}).get("cached_tokens"))
        except Exception as e:  # noqa: BLE001 - every failure is counted
            with lock:
                failures.append(str(e))

    threads = [threading.Thread(target=client, args=(i + 1,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ttfts.sort()
    out["failed"] = len(failures)
    out["failures"] = failures[:5]
    out["cached_tokens"] = cached
    if ttfts:
        out["rest_ttft_p50_s"] = statistics.median(ttfts)
        out["rest_ttft_p99_s"] = ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))]
        out["rest_ttft_max_s"] = ttfts[-1]
        out["rest_max_over_first"] = ttfts[-1] / first
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args):
    """Starts the server and waits until it answers: the process and its `host:port`."""
    global MODEL
    if args.server == "radix":
        MODEL = args.model
        server = subprocess.Popen(
            [args.binary, "serve", "--port", "0", "--host", "127.0.0.1", "--model", args.model,
             "--max-batch", str(args.clients), "--max-queue", str(4 * args.clients),
             "--context", str(args.context), "--embed-model", "none"],
            stdout=subprocess.PIPE, text=True,
        )
        line = server.stdout.readline()
        prefix = "radix serve: listening on http://"
        if not line.startswith(prefix):
            server.kill()
            sys.exit(f"radix serve did not start: {line!r}")
        return server, line.strip()[len(prefix):]
    # llama.cpp's AMX weight repacking dies of a signal on machines whose
    # AMX state the kernel does not hand out (see bench/peers/llama_cpp.py's
    # repack_flags): then the server runs with repacking off, as the other
    # llama.cpp tools do there, and the result says so.
    for repack in ([], ["--no-repack"]):
        port = free_port()
        server = subprocess.Popen(
            [args.binary, "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
             "-t", str(args.threads), "-tb", str(args.threads), "-np", str(args.clients),
             "-c", str(args.context * args.clients), "--no-webui", *repack],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        addr = f"127.0.0.1:{port}"
        for _ in range(600):
            if server.poll() is not None:
                break
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200 and probe(addr):
                    REPACK[0] = "off (it died of a signal)" if repack else "on (llama.cpp's default)"
                    return server, addr
            except OSError:
                pass
            time.sleep(0.5)
        if server.poll() is None:
            server.kill()
            sys.exit("llama-server did not become ready in 300 s")
        if server.returncode >= 0:
            sys.exit(f"llama-server exited with {server.returncode}")
    sys.exit(f"llama-server died of signal {-server.returncode} with repacking on and off")


def probe(addr):
    """Whether a first product runs (repacking dies there, not at load)."""
    try:
        stream(addr, 1, time.time() + 60)
        return True
    except (OSError, RuntimeError, http.client.HTTPException):
        return False


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary", help="the radix binary, or llama-server's")
    ap.add_argument("--server", choices=["radix", "llama-server"], default="radix")
    ap.add_argument("--model", default="smollm2",
                    help="what radix serve loads (smollm2 or a GGUF file); llama-server needs a file")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", "2")),
                    help="llama-server's threads (radix's XLA runtime has no setting)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=8, help="per client")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--rss", action="store_true", help="also measure RSS after 100 and 1,000 requests")
    ap.add_argument("--deadline", type=float, default=900, help="seconds for the whole run")
    ap.add_argument("--shared-prefix", type=int, metavar="N",
                    help="run the prompt cache's scenario with a system prompt of about N tokens")
    args = ap.parse_args()
    deadline = time.time() + args.deadline

    server, addr = start(args)
    try:
        if args.shared_prefix:
            out = {"server": args.server, "model": args.model, "clients": args.clients,
                   "context": args.context, "shared_prefix": args.shared_prefix,
                   "load_average_before": os.getloadavg()}
            out.update(shared_prefix(args, addr, deadline))
            out["deadline_passed"] = time.time() > deadline
            out["load_average_after"] = os.getloadavg()
            out["llama_repack"] = REPACK[0]
            print(json.dumps({"system": args.server, "bench": "serve-shared-prefix",
                              "samples": {}, "meta": out}))
            sys.exit(0 if out["failed"] == 0 and not out["deadline_passed"] else 1)
        out = {"server": args.server, "model": args.model, "clients": args.clients,
               "requests_per_client": args.requests, "tokens": args.tokens, "context": args.context,
               "load_average_before": os.getloadavg()}

        stream(addr, 4, deadline)  # warm up
        singles = []
        for _ in range(3):
            _, n, secs = stream(addr, args.tokens, deadline)
            if secs > 0:
                singles.append((n - 1) / secs)
        out["single_decode_tokens_per_s_runs"] = singles
        out["single_decode_tokens_per_s"] = statistics.median(singles) if singles else None

        ttfts, tokens, failures = [], [0], []
        lock = threading.Lock()

        def client():
            for _ in range(args.requests):
                if time.time() > deadline:
                    with lock:
                        failures.append("deadline")
                    return
                try:
                    ttft, n, _ = stream(addr, args.tokens, deadline)
                    with lock:
                        ttfts.append(ttft)
                        tokens[0] += n
                except Exception as e:  # noqa: BLE001 - every failure is counted
                    with lock:
                        failures.append(str(e))

        t0 = time.time()
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        ttfts.sort()
        out["failed"] = len(failures)
        out["failures"] = failures[:5]
        out["aggregate_decode_tokens_per_s"] = tokens[0] / wall
        out["speedup_over_single"] = (
            out["aggregate_decode_tokens_per_s"] / out["single_decode_tokens_per_s"]
            if out["single_decode_tokens_per_s"] else None
        )
        if ttfts:
            out["ttft_p50_s"] = statistics.median(ttfts)
            out["ttft_p99_s"] = ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))]

        if args.rss:
            def small(n):
                # As many at once as there are slots.
                per = [n // args.clients + (i < n % args.clients) for i in range(args.clients)]
                def run(k):
                    for _ in range(k):
                        try:
                            stream(addr, 4, deadline)
                        except Exception as e:  # noqa: BLE001
                            with lock:
                                failures.append(str(e))
                ts = [threading.Thread(target=run, args=(k,)) for k in per]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
            small(100)
            out["rss_after_100_mib"] = rss_kib(server.pid) / 1024
            small(900)
            out["rss_after_1000_mib"] = rss_kib(server.pid) / 1024
            out["rss_growth_mib"] = out["rss_after_1000_mib"] - out["rss_after_100_mib"]
            out["failed"] = len(failures)
        out["deadline_passed"] = time.time() > deadline
        out["load_average_after"] = os.getloadavg()
        out["llama_repack"] = REPACK[0]
        print(json.dumps({"system": args.server, "bench": "serve", "samples": {}, "meta": out}))
        ok = out["failed"] == 0 and not out["deadline_passed"]
        sys.exit(0 if ok else 1)
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    main()
