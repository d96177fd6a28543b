"""A node's workdir is bisect's own: made by it owner-only, or refused when another user could
change it.

A root run writes pid, log, lock and backup files there and signals the processes its pid files
name. If any local user could create that directory first (``/var/tmp/bisect``), or swap a
directory on its path, they could plant a pid file naming an unrelated process, or a log file
that is a symbolic link to a root-owned file. So, before the first file is written (the node's
lock) and again in every service action:

- no directory on the path is a symbolic link, and none before the last can be renamed by
  another user: owned by root or by bisect's user, and writable by nobody else unless sticky
  (``/tmp``, ``/var/tmp``: there only an entry's owner may rename it);
- the workdir itself is bisect's user's and writable by nobody else; missing directories are
  made 0700;
- a file bisect opens in it is absent, or a regular file of bisect's user and no link.

Once this holds, nobody but bisect's user (and root) can add, replace or rename anything in it,
so what bisect then opens there is what it checked. The functions are POSIX ``sh`` (GNU
``stat`` for owner and mode), for this machine and SSH nodes alike.
"""

from __future__ import annotations

from deploy.errors import SetupError

UNSAFE_RC = 4  # the exit status of a script that refused the workdir (the reason on stderr)
ABSENT_RC = 5  # bisect_dir DIR check: there is no such directory (so nothing of bisect's in it)

# bisect_dir DIR make|check: DIR as above (make: missing directories are created 0700). Exit 0,
# or UNSAFE_RC with the reason on stderr, or (check) ABSENT_RC when DIR does not exist.
# bisect_file PATH: a file bisect may open in a checked directory. Shell variables are global:
# names of their own (_bw*).
WORKDIR_SH = rf"""
_bw_no() {{ echo "unsafe workdir: $1" >&2; return {UNSAFE_RC}; }}
bisect_dir() {{
  # relative: to the physical current directory (the logical $PWD may run through a link)
  case $1 in /*) _bw_path=$1 ;; *) _bw_path="$(pwd -P)/$1" ;; esac
  _bw_me=$(id -u) || return {UNSAFE_RC}
  _bw_at=""; _bw_left=${{_bw_path#/}}
  while [ -n "$_bw_left" ]; do
    _bw_part=${{_bw_left%%/*}}
    case $_bw_left in */*) _bw_left=${{_bw_left#*/}} ;; *) _bw_left="" ;; esac
    case $_bw_part in
      ''|.) continue ;;
      ..) _bw_no "$_bw_path: '..' in the path"; return ;;
    esac
    _bw_at="$_bw_at/$_bw_part"
    [ -L "$_bw_at" ] && {{ _bw_no "$_bw_at is a symbolic link (give the resolved path)"; return; }}
    if [ ! -e "$_bw_at" ]; then
      [ "$2" = make ] || return {ABSENT_RC}
      mkdir -m 700 -- "$_bw_at" 2>/dev/null || [ -d "$_bw_at" ] ||
        {{ _bw_no "cannot create $_bw_at"; return; }}
      [ -L "$_bw_at" ] && {{ _bw_no "$_bw_at is a symbolic link"; return; }}
    fi
    [ -d "$_bw_at" ] || {{ _bw_no "$_bw_at is not a directory"; return; }}
    _bw_um=$(stat -c %u:%a -- "$_bw_at") || {{ _bw_no "cannot stat $_bw_at"; return; }}
    _bw_uid=${{_bw_um%%:*}}; _bw_mode=0${{_bw_um#*:}}
    if [ -n "$_bw_left" ]; then
      [ "$_bw_uid" = 0 ] || [ "$_bw_uid" = "$_bw_me" ] ||
        {{ _bw_no "$_bw_at is owned by uid $_bw_uid, who could replace what is in it"; return; }}
      [ $((_bw_mode & 022)) -eq 0 ] || [ $((_bw_mode & 01000)) -ne 0 ] ||
        {{ _bw_no "$_bw_at is writable by other users and not sticky"; return; }}
    else
      [ "$_bw_uid" = "$_bw_me" ] ||
        {{ _bw_no "$_bw_at is owned by uid $_bw_uid, not by bisect's user ($_bw_me): \
bisect did not make it (remove it, or give it to uid $_bw_me)"; return; }}
      [ $((_bw_mode & 022)) -eq 0 ] ||
        {{ _bw_no "$_bw_at is writable by other users (mode ${{_bw_mode#0}})"; return; }}
    fi
  done
  return 0
}}
bisect_file() {{
  [ -L "$1" ] && {{ _bw_no "$1 is a symbolic link"; return; }}
  [ -e "$1" ] || return 0
  [ -f "$1" ] || {{ _bw_no "$1 is not a regular file"; return; }}
  [ -O "$1" ] || {{ _bw_no "$1 is owned by another user"; return; }}
  return 0
}}
"""


class UnsafeWorkdir(SetupError):
    """A node's workdir (or a file in it) could be another user's: nothing was written there.
    The node's setup, not a fault to retry: the message names the node and the path."""

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(f"{node}: {reason.strip() or 'unsafe workdir'}", node)
