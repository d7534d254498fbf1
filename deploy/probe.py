#!/usr/bin/env python3
"""What deploy/check asks of a running stack, through its load balancer (stdlib only).

  probe.py listen URL   a subscriptions/listen stream on one replica hears every change
                        of a task made by workers and through other replicas
  probe.py load URL N SECONDS
                        creates N slow_compute tasks (each with an Idempotency-Key,
                        retried on errors as a client would), prints "created", then
                        polls until every one completed; fails on a task lost or failed
"""

import http.client
import json
import sys
import threading
import time
import urllib.parse
import uuid

VERSION = "2026-07-28"
CAPS = {"elicitation": {"form": {}}, "extensions": {"io.modelcontextprotocol/tasks": {}}}


class Endpoint:
    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = u.hostname, u.port or 80, u.path or "/mcp"
        self.next_id = 0

    def _request(self, method, params, headers=None, timeout=30):
        self.next_id += 1
        params = dict(params)
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": CAPS,
            "io.modelcontextprotocol/clientInfo": {"name": "deploy-probe", "version": "1"},
        }
        body = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        h = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": VERSION,
            "mcp-method": method,
        }
        name = params.get("name") or params.get("taskId")
        if name:
            h["mcp-name"] = name
        h.update(headers or {})
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        conn.request("POST", self.path, body, h)
        return conn, conn.getresponse()

    def call(self, method, params, headers=None):
        """One request; returns (result, replica) or raises on any error."""
        conn, resp = self._request(method, params, headers)
        try:
            data = resp.read()
        finally:
            conn.close()
        if resp.status != 200:
            raise RuntimeError(f"{method}: HTTP {resp.status}: {data[:200]!r}")
        msg = json.loads(data)
        if "error" in msg:
            raise RuntimeError(f"{method}: {msg['error']}")
        return msg["result"], resp.getheader("x-mcp-tasks-replica")

    def listen(self, task_ids):
        conn, resp = self._request(
            "subscriptions/listen", {"notifications": {"taskIds": task_ids}}, timeout=120
        )
        if resp.status != 200 or not (resp.getheader("content-type") or "").startswith("text/event-stream"):
            raise RuntimeError(f"listen: HTTP {resp.status} {resp.getheader('content-type')}: {resp.read()[:200]!r}")
        return conn, resp, resp.getheader("x-mcp-tasks-replica")


def sse_messages(resp):
    data = []
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.decode().rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif line == "" and data:
            yield json.loads("\n".join(data))
            data = []


def status(result):
    return result.get("status") or (result.get("task") or {}).get("status")


def listen_check(url):
    ep = Endpoint(url)
    created, created_by = ep.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "deploy-check.txt"}})
    task_id = created["taskId"]
    conn, resp, stream_replica = ep.listen([task_id])
    print(f"listen: task {task_id} created via {created_by}; stream on {stream_replica}")
    seen, answered_by = [], None
    for msg in sse_messages(resp):
        if msg.get("method") != "notifications/tasks":
            if "result" in msg or "error" in msg:
                break
            continue
        params = msg["params"]
        st = params.get("status")
        if params.get("taskId") != task_id:
            raise SystemExit(f"listen: a notification for another task: {params}")
        seen.append(st)
        print(f"listen: notification status={st} {params.get('statusMessage', '')!r}")
        if st == "input_required" and answered_by is None:
            # Through the balancer until another replica than the stream's answers.
            for _ in range(20):
                _, r = ep.call("tasks/get", {"taskId": task_id})
                if r != stream_replica:
                    break
            _, answered_by = ep.call(
                "tasks/update",
                {
                    "taskId": task_id,
                    "inputResponses": {"confirm_delete": {"action": "accept", "content": {"confirm": True}}},
                },
            )
            print(f"listen: answered via {answered_by}")
        if st in ("completed", "failed", "cancelled"):
            break
    conn.close()
    if answered_by is None or answered_by == stream_replica or stream_replica is None:
        raise SystemExit(f"listen: the answer did not go through another replica ({answered_by} vs {stream_replica})")
    if "input_required" not in seen or seen[-1] != "completed" or "working" not in seen:
        raise SystemExit(f"listen: expected working, input_required, ..., completed; got {seen}")
    print(f"listen: OK ({' -> '.join(seen)})")


def with_retries(what, fn, deadline):
    delay = 0.1
    while True:
        try:
            return fn()
        except Exception as e:  # a replica killed mid-request, a 502/503 from the balancer
            if time.time() > deadline:
                raise SystemExit(f"load: {what}: still failing at the deadline: {e}")
            time.sleep(delay)
            delay = min(delay * 2, 2)


def load(url, n, seconds):
    deadline = time.time() + 600
    ids, errors, replicas = {}, {}, {}
    lock = threading.Lock()

    def create(i):
        key = f"deploy-check-{uuid.uuid4()}"

        def once():
            try:
                return Endpoint(url).call(
                    "tools/call",
                    {"name": "slow_compute", "arguments": {"seconds": seconds, "label": f"load-{i}"}},
                    {"idempotency-key": key},
                )
            except Exception as e:
                with lock:
                    why = str(e)[:60]
                    errors[why] = errors.get(why, 0) + 1
                raise

        result, replica = with_retries(f"create {i}", once, deadline)
        with lock:
            ids[i] = result["taskId"]
            replicas[replica] = replicas.get(replica, 0) + 1

    threads = [threading.Thread(target=create, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
        time.sleep(0.01)
    for t in threads:
        t.join()
    if len(ids) != n:
        raise SystemExit(f"load: only {len(ids)} of {n} tasks created")
    print(f"load: created {n} tasks via {dict(sorted(replicas.items(), key=str))}", flush=True)
    for why, count in sorted(errors.items(), key=lambda kv: -kv[1]):
        print(f"load: retried {count} times: {why}", flush=True)
    print("created", flush=True)

    pending, outcome = dict(ids), {}
    while pending:
        if time.time() > deadline:
            raise SystemExit(f"load: {len(pending)} tasks unfinished at the deadline")
        for i, tid in list(pending.items()):
            res, _ = with_retries(f"get {tid}", lambda: Endpoint(url).call("tasks/get", {"taskId": tid}), deadline)
            st = status(res)
            if st in ("completed", "failed", "cancelled"):
                outcome[i] = st
                del pending[i]
        if pending:
            time.sleep(1)
    bad = {i: s for i, s in outcome.items() if s != "completed"}
    if bad:
        raise SystemExit(f"load: {len(bad)} tasks did not complete: {bad}")
    print(f"load: OK, all {n} tasks completed")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "listen":
        listen_check(sys.argv[2])
    elif cmd == "load":
        load(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(__doc__)
