"""Writing a file on the host in one step, so a crash or a full disk never leaves half of it."""

import os
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
