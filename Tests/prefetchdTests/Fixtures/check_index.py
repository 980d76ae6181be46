#!/usr/bin/env python3
"""Checks a prefetchd cache directory: every index row (entries and variants) names an existing file of the right
size and SHA-256, no file lacks a row, and no temporary file is left — unless --allow-temporary, for a daemon that
is still downloading. Prints problems; exit status 1 when there are any.

Usage: check_index.py CACHE_DIR [--allow-temporary]"""
import hashlib
import os
import sqlite3
import sys

root = sys.argv[1]
allow_temporary = "--allow-temporary" in sys.argv[2:]
db = sqlite3.connect(f"file:{root}/index.sqlite?mode=ro", uri=True)
problems = []
named = set()
rows = db.execute("SELECT key, file, bytes, sha256 FROM entries UNION ALL "
                  "SELECT key || ' ' || spec, file, bytes, sha256 FROM variants").fetchall()
for key, file, size, sha in rows:
    path = os.path.join(root, file)
    named.add(os.path.normpath(path))
    try:
        data = open(path, "rb").read()
    except OSError as error:
        problems.append(f"row {key}: {error}")
        continue
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
        problems.append(f"row {key}: file {file} has the wrong size or hash")
for directory, _, names in os.walk(os.path.join(root, "files")):
    for name in names:
        path = os.path.normpath(os.path.join(directory, name))
        if path not in named:
            problems.append(f"orphan file {path}")
leftovers = os.listdir(os.path.join(root, "tmp"))
if leftovers and not allow_temporary:
    problems.append(f"temporary files left: {leftovers[:5]}")
print("\n".join(problems) if problems else "ok")
sys.exit(1 if problems else 0)
