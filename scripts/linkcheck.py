#!/usr/bin/env python3
"""Checks the built book (docs/book/, from `mdbook build docs`): every internal link and #anchor of every
page resolves to a file of the book and an id in it. External links (http:, https:, mailto:) are not
followed: nothing here touches the network. Exit status 1 with one line per broken link.

    python3 scripts/linkcheck.py docs/book
"""
import os
import sys
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit


class Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []  # (attribute value, line)

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name"):
                self.ids.add(value)
            elif (name == "href" and tag in ("a", "link")) or (name == "src" and tag in ("img", "script", "iframe")):
                self.links.append((value, self.getpos()[0]))


def main(root):
    pages = {}
    for folder, _, files in os.walk(root):
        for f in files:
            if f.endswith(".html"):
                path = os.path.normpath(os.path.join(folder, f))
                p = Page()
                with open(path, encoding="utf-8") as fh:
                    p.feed(fh.read())
                pages[path] = p
    if not pages:
        print(f"{root}: no HTML pages (run `mdbook build docs` first)")
        return 1
    broken = []
    for path, page in sorted(pages.items()):
        for link, line in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith("javascript:"):
                continue
            target = path
            if parts.path:
                target = os.path.normpath(os.path.join(os.path.dirname(path), unquote(parts.path)))
                if os.path.isdir(target):
                    target = os.path.join(target, "index.html")
                if not os.path.exists(target):
                    broken.append(f"{os.path.relpath(path, root)}:{line}: {link}: no such file")
                    continue
            if parts.fragment and target.endswith(".html"):
                ids = pages[target].ids if target in pages else set()
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{os.path.relpath(path, root)}:{line}: {link}: no #{parts.fragment} there")
    for b in broken:
        print(b)
    checked = sum(len(p.links) for p in pages.values())
    print(f"linkcheck: {len(pages)} pages, {checked} links, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "docs/book"))
