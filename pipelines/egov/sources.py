"""e-Gov inputs: the law files in folders, zip files and zips inside zips, listed cheaply and read one at a
time.

    for name in list_law_sources(["laws/", "all_xml.zip"]):   # "laws/a.xml", "all_xml.zip!x/y.xml",
        data = read_law_source(name)                          # "all_xml.zip!law.zip!law.xml" or a Skip

``archive.zip!member`` names a zip member only when ``archive.zip`` is an existing zip file (a law file may be
named ``…!rev.xml``). Sizes are checked before anything is inflated, so a zip bomb stays compressed.
"""

from __future__ import annotations

import functools
import io
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tansaku.pipelines.egov.xml_safety import MAX_XML_BYTES

# bulk zip → per-law zip → XML; deeper nesting is not an e-Gov layout (and a zip-bomb shape)
MAX_ZIP_DEPTH = 1
NESTED_ZIP_FACTOR = 8  # a nested zip may hold a few laws: up to 8 × the per-file limit, inflated in memory


@dataclass(frozen=True)
class Skip:
    """Something that was not turned into a record, and why (``reason`` is a short stable name)."""

    source: str
    reason: str
    message: str


def list_law_sources(paths: Iterable[str | Path], max_bytes: int = MAX_XML_BYTES) -> Iterator[str | Skip]:
    """Names of every ``.xml`` in the folders, zip files (``zip!member``) and files given, sorted; nothing
    is read yet, so the list is cheap and stable (it is the resumable pipeline's source)."""
    for path in paths:
        path = Path(path)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.suffix.lower() in (".xml", ".zip") and p.is_file())
            yield from list_law_sources(files, max_bytes)
        elif path.suffix.lower() == ".zip":
            try:
                with zipfile.ZipFile(path) as zf:
                    yield from _zip_members(zf, str(path), max_bytes)
            except (zipfile.BadZipFile, OSError) as e:
                yield Skip(str(path), "bad_zip", f"{path}: not a readable zip file: {e}")
        elif path.is_file():
            yield str(path)
        else:
            yield Skip(str(path), "missing_file", f"{path}: no such file or folder")


def _zip_members(zf: zipfile.ZipFile, prefix: str, max_bytes: int, depth: int = 0) -> Iterator[str | Skip]:
    """``prefix!member.xml`` for each XML member; a member that is itself a zip (e-Gov's bulk download nests a
    zip per law in some editions) is listed as ``prefix!inner.zip!member.xml``, one level deep at most."""
    for info in sorted(zf.infolist(), key=lambda i: i.filename):
        lower = info.filename.lower()
        if info.is_dir():
            continue
        if lower.endswith(".xml"):
            yield f"{prefix}!{info.filename}"
        elif lower.endswith(".zip") and depth < MAX_ZIP_DEPTH:
            name = f"{prefix}!{info.filename}"
            if info.file_size > max_bytes * NESTED_ZIP_FACTOR:
                yield Skip(name, "too_large",
                           f"{name}: a nested zip of {info.file_size:,} bytes is over the limit")
                continue
            try:
                with zipfile.ZipFile(io.BytesIO(zf.read(info))) as inner:
                    yield from _zip_members(inner, name, max_bytes, depth + 1)
            except (zipfile.BadZipFile, OSError) as e:
                yield Skip(name, "bad_zip", f"{name}: not a readable zip file: {e}")


def split_source(name: str) -> tuple[str, str | None]:
    """``archive.zip!member`` → (archive, member); any other name → (name, None).

    ``!`` only separates a member when the part before it is an existing zip file: a law file may itself be
    named ``…!rev.xml``.

    >>> split_source("laws/a!rev.xml")
    ('laws/a!rev.xml', None)
    """
    for i, ch in enumerate(name):
        if ch == "!" and name[:i].lower().endswith(".zip") and Path(name[:i]).is_file():
            return name[:i], name[i + 1:]
    return name, None


def read_law_source(name: str, max_bytes: int = MAX_XML_BYTES) -> bytes | Skip:
    """The bytes of a name from :func:`list_law_sources`, size-checked before reading or inflating."""
    zip_path, member = split_source(name)
    bang = member is not None
    try:
        if not bang:
            size = Path(name).stat().st_size
            if size > max_bytes:
                return Skip(name, "too_large", f"{name}: {size:,} bytes is over the limit of {max_bytes:,}")
            return Path(name).read_bytes()
        stat = Path(zip_path).stat()
        zf = _open_zip(str(zip_path), stat.st_mtime_ns, stat.st_size)
        *outer, member = _nested_members(zf, member)
        for inner_name in outer:  # a zip inside the zip: inflated in memory (size-checked when listed)
            zf = zipfile.ZipFile(io.BytesIO(zf.read(inner_name)))
        info = zf.getinfo(member)
        if info.file_size > max_bytes:  # checked before inflating: zip bombs stay compressed
            return Skip(name, "too_large",
                        f"{name}: {info.file_size:,} bytes is over the limit of {max_bytes:,}")
        with zf.open(info) as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            return Skip(name, "too_large", f"{name}: inflates past {max_bytes:,} bytes")
        return data
    except (OSError, KeyError, zipfile.BadZipFile) as e:
        return Skip(name, "unreadable_file", f"{name}: cannot be read: {e}")


@functools.lru_cache(maxsize=4)
def _open_zip(path: str, mtime_ns: int, size: int) -> zipfile.ZipFile:
    """An archive kept open for its next member (keyed on its size and mtime, so a rewritten file is
    reopened): opening it per law re-read the e-Gov bulk zip's 9,000-entry directory 9,000 times."""
    return zipfile.ZipFile(path)


def _nested_members(zf: zipfile.ZipFile, member: str) -> list[str]:
    """``inner.zip!law.xml`` → ``["inner.zip", "law.xml"]`` when ``inner.zip`` is a member; else ``[member]``
    (a member's own name may hold ``!``)."""
    for i, ch in enumerate(member):
        if ch == "!" and member[:i].lower().endswith(".zip") and member[:i] in zf.NameToInfo:
            return [member[:i], member[i + 1:]]
    return [member]


def iter_law_files(paths: Iterable[str | Path],
                   max_bytes: int = MAX_XML_BYTES) -> Iterator[tuple[str, bytes] | Skip]:
    """``(source name, bytes)`` for every law file under ``paths``, or a Skip saying why not."""
    for name in list_law_sources(paths, max_bytes):
        data = name if isinstance(name, Skip) else read_law_source(name, max_bytes)
        yield data if isinstance(data, Skip) else (name, data)
