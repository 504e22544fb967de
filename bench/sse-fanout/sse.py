"""Clients of a room's event stream (or of its status poll) for bench/sse-fanout/run.sh.

  python3 sse.py PORT N ADMIN_PORT TOKEN MODE [CA]     MODE: events | poll

Each of N visitors joins room r1 (GET /queue/r1, JSON; its cookies kept), then says "joined" and
waits for a line on stdin. Then each opens GET /queue/r1/events (events: reads the first frame) or
polls GET /queue/r1/status once on a keep-alive connection (poll), says "open N" and waits for a
line. On "pause" it reads what each stream holds, pauses the room through the admin API and
times, per stream, the arrival of the first frame that says "paused": the kernel's receive time of
its segment (SO_TIMESTAMPNS; over HTTPS peeked on the raw socket before the TLS read), so the
client's own pace does not count. It prints one JSON line of figures, then waits for a line and exits.
Sockets are spread over 127.0.0.2-9 for ports.
"""
import json, selectors, socket, ssl, struct, sys, time, urllib.request

port, n, admin, token, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
ca = sys.argv[6] if len(sys.argv) > 6 else None
ctx = ssl.create_default_context(cafile=ca) if ca else None
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)

def connect(i):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if mode == "events":
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.bind((f"127.0.0.{2 + i % 8}", 0))
    s.connect(("127.0.0.1", port))
    if ctx:
        s = ctx.wrap_socket(s, server_hostname="localhost")
    return s

def stamp(anc):
    for level, kind, raw in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = struct.unpack("qq", raw[:16])
            return sec + nsec / 1e9
    return time.time()

def read_head(s, buf=b""):
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    return head.decode("latin-1"), rest

def answer(s):
    head, rest = read_head(s)
    length = next(int(l.split(":", 1)[1]) for l in head.split("\r\n") if l.lower().startswith("content-length:"))
    while len(rest) < length:
        rest += s.recv(65536)
    return head, rest[:length]

cookies = []
for i in range(n):
    s = connect(i)
    s.sendall(b"GET /queue/r1 HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\nConnection: close\r\n\r\n")
    head, _ = answer(s)
    jar = [l.split(":", 1)[1].strip().split(";", 1)[0] for l in head.split("\r\n") if l.lower().startswith("set-cookie:")]
    cookies.append("; ".join(jar))
    s.close()
print("joined", len(cookies), flush=True)
sys.stdin.readline()

conns = []
first_told = []
for i, jar in enumerate(cookies):
    s = connect(i)
    if mode == "events":
        s.sendall(f"GET /queue/r1/events HTTP/1.1\r\nHost: localhost\r\nCookie: {jar}\r\n\r\n".encode())
        head, rest = read_head(s)
        assert " 200 " in head.split("\r\n")[0], head
        while b"data:" not in rest:
            rest += s.recv(65536)
    else:
        s.sendall(f"GET /queue/r1/status HTTP/1.1\r\nHost: localhost\r\nCookie: {jar}\r\n\r\n".encode())
        head, body = answer(s)
        assert " 200 " in head.split("\r\n")[0], head
        first_told.append(json.loads(body)["poll_after_ms"] / 1000.0)
    conns.append(s)
print("open", len(conns), flush=True)

cmd = sys.stdin.readline().strip()
if cmd == "pause" and mode == "events":
    sel = selectors.DefaultSelector()
    for i, s in enumerate(conns):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
    # What arrived before the pause (frames at the poll interval) is read first, so the next
    # segment on each socket is news.
    for s in conns:
        try:
            while s.recv(65536):
                pass
        except (BlockingIOError, ssl.SSLWantReadError):
            pass
    tails = [b""] * len(conns)
    got = [None] * len(conns)
    left = len(conns)
    req = urllib.request.Request(f"http://127.0.0.1:{admin}/admin/rooms/r1/pause", method="POST", data=b"{}",
                                 headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
    t0 = time.time()
    urllib.request.urlopen(req, timeout=10).read()
    deadline = time.monotonic() + 15
    closed = 0
    while left and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=1):
            i, s = key.data, key.fileobj
            try:
                if ctx:
                    # The kernel's receive time of the segment at the head of the socket's queue
                    # (peeked on the raw socket), then the TLS records read through.
                    raw = socket.socket(fileno=s.fileno())
                    try:
                        _, anc, _, _ = raw.recvmsg(1, socket.CMSG_SPACE(16), socket.MSG_PEEK)
                        at = stamp(anc)
                    except BlockingIOError:
                        at = time.time()
                    finally:
                        raw.detach()
                    data = s.recv(65536)
                    # Records already decrypted into the TLS object: epoll does not see them.
                    while data and s.pending():
                        data += s.recv(65536)
                else:
                    data, anc, _, _ = s.recvmsg(65536, socket.CMSG_SPACE(16))
                    at = stamp(anc)
            except (BlockingIOError, ssl.SSLWantReadError):
                continue
            if not data:
                sel.unregister(s); closed += 1; left -= 1
                continue
            tails[i] = (tails[i] + data)[-4096:]
            if got[i] is None and b'"state":"paused"' in tails[i]:
                got[i] = at - t0
                left -= 1
                sel.unregister(s)
    lat = sorted(x for x in got if x is not None)
    q = lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 1) if lat else None
    print(json.dumps({"streams": len(conns), "reached": len(lat), "closed": closed,
                      "p50_ms": q(0.50), "p99_ms": q(0.99), "max_ms": round(lat[-1] * 1000, 1) if lat else None,
                      "timing": "kernel receive time"}), flush=True)
    sys.stdin.readline()
elif cmd.startswith("run ") and mode == "poll":
    # Pollers at the rate the room tells them: each connection polls its status again
    # `poll_after_ms` (from its last answer) after that answer arrived, for SECONDS. Figures: the
    # polls answered, what the told intervals asked for, each poll's time from its request to its
    # whole answer (P50 / P99 / max), and how late each poll went out against its due time (the
    # client's own lag: were the fans really served at their told rate).
    seconds = float(cmd.split()[1])
    import heapq
    sel = selectors.DefaultSelector()
    reqs = [f"GET /queue/r1/status HTTP/1.1\r\nHost: localhost\r\nCookie: {jar}\r\n\r\n".encode() for jar in cookies]
    bufs = [b""] * len(conns)
    sent_at = [None] * len(conns)
    due = []
    start = time.monotonic()
    end = start + seconds
    rng = __import__("random").Random(7)
    # The first polls spread over each fan's told interval, as fans who joined at different times
    # would be; the rate is counted after the longest first interval (the steady state).
    for i in range(len(conns)):
        conns[i].setblocking(False)
        sel.register(conns[i], selectors.EVENT_READ, i)
        heapq.heappush(due, (start + rng.random() * first_told[i], i))
    steady = start + max(first_told)
    steady_answered = 0
    lat, lag, told, answered, errors = [], [], [], 0, 0
    def parse(i):
        global answered, errors, steady_answered
        buf = bufs[i]
        if b"\r\n\r\n" not in buf:
            return False
        head, rest = buf.split(b"\r\n\r\n", 1)
        length = next((int(l.split(b":", 1)[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")), 0)
        if len(rest) < length:
            return False
        bufs[i] = rest[length:]
        now = time.monotonic()
        if not head.startswith(b"HTTP/1.1 200"):
            errors += 1
            after = 5.0
        else:
            try:
                after = json.loads(rest[:length])["poll_after_ms"] / 1000.0
            except Exception:
                errors += 1
                after = 5.0
        if now >= steady:
            steady_answered += 1
        lat.append(now - sent_at[i])
        told.append(after)
        sent_at[i] = None
        answered += 1
        if now + after < end:
            heapq.heappush(due, (now + after, i))
        return True
    while time.monotonic() < end:
        now = time.monotonic()
        while due and due[0][0] <= now:
            at, i = heapq.heappop(due)
            lag.append(now - at)
            sent_at[i] = time.monotonic()
            try:
                conns[i].sendall(reqs[i])
            except (BlockingIOError, OSError):
                errors += 1
        timeout = max(0.0, min(0.05, (due[0][0] - time.monotonic()) if due else 0.05))
        for key, _ in sel.select(timeout=timeout):
            i, s = key.data, key.fileobj
            try:
                data = s.recv(65536)
            except (BlockingIOError, ssl.SSLWantReadError):
                continue
            if not data:
                sel.unregister(s); errors += 1
                continue
            bufs[i] += data
            while sent_at[i] is not None and parse(i):
                pass
    lat.sort(); lag.sort()
    q = lambda xs, p: round(xs[min(len(xs) - 1, int(p * len(xs)))] * 1000, 1) if xs else None
    mean_told = sum(told) / len(told) if told else None
    print(json.dumps({"pollers": len(conns), "seconds": seconds, "answered": answered, "errors": errors,
                      "polls_per_second": round(steady_answered / (end - steady), 1) if end > steady else None,
                      "told_interval_mean_s": round(mean_told, 3) if mean_told else None,
                      "told_rate_per_second": round(len(conns) / mean_told, 1) if mean_told else None,
                      "latency_p50_ms": q(lat, 0.50), "latency_p99_ms": q(lat, 0.99), "latency_max_ms": q(lat, 1.0),
                      "send_lag_p50_ms": q(lag, 0.50), "send_lag_p99_ms": q(lag, 0.99)}), flush=True)
    sys.stdin.readline()
