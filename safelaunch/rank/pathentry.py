"""A script that python runs as a path entry: a directory or a zip file with `__main__.py`.

`python appdir` and `python app.pyz` (zipapp) run that `__main__.py` with the directory or
the zip as sys.path[0]; torchrun's ranks are such python processes, so ours run them too.
Shared by the rank's bootstrap and the launcher's preflight; imports nothing heavy (the
bootstrap's cost is every rank's: tests/test_import_cost.py).
"""

from __future__ import annotations

import os

# A zip archive ends with its end-of-central-directory record: this signature, within the
# last 64 KiB (the longest archive comment) + 22 bytes. Only files that carry it are
# offered to zipimport, as python offers every script to its path hooks first.
_END_OF_ZIP = b"PK\x05\x06"
_END_SPAN = 0xFFFF + 22


def is_path_entry(path: str, head: bytes | None = None) -> bool:
    """Whether python would run `path` as a directory or zip file with `__main__.py`.

    `head`: the file's bytes when the caller has already read them (the bootstrap has).
    """
    if os.path.isdir(path):
        return os.path.isfile(os.path.join(path, "__main__.py"))
    if head is None:
        try:
            with open(path, "rb") as script:
                script.seek(0, os.SEEK_END)
                script.seek(max(0, script.tell() - _END_SPAN))
                head = script.read()
        except OSError:
            return False
    if _END_OF_ZIP not in head[-_END_SPAN:]:
        return False
    import zipimport  # frozen into the interpreter: cheap, and only for zip-like files

    try:
        return zipimport.zipimporter(path).find_spec("__main__") is not None
    except (zipimport.ZipImportError, OSError):
        return False
