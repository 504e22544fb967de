"""Where a bench run's figures go, for the inline Python of the bench/*/run.sh scripts: keys of
bench/results/summary.json (others kept) and one marked section of the benchmark's page
bench/results/<page>.md (replaced, or appended the first time; page_for, the same rules as bench/src/report.rs).
bench/RESULTS.md is the summary table over the pages. Each file is written whole and renamed into place, so a failed run leaves the old one.

    sys.path.insert(0, os.path.join(root, "bench")); import results
    results.update_summary(root, {"static_vs_nginx": entry})
    results.write_section(root, "edge-static-vs-nginx", section)   # section carries its begin/end markers
"""
import json
import os


def _replace(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def update_summary(root, entries):
    path = os.path.join(root, "bench/results/summary.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        summary = json.load(open(path))
    except (OSError, ValueError):
        summary = {}
    summary.update(entries)
    _replace(path, json.dumps(summary, indent=2, sort_keys=True) + "\n")


PAGES = [("core-holds", "core-holds"), ("hold-vs-evalsha", "core-holds"), ("embedded-durable", "core-holds"),
         ("redis-wait", "core-holds"), ("surge-megasale", "surge-megasale"), ("surge-crashes", "surge-crashes"),
         ("surge-bots", "surge-bots"), ("rooms", "rooms"), ("nginx-auth", "nginx-compat"),
         ("nginx-openresty", "nginx-compat")]


def page_for(name):
    if name == "edge-static-vs-nginx":
        return "edge-static"
    return next((page for prefix, page in PAGES if name.startswith(prefix)), name)


def page_path(root, page):
    return os.path.join(root, "bench/results", page + ".md")


def page_text(root, page):
    """The page's text, or a new page's heading."""
    try:
        return open(page_path(root, page)).read()
    except OSError:
        return f"# {page}\n\nRuns of this benchmark, newest figures as each run wrote them; the summary is in bench/RESULTS.md.\n"


def write_section(root, name, section):
    page = page_for(name)
    path = page_path(root, page)
    text = page_text(root, page)
    b, e = f"<!-- begin:{name} -->", f"<!-- end:{name} -->"
    if b in text and e in text:
        text = text[: text.index(b)] + section + text[text.index(e) + len(e):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    _replace(path, text)
