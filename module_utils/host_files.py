"""Writing a file on the host in one step, so a crash or a full disk never leaves half of it; the free
space a full disk's message names; a process's parent and start time."""

import os
import shutil
import tempfile


def write_atomic(path, data, mode, owner=None):
    """Replace path with data (str or bytes): a temporary file in the same folder, synced, given
    mode (and owner (uid, gid)), then renamed over path. On any failure (a full disk) the temporary
    file is removed and path is as it was."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if owner:
            os.chown(tmp, *owner)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def free_mib(folder):
    """Free space (MiB) of the filesystem holding `folder` (or its nearest existing parent)."""
    while folder and not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    stat = os.statvfs(folder or "/")
    return stat.f_bavail * stat.f_frsize / 2**20


def free_space(folder):
    """'FOLDER: N MiB free', for a message that names a full disk."""
    try:
        return f"{folder}: {free_mib(folder):.1f} MiB free"
    except OSError as exc:
        return f"{folder}: free space unknown ({exc.strerror})"


def proc_stat(pid, proc_root="/proc"):
    """(parent pid, start time in clock ticks since boot) of a process, None when it is gone. The start
    time tells a process from a later one that reuses its pid."""
    try:
        with open(f"{proc_root}/{pid}/stat") as handle:
            after_comm = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(after_comm[1]), after_comm[19]  # fields 4 and 22


def remove_path(path):
    """A file, a link or a whole folder removed."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)
