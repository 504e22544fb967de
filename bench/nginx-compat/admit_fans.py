"""Admits N distinct fans to room r1 through an edge and writes one line per fan for wrk
(distinct.lua): `<Cookie header>\t<user id>`. Each fan joins with its own user id (`X-User-Id`),
gets its own signed device cookie and queue ticket, and polls until admitted (the admission
cookie `wicket_a_r1`), as a browser would; 8 threads over kept-alive connections.

    python3 bench/nginx-compat/admit_fans.py 127.0.0.1:8080 10000 fans.txt
"""
import http.client
import json
import sys
import threading
import time
from http.cookies import SimpleCookie

host, port = sys.argv[1].rsplit(":", 1)
count, out = int(sys.argv[2]), sys.argv[3]
lines = [None] * count


def admit(first, step):
    conn = http.client.HTTPConnection(host, int(port), timeout=10)

    def get(user, jar, path):
        cookie = "; ".join(f"{k}={v}" for k, v in jar.items())
        headers = {"X-User-Id": user, "Accept": "application/json", "User-Agent": "wrk-fan", "Accept-Language": "en"}
        if cookie:
            headers["Cookie"] = cookie
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        body = r.read()
        for v in r.headers.get_all("Set-Cookie") or []:
            c = SimpleCookie()
            c.load(v)
            for k, m in c.items():
                jar[k] = m.value
        return r.status, body

    # Everyone joins first, then polls until admitted (a release lets a whole batch in).
    waiting = {}
    for i in range(first, count, step):
        waiting[i] = (f"fan-{i}", {})
        get(*waiting[i], "/queue/r1")
    deadline = time.time() + 120
    while waiting:
        if time.time() > deadline:
            sys.exit(f"{len(waiting)} fans were not admitted within 120 s")
        for i in list(waiting):
            user, jar = waiting[i]
            status, body = get(user, jar, "/queue/r1/status")
            if status == 200 and json.loads(body).get("state") == "admitted" and "wicket_a_r1" in jar:
                lines[i] = "; ".join(f"{k}={v}" for k, v in jar.items()) + "\t" + user
                del waiting[i]
        if waiting:
            time.sleep(0.2)


threads = [threading.Thread(target=admit, args=(t, 8)) for t in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if any(l is None for l in lines):
    sys.exit("not every fan was admitted")
with open(out, "w") as f:
    f.write("\n".join(lines) + "\n")
