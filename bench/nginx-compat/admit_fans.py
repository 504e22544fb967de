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
    for i in range(first, count, step):
        user, jar = f"fan-{i}", {}

        def get(path):
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

        get("/queue/r1")
        for _ in range(100):
            status, body = get("/queue/r1/status")
            if status == 200 and json.loads(body).get("state") == "admitted":
                break
            time.sleep(0.05)
        if "wicket_a_r1" not in jar:
            sys.exit(f"{user} was not admitted: {status} {body[:200]!r}")
        lines[i] = "; ".join(f"{k}={v}" for k, v in jar.items()) + "\t" + user


threads = [threading.Thread(target=admit, args=(t, 8)) for t in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if any(l is None for l in lines):
    sys.exit("not every fan was admitted")
with open(out, "w") as f:
    f.write("\n".join(lines) + "\n")
