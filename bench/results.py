"""Where a bench run's figures go, for the inline Python of the bench/*/run.sh scripts: keys of
bench/results/summary.json (others kept) and one marked section of bench/RESULTS.md (replaced, or appended
the first time). Each file is written whole and renamed into place, so a failed run leaves the old one.

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


def write_section(root, name, section):
    path = os.path.join(root, "bench/RESULTS.md")
    try:
        text = open(path).read()
    except OSError:
        text = "# Benchmark results\n\nFigures of the latest runs; each section names its command.\n"
    b, e = f"<!-- begin:{name} -->", f"<!-- end:{name} -->"
    if b in text and e in text:
        text = text[: text.index(b)] + section + text[text.index(e) + len(e):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    _replace(path, text)
