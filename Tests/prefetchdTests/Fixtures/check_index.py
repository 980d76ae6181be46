#!/usr/bin/env python3
"""Checks a prefetchd cache directory: every index row names an existing file of the right size and SHA-256,
no file lacks a row, and no temporary file is left. Prints problems; exit status 1 when there are any."""
import hashlib
import os
import sqlite3
import sys

root = sys.argv[1]
db = sqlite3.connect(f"file:{root}/index.sqlite?mode=ro", uri=True)
problems = []
named = set()
for key, file, size, sha in db.execute("SELECT key, file, bytes, sha256 FROM entries"):
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
if leftovers:
    problems.append(f"temporary files left: {leftovers[:5]}")
print("\n".join(problems) if problems else "ok")
sys.exit(1 if problems else 0)
