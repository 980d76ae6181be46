#!/usr/bin/env python3
"""prefetchd stress suite (issue 9): chaos, hostile origin, hostile clients, full disk, access and egress, bounds,
the network lab.

    python3 stress/stress.py --bin-dir .build/release [--quick] [--only GROUP,...] [--fuzz-seconds N]

Each group starts its own daemon(s) and origin on 127.0.0.1 in a temporary directory and stops them by PID, also
on failure. Prints one table (group, scenario, expected, observed, pass) and the daemon's peak RSS per group; exits
1 when a row fails. `--quick` scales every group down to seconds (the subset `make test` runs).
"""
import argparse
import os
import shutil
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lib import Failed, Processes, Table, log  # noqa: E402
import groups_chaos  # noqa: E402
import groups_origin  # noqa: E402
import groups_clients  # noqa: E402
import groups_disk  # noqa: E402
import groups_access  # noqa: E402
import groups_bounds  # noqa: E402
import groups_network  # noqa: E402

GROUPS = {
    "chaos": groups_chaos.run,
    "origin": groups_origin.run,
    "clients": groups_clients.run,
    "disk": groups_disk.run,
    "access": groups_access.run,
    "bounds": groups_bounds.run,
    "network": groups_network.run,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin-dir", default=".build/release")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(GROUPS))
    parser.add_argument("--fuzz-seconds", type=int, default=None,
                        help="the request fuzz target's time; the header and request-number targets share as much again "
                        "(default 180, --quick 5)")
    parser.add_argument("--fuzz-dir", default=None,
                        help="the fuzz targets, already built (else built by stress/build_fuzz.sh)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directories")
    args = parser.parse_args()
    args.binary = os.path.abspath(os.path.join(args.bin_dir, "prefetchd"))
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"no prefetchd at {args.binary}")
    if args.fuzz_seconds is None:
        args.fuzz_seconds = 5 if args.quick else 180
    table = Table()
    for name in args.only.split(","):
        processes = Processes()
        scratch_dirs = []
        try:
            GROUPS[name](args, table, processes, scratch_dirs)
        except Exception as error:  # a group that breaks is a failed row, never a missing one
            traceback.print_exc()
            table.add(name, "group ran to the end", "no exception", f"{type(error).__name__}: {error}", False)
        finally:
            processes.stop_all()
            if not args.keep:
                for directory in scratch_dirs:
                    shutil.rmtree(directory, ignore_errors=True)
    print(("QUICK SUBSET (make stress-quick)" if args.quick else "FULL RUN (make stress)"))
    print(table.render())
    sys.exit(0 if all(row[4] is not False for row in table.rows) else 1)


if __name__ == "__main__":
    main()
