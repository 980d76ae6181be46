#!/usr/bin/env python3
"""Generates the benchmark corpus once: real JPEGs made with ImageMagick, kept in bench/corpus/ (git-ignored).

    small/0001.jpg … 2000.jpg   400×300, 20–40 KB (64 tiles of a noisy plasma × 8 qualities × 4 mirrorings)
    large/01.jpg … 20.jpg       4000×3000 photos-like (a noisy plasma, each shifted and at its own quality)
    b1/000.jpg …                1000×750, about 200 KB (16 tiles of the large picture × 6 qualities × 2 mirrorings)

Content varies from file to file, so sizes differ. A stamp file records the recipe version; a corpus with the
current stamp is reused as is. Takes about half a minute on two cores.
"""

import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile

VERSION = "3"
SMALL_COUNT = 2000
LARGE_COUNT = 20


def convert_binary():
    """The real ImageMagick `convert` (a wrapper script earlier on PATH would add its own start-up time)."""
    for candidate in ("/usr/bin/convert-im6.q16", "/usr/bin/convert"):
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("convert")
    if not found:
        sys.exit("corpus: ImageMagick's convert is missing (make bench-deps installs it)")
    return found


def run(argv):
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def sizes(directory):
    return sorted(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))


def generate(root, log=print):
    stamp = os.path.join(root, ".complete")
    try:
        with open(stamp) as f:
            if f.read().strip() == VERSION:
                return False
    except OSError:
        pass
    convert = convert_binary()
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    work = tempfile.mkdtemp(prefix="corpus-", dir=root)
    small_base = os.path.join(work, "small.miff")
    large_base = os.path.join(work, "large.miff")
    log("corpus: generating real JPEGs with ImageMagick into %s (once)" % root)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        bases = [
            pool.submit(run, [convert, "-size", "3200x2400", "-seed", "11", "plasma:fractal",
                              "-attenuate", "0.5", "+noise", "Gaussian", small_base]),
            pool.submit(run, [convert, "-size", "4000x3000", "-seed", "23", "plasma:fractal",
                              "-attenuate", "0.4", "+noise", "Gaussian", large_base]),
        ]
        for future in bases:
            future.result()

        jobs = []
        # small: 64 tiles of 400×300 × 8 qualities × 4 mirrorings = 2048, numbered; the first 2000 are kept.
        small_dir = os.path.join(work, "small")
        os.makedirs(small_dir)
        mirrors = [[], ["-flip"], ["-flop"], ["-flip", "-flop"]]
        for m, mirror in enumerate(mirrors):
            for q, quality in enumerate(range(82, 90)):
                prefix = os.path.join(small_dir, "m%dq%d_" % (m, q))
                jobs.append([convert, small_base] + mirror + ["-crop", "400x300", "+repage", "-sampling-factor",
                                                             "4:2:0", "-quality", str(quality), prefix + "%02d.jpg"])
        # large: 20 shifted copies, each at its own quality.
        large_dir = os.path.join(root, "large")
        os.makedirs(large_dir)
        for i in range(LARGE_COUNT):
            jobs.append([convert, large_base, "-roll", "+%d+%d" % (i * 197, i * 149)]
                        + (["-flop"] if i % 2 else [])
                        + ["-sampling-factor", "4:2:0", "-quality", str(80 + i % 10),
                           os.path.join(large_dir, "%02d.jpg" % (i + 1))])
        # b1: 16 tiles of 1000×750 × 6 qualities × 2 mirrorings = 192 files of about 200 KB.
        b1_dir = os.path.join(work, "b1")
        os.makedirs(b1_dir)
        for m, mirror in enumerate([[], ["-flop"]]):
            for q, quality in enumerate(range(86, 92)):
                prefix = os.path.join(b1_dir, "m%dq%d_" % (m, q))
                jobs.append([convert, large_base] + mirror + ["-crop", "1000x750", "+repage", "-sampling-factor",
                                                             "4:2:0", "-quality", str(quality), prefix + "%02d.jpg"])
        for future in [pool.submit(run, job) for job in jobs]:
            future.result()

    for name, count in (("small", SMALL_COUNT), ("b1", None)):
        source = os.path.join(work, name)
        target = os.path.join(root, name)
        os.makedirs(target)
        files = sorted(os.listdir(source))
        if count is not None:
            files = files[:count]
        width = 4 if name == "small" else 3
        for i, f in enumerate(files):
            os.rename(os.path.join(source, f), os.path.join(target, "%0*d.jpg" % (width, i + (1 if name == "small" else 0))))
    shutil.rmtree(work)
    for name in ("small", "large", "b1"):
        s = sizes(os.path.join(root, name))
        log("corpus: %-5s %4d files, %d–%d bytes (median %d)" % (name, len(s), s[0], s[-1], s[len(s) // 2]))
    with open(stamp, "w") as f:
        f.write(VERSION + "\n")
    return True


if __name__ == "__main__":
    generate(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus"))
