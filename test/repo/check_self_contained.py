#!/usr/bin/env python3
"""Fails when a tracked file names a path outside the checkout.

Every file a test, an example, a spec or a documented command reads must
live in the repository, so a clone with nothing beside it works. This
checks every tracked text file for

  * a relative path that climbs out of the checkout: a run of `../`
    followed by a name, which resolves above the repository root both from
    the file's own folder and from the root (where documented commands
    run), or which names `shared/` (a folder beside a developer's checkout
    that users do not have);
  * an absolute path into a work area (/work/, /home/, /root/, /Users/,
    /mnt/), which exists on one machine only.

Hostile inputs that tests use on purpose are listed, with the file that
names them, in outside-paths.allow beside this script.

usage: check_self_contained.py REPO_ROOT
Exit 0: clean. Exit 1: each offending place printed as FILE:LINE: PATH.
Exit 2: bad usage or not a directory.
"""
import os
import re
import subprocess
import sys

CLIMB = re.compile(r"(?<![\w.])(?:\.\./)+[A-Za-z0-9_][\w.\-/]*[\w/]|(?<![\w.])(?:\.\./)+[A-Za-z0-9_]")
SIBLING = re.compile(r"(?:\.\./)+shared(?:/|$)")
# A test's own temporary folder (lit's %t/work/...) is not a work area:
# the lookbehind skips paths that follow a name or a substitution.
ABSOLUTE = re.compile(r"(?<![\w.%}])/(?:work|home|root|Users|mnt)/[\w.\-/]+")


def tracked_files(root):
    """The checkout's tracked files; outside git (a source tarball), every
    file but build trees and VCS folders."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"],
                             capture_output=True, check=True).stdout
        return [p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith((".git", "build"))]
            files += [os.path.relpath(os.path.join(folder, n), root)
                      for n in names]
        return files


def outside(root, base, path):
    """True when base/path resolves above root."""
    resolved = os.path.normpath(os.path.join(base, path))
    return os.path.relpath(resolved, root).startswith("..")


def climbs_out(root, folder, path):
    """True when `path` leaves the checkout both from the file's own folder
    and from the root, or names the sibling folder `shared/` at all."""
    if SIBLING.match(path):
        return True
    return outside(root, folder, path) and outside(root, root, path)


def allowed_places():
    """FILE:PATH entries of outside-paths.allow beside this script."""
    allow = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "outside-paths.allow")
    entries = set()
    with open(allow) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                entries.add(line)
    return entries


def check(root):
    root = os.path.realpath(root)
    allowed = allowed_places()
    problems = []
    for rel in tracked_files(root):
        path = os.path.join(root, rel)
        if os.path.basename(rel) == "outside-paths.allow":
            continue  # the list of exceptions names them
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if b"\0" in data:
            continue  # binary: code objects, bundles, .npy
        text = data.decode("utf-8", errors="replace")
        folder = os.path.dirname(path)
        for number, line in enumerate(text.splitlines(), 1):
            for match in CLIMB.finditer(line):
                named = match.group(0)
                if (climbs_out(root, folder, named)
                        and f"{rel}:{named}" not in allowed):
                    problems.append(f"{rel}:{number}: {named}")
            for match in ABSOLUTE.finditer(line):
                named = match.group(0)
                if f"{rel}:{named}" not in allowed:
                    problems.append(f"{rel}:{number}: {named}")
    return problems


def main():
    if len(sys.argv) != 2:
        print("usage: check_self_contained.py REPO_ROOT", file=sys.stderr)
        return 2
    if not os.path.isdir(sys.argv[1]):
        print(f"check_self_contained: {sys.argv[1]}: not a directory",
              file=sys.stderr)
        return 2
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"check_self_contained: {len(problems)} path(s) outside the "
              "checkout", file=sys.stderr)
        return 1
    print("check_self_contained: no tracked file names a path outside the "
          "checkout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
