"""Files a script reads: the attachments of the conversation, kept as immutable blobs.

A host passes a script its files (``Attachment``) when it calls ``run_code``. The engine
stores each one's bytes as a blob named by its SHA-256 and records ``(id, mime, size, blob)``
with the script, so every later run of that script reads the same bytes, even if the
attachment changes. The script's process reads them through its runner (``BlobReader``);
it never sees where they are stored.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import io
import logging
import mimetypes
import os
import re
import stat
import threading
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from engine import log
from engine._errors import CodeModeError, ConfigError, StoreUnavailable
from engine.languages._walk import BIDI_CONTROLS
from runner import FileMissing, RunError

logger = logging.getLogger("codemode")

# What no name that is a line of what the model reads may hold: control characters (a line
# break writes a line of its own) and the marks that reorder text (U+202E and its kin).
NOT_A_LINE = re.compile("[\x00-\x1f\x7f\u2028\u2029" + "".join(map(chr, BIDI_CONTROLS)) + "]")
# The longest attachment id: a skill's file is "<skill name>/<its path>".
MAX_ATTACHMENT_ID = 1024


@dataclass(frozen=True)
class Attachment:
    """A file the script may read by ``id``: its bytes, or a path to read them from."""

    id: str
    data: bytes | None = None
    path: str | Path | None = None
    mime: str | None = None
    skill: str | None = None

    def __post_init__(self) -> None:
        # Checked when the host makes it, so a mistake is not found at the script's start.
        if not isinstance(self.id, str) or not self.id.strip():
            raise ConfigError(f'an attachment needs an id, as "sales.csv", not {self.id!r}')
        if log.NOT_KEPT.search(self.id) or NOT_A_LINE.search(self.id):
            # A line break or a control character in it wrote lines of its own into what the
            # model reads ("Shown: ..."), as a mime type's could.
            raise ConfigError(
                f"attachment id {self.id!r:.80} must be one line of text, without control "
                "characters, a NUL or a lone surrogate"
            )
        if len(self.id) > MAX_ATTACHMENT_ID:
            raise ConfigError(
                f"attachment id {self.id!r:.80} is {len(self.id):,} characters long; give an id "
                f"of at most {MAX_ATTACHMENT_ID}"
            )
        if self.data is None and self.path is None:
            raise ConfigError(
                f"attachment {self.id!r} has neither data nor a path; give its bytes or a path"
            )
        if self.data is not None and self.path is not None:
            raise ConfigError(f"attachment {self.id!r} has both data and a path; give one")
        if self.path is not None and not isinstance(self.path, str | Path):
            raise ConfigError(
                f"attachment {self.id!r}: path is {type(self.path).__name__}; give a str or a "
                "pathlib.Path"
            )
        path = str(self.path) if self.path is not None else ""
        if "\x00" in path:
            # Else run_code raised the os module's bare ValueError, "embedded null byte".
            raise ConfigError(
                f"attachment {self.id!r}: path has a NUL {_up_to(path, path.index(chr(0)))}, "
                "which no file's path holds; give the file's path"
            )
        try:
            os.fsencode(path)
        except UnicodeEncodeError as e:
            # Else run_code raised a bare UnicodeEncodeError. (A byte the file system's
            # encoding does not decode is a surrogate from U+DC80, which encodes back.)
            raise ConfigError(
                f"attachment {self.id!r}: path has a lone surrogate {_up_to(path, e.start)}, "
                "which no file's path holds; give the file's path (os.fsdecode of its bytes)"
            ) from None
        for what in ("mime", "skill"):
            value = getattr(self, what)
            if value is not None and (
                not isinstance(value, str) or log.NOT_KEPT.search(value) or NOT_A_LINE.search(value)
            ):
                # Found later, it failed the script's every step (its record holds it).
                raise ConfigError(
                    f"attachment {self.id!r}: {what} is {value!r:.80}; give one line of text "
                    "(no control character, NUL or lone surrogate), or leave it out"
                )
        if self.mime is not None:
            # A MIME type's type and subtype have no case: IMAGE/PNG is an image. Its
            # parameters (an upload's Content-Type, "image/png; name=chart.png") say nothing
            # the engine reads (text is UTF-8, or UTF-16 by its mark): kept, the image went
            # to no model API ("takes no image/png; name=chart.png"), and a PDF was text.
            essence = self.mime.partition(";")[0].strip().lower()
            object.__setattr__(self, "mime", essence or None)
        if self.data is not None and not isinstance(self.data, bytes | bytearray | memoryview):
            raise ConfigError(
                f"attachment {self.id!r}: data is {type(self.data).__name__}, not bytes; for "
                'text, pass text.encode("utf-8")'
            )

    def read(self) -> bytes:
        if self.data is not None:
            return bytes(self.data)
        if self.path is not None:
            with self._opened() as f:
                try:
                    return f.read()
                except OSError as e:
                    raise self._unreadable(e) from None
        raise CodeModeError(f"attachment {self.id!r} has neither data nor a path")

    def _opened(self) -> io.BufferedReader:
        """The file at ``path``, open to read; a :class:`CodeModeError` naming it when it
        cannot be opened or is no regular file."""
        assert self.path is not None
        try:
            # Not blocking: opening a named pipe would wait for a writer.
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                regular = stat.S_ISREG(os.fstat(fd).st_mode)
            except OSError:
                os.close(fd)
                raise
        except OSError as e:
            raise self._unreadable(e) from None
        if not regular:
            os.close(fd)
            # A pipe or a device would be read for ever (/dev/zero) or wait so.
            raise CodeModeError(
                f"cannot read {self._what()} {self.id!r} at {self.path}: it is not a regular "
                "file; give a file"
            )
        return open(fd, "rb")

    def _what(self) -> str:
        return f"skill {self.skill}'s file" if self.skill is not None else "attachment"

    def _unreadable(self, error: OSError) -> CodeModeError:
        return CodeModeError(
            f"cannot read {self._what()} {self.id!r} at {self.path} "
            f"({error.strerror or error}); "
            + (
                "restore the file, or remove it from the skill"
                if self.skill is not None
                else "give a file this process can read"
            )
        )

    def mime_type(self) -> str:
        """``mime``, or the type its id names (what the script and the model know it by),
        or its path's: an upload kept as ``/uploads/8f3a`` attached as ``chart.png`` is an
        image."""
        if self.mime:
            return self.mime
        guessed, _ = mimetypes.guess_type(self.id)
        if guessed is None and self.path is not None:
            guessed, _ = mimetypes.guess_type(str(self.path))
        return guessed or "application/octet-stream"


def _up_to(text: str, at: int) -> str:
    """Where the character at index ``at`` of ``text`` is, for a message: its position and
    the text before it, cut to its last 60 characters (a message of the whole text cut at a
    length showed no NUL in a long path)."""
    before = text[:at] if at <= 60 else "..." + text[at - 60 : at]
    return f"at character {at + 1:,} (after {before!r})"


# A file is hashed and copied into a BlobStore this many bytes at a time.
_CHUNK = 1 << 20
# How many times put_file reads a file that changes as it is read before it gives up.
_PUT_FILE_TRIES = 3


class Readable(Protocol):
    """What :meth:`BlobStore.put_file` reads: a binary file open to read (its ``read``,
    ``seek`` and ``tell``)."""

    def read(self, size: int = -1, /) -> bytes: ...

    def seek(self, offset: int, whence: int = 0, /) -> int: ...

    def tell(self) -> int: ...


class BlobTooLarge(Exception):
    """Bytes past what a blob store keeps in one blob. The message is "N bytes; " and the
    store's bound, as "1,234 bytes; the store keeps at most 1,000"."""


class BlobChanged(Exception):
    """:meth:`BlobStore.put_file`'s file was other bytes each time it was read."""


def _copy(f: Readable, out: BinaryIO | None = None) -> tuple[str, int]:
    """The SHA-256 and the size of what ``f`` reads to its end, a chunk at a time, each
    chunk also written to ``out``."""
    digest = hashlib.sha256()
    size = 0
    while chunk := f.read(_CHUNK):
        digest.update(chunk)
        size += len(chunk)
        if out is not None:
            out.write(chunk)
    return digest.hexdigest(), size


# How many blobs a BlobStore remembers the version of (see BlobStore.unchanged); one it
# forgot is hashed again when next read.
_VERSIONS_KEPT = 4096
# What a script reads of a file whose blob changed (FileMissing's text).
WRITTEN_OVER = "its bytes in the store were written over since they were recorded"


class BlobStore:
    """Immutable blobs by SHA-256: in memory, or as files under a directory.

    A blob read is checked to hold the bytes its name is the digest of: hashed when this
    store first reads it, then known by a version of it (a file's ``stat``: device, inode,
    size, modification and change times), as git knows a checked-out file; one changed since
    (by anyone) is hashed again, and read as gone if its bytes are not the recorded ones.
    (A file's edit within one tick of the file system's clock of the hash would go unseen.)

    Hosts that share a log on several machines share its blobs too: a subclass keeps them
    elsewhere by overriding :meth:`put` and :meth:`read` (``PostgresStore.blob_store()``
    keeps them in the log's database, ``SqliteStore.blob_store()`` beside the log), and
    :meth:`put_file` to take a large file without reading it whole into memory.
    """

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else None
        self._memory: dict[str, bytes] = {}
        self._lock = threading.Lock()
        # Each blob found to hold its digest's bytes: its version then (see unchanged).
        self._versions: dict[str, object] = {}
        self._folders_made = False  # see _make_folders
        if self.directory is not None:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as e:  # a file of that name, a directory that may not be written
                raise ConfigError(
                    f"the blob store's directory {self.directory} cannot be made "
                    f"({e.strerror or e}); give one this process may write (a file of that "
                    "name is in the way?)"
                ) from None

    def put(self, data: bytes) -> str:
        """Keep ``data``; its name (SHA-256). Raises ``OSError`` when the store fails, and
        :class:`StoreUnavailable` (``permanent``) when a file is where a blob folder goes."""
        digest = hashlib.sha256(data).hexdigest()
        if self.directory is None:
            with self._lock:
                self._memory[digest] = data
            return digest
        path = self._path(digest)
        if not self._holds(path, digest):
            # Written again when cut short or changed too (a crash before the data reached
            # the disk): kept, it failed every script given these bytes.
            self._write(path, digest, lambda f: f.write(data))
        return digest

    def put_file(self, f: Readable) -> tuple[str, int]:
        """Keep the bytes ``f`` reads from where it is to its end: their name (SHA-256) and
        their size. Raises as :meth:`put`; what ``f`` raises passes through, and a put it
        ends leaves nothing behind. :class:`BlobChanged` when the bytes were other bytes
        each time they were read (another program writes the file).

        A store of files takes a file of any size in a chunk of memory at a time: it hashes
        the file, then copies it in unless it has those bytes already (no write, no sync).
        A store in memory, or a subclass that overrides :meth:`put` alone, reads the bytes
        whole and puts them."""
        if self.directory is None or type(self).put is not BlobStore.put:
            data = f.read()
            return self.put(data), len(data)
        start = f.tell()
        for _ in range(_PUT_FILE_TRIES):
            f.seek(start)
            digest, size = _copy(f)
            path = self._path(digest)
            if self._holds(path, digest):
                return digest, size
            f.seek(start)

            def copy(out: BinaryIO, digest: str = digest) -> None:
                if _copy(f, out)[0] != digest:
                    raise BlobChanged  # between the hash and the copy: try again

            try:
                self._write(path, digest, copy)
            except BlobChanged:
                continue
            return digest, size
        raise BlobChanged

    def _write(self, path: Path, digest: str, write: Callable[[BinaryIO], object]) -> None:
        """Store a new blob at ``path``: ``write`` writes its bytes to an open file, which
        reaches the disk, then its name, before this returns; nothing is left of a write
        that fails."""
        if not self._folders_made or not path.parent.is_dir():
            self._make_folders()
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            with open(tmp, "wb") as f:
                write(f)
                f.flush()
                # On the disk before its name is, and its name before the log can name
                # it (a script's record, made durable by its first call or pause): else
                # a power loss left the blob empty or gone under a script the log kept,
                # whose calls had run, and which could never read its files again.
                os.fsync(f.fileno())
            os.replace(tmp, path)
            _sync_directory(path.parent)
        except BaseException:
            # Else the part written stays (a full disk): one more file at each failure.
            tmp.unlink(missing_ok=True)
            raise
        self._holds(path, digest, written=True)

    def _make_folders(self) -> None:
        """Make the 256 folders blobs go in (by their digest's first two hex digits) that are
        not there, then sync the store's folder: each folder's name is on the disk before a
        blob is put in it. Done at this store's first new blob (and again if a folder was
        removed since), so a new blob costs an fsync of its bytes and one of its folder. (A
        folder made at a blob's put, the store's folder synced when that put had made it,
        left a race: another host's put found it made, stored a blob in it and returned
        before the first had synced the store's folder, so a power loss could take the
        folder and the blob a log recorded with it.) The store's folder's own name is synced
        in its parent too, where this process may open the parent: it may have been made
        just now, by this store or another host's."""
        assert self.directory is not None
        try:  # the folders there, by the directory's own entries (no stat of each)
            with os.scandir(self.directory) as entries:  # a link's target stat'ed alone
                there = {e.name for e in entries if e.is_dir()}
        except FileNotFoundError:
            there = set()
        for prefix in range(256):
            name = f"{prefix:02x}"
            folder = self.directory / name
            if name in there:
                continue
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except FileExistsError:
                # A file of that name: else every new blob failed as a store that is down,
                # to be tried again (it is not coming back until the file goes).
                raise StoreUnavailable(
                    f"{folder} is in the blob store's folder but is not a folder (the store "
                    "keeps blobs in the folders 00 to ff); remove it, then run the script again",
                    permanent=True,
                ) from None
        _sync_directory(self.directory)
        # The parent is not the store's: one that may be passed through but not read (mode
        # 0711), or that refuses a sync, leaves the store's folder as before this sync was made.
        try:
            _sync_directory(self.directory.parent)
        except OSError as e:
            logger.debug("the blob store's parent folder was not synced: %s", e)
        self._folders_made = True

    def _holds(self, path: Path, digest: str, *, written: bool = False) -> bool:
        """Whether the file at ``path`` holds the bytes ``digest`` names (``written``: it
        was just written with them, so only its stat is kept)."""
        try:
            with open(path, "rb") as f:
                return self._whole(f, digest, written=written)
        except FileNotFoundError:
            return False

    def _whole(self, f: io.BufferedReader, digest: str, *, written: bool = False) -> bool:
        """Whether the open blob file ``f`` holds the bytes ``digest`` names (see
        :meth:`unchanged`; its version is its stat). Leaves ``f``'s position anywhere."""
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            return False
        seen = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        return self.unchanged(
            digest, seen, lambda: written or hashlib.file_digest(f, "sha256").hexdigest() == digest
        )

    def unchanged(self, digest: str, version: object, hashed: Callable[[], bool]) -> bool:
        """Whether a blob whose ``version`` (anything that changes when its bytes do: a
        file's stat, a row's transaction id) is ``version`` now holds the bytes ``digest``
        names: its version is the one it had when they were last found there, else
        ``hashed()`` says so (and the version, taken before the hash, is kept: a change
        during it changes the version)."""
        with self._lock:
            if self._versions.get(digest) == version:
                return True
        if not hashed():
            return False
        with self._lock:
            self._versions.pop(digest, None)
            if len(self._versions) >= _VERSIONS_KEPT:
                del self._versions[next(iter(self._versions))]
            self._versions[digest] = version
        return True

    def _path(self, digest: str) -> Path:
        assert self.directory is not None
        return self.directory / digest[:2] / digest

    def close(self) -> None:
        """Release what the store holds open."""

    def read(self, digest: str, offset: int, length: int) -> bytes:
        """Bytes of a blob. Raises ``FileMissing`` when it is gone, ``OSError`` on a failure."""
        if self.directory is None:
            with self._lock:
                data = self._memory.get(digest)
            if data is None:
                raise FileMissing("its bytes are gone from the store")
            return data[offset : offset + length]
        try:
            with open(self._path(digest), "rb") as f:
                if not self._whole(f, digest):
                    raise FileMissing(WRITTEN_OVER)
                f.seek(offset)
                return f.read(length)
        except FileNotFoundError:
            raise FileMissing("its bytes are gone from the store") from None

    def missing(self, blobs: Mapping[str, int]) -> list[str]:
        """Those of ``blobs`` (each digest with the size recorded of it) the store no longer
        has whole: gone, of another size or (files under a directory) other bytes. Raises
        ``OSError`` when the store fails. A subclass answers with :meth:`read` unless it
        overrides this."""
        gone = []
        for digest, size in blobs.items():
            if self.directory is not None:
                path = self._path(digest)
                if not _has_size(path, size) or not self._holds(path, digest):
                    gone.append(digest)
                continue
            try:
                # The last recorded byte and one past it: a blob cut short has no last byte,
                # one grown has a byte past it.
                tail = self.read(digest, max(size - 1, 0), 2)
            except FileMissing:
                gone.append(digest)
                continue
            if len(tail) != min(size, 1):
                gone.append(digest)
        return gone


# What fsync of a directory fails with where the file system does not sync directories
# (some FUSE and CIFS mounts): there the names are as durable as it makes them, and SQLite
# ignores it too. Raised, every new blob's put failed after its rename.
_NO_DIRECTORY_SYNC = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP})


def _sync_directory(path: Path) -> None:
    """``fsync`` the directory ``path``: the names made in it reach the disk (where the file
    system syncs directories at all)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in _NO_DIRECTORY_SYNC:
            raise
    finally:
        os.close(fd)


def _has_size(path: Path, size: int) -> bool:
    """Whether ``path`` is a file of ``size`` bytes."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size == size


class BlobReader:
    """The runner's file reader for one script: its file ids mapped to their blobs.
    ``lost(digest)`` is told of each blob found gone or cut short."""

    def __init__(
        self,
        blobs: BlobStore,
        files: list[dict[str, Any]],
        lost: Callable[[str], None] | None = None,
    ) -> None:
        self.blobs = blobs
        self.by_id = {f["id"]: (f["blob"], f["size"]) for f in files}
        self._lost = lost

    async def read(self, file_id: str, offset: int, length: int) -> bytes:
        known = self.by_id.get(file_id)
        if known is None:
            raise FileMissing(f"no file {file_id!r} is attached to this script")
        digest, size = known
        # A read to the recorded end asks for a byte more, to find a blob grown since.
        ask = length + 1 if offset + length >= size else length
        try:
            data = await asyncio.to_thread(self.blobs.read, digest, offset, ask)
        except FileMissing:
            if self._lost is not None:
                self._lost(digest)
            raise
        except OSError as e:
            # A store that fails sends the step back to its queue, as a runner that is down.
            raise RunError(f"the file store failed reading {file_id!r}: {e}") from e
        if len(data) != max(0, min(ask, size - offset)):
            # Read on as a shorter file, it would hand the script other bytes than its
            # earlier runs had, silently, or as a divergence blamed on the script.
            if self._lost is not None:
                self._lost(digest)
            raise FileMissing(
                f"its bytes in the store are not the {size} recorded (the store lost or "
                "changed them)"
            )
        return data


def attachments_of(files: object) -> list[Attachment]:
    """``run_code``'s ``files``: a list of :class:`Attachment` (None: none), or a
    :class:`CodeModeError` saying what it is instead."""
    if files is None:
        return []
    if isinstance(files, Attachment):
        raise CodeModeError(f"files is a list of attachments: pass [attachment], not {files.id!r}")
    if isinstance(files, str | bytes) or not hasattr(files, "__iter__"):
        raise CodeModeError(f"files is a list of Attachment objects, not {type(files).__name__}")
    out = list(files)
    for attachment in out:
        if not isinstance(attachment, Attachment):
            raise CodeModeError(f"files are Attachment objects, not {type(attachment).__name__}")
        if attachment.skill is not None:
            # The mark of a skill's own files: an upload bearing it was listed by tools.skill
            # as that skill's file, its bytes read as the skill's.
            raise CodeModeError(
                f"attachment {attachment.id!r} has skill={attachment.skill!r}: only a Skill's "
                "own files are marked so; leave skill out (give the skill its files with "
                "Skill(files=...))"
            )
    return out


class StoredSkillFiles:
    """The records of the skills' files already stored in one blob store, so an engine does
    not read, hash and store every skill file again at each ``run_code`` (on PostgreSQL,
    sending its bytes again). A file given as bytes is known by the very object (kept here,
    so its identity is never another's); one read from disk by its ``stat`` (device, inode,
    size, modification time): edited, it is read and stored again (an edit that keeps its
    size within one tick of the file system's clock would go unseen). Only skills' files: they
    are the engine's own and few, where a ``run_code``'s attachments would pile up here."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[object, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def source(attachment: Attachment) -> object:
        """What the attachment's bytes are known by now (raises ``OSError`` for a path)."""
        if attachment.data is not None:
            return attachment.data
        stat = os.stat(attachment.path)  # type: ignore[arg-type]
        return (str(attachment.path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def get(self, attachment: Attachment, source: object) -> dict[str, Any] | None:
        with self._lock:
            known = self._known.get(attachment.id)
        if known is None:
            return None
        was, entry = known
        same = was is source if attachment.data is not None else was == source
        return dict(entry) if same else None

    def add(self, attachment: Attachment, source: object, entry: dict[str, Any]) -> None:
        with self._lock:
            self._known[attachment.id] = (source, dict(entry))

    def forget(self, digest: str) -> None:
        """The blob store lost ``digest``: the files stored as it are read and stored
        again at the next ``run_code``."""
        with self._lock:
            for key in [k for k, (_, e) in self._known.items() if e["blob"] == digest]:
                del self._known[key]


def _check_ids(attachments: list[Attachment]) -> None:
    """A :class:`CodeModeError` for two attachments of one id, naming it.

    By each id's NFC form: a script finds a file by its id in either normalization, so two
    ids that are one in another (é as one character, and as e and an accent) were one name
    for two files, listed and shown alike, the script reading whichever it spelled."""
    seen: dict[str, Attachment] = {}
    for attachment in attachments:
        key = unicodedata.normalize("NFC", attachment.id)
        first = seen.get(key)
        if first is not None:
            twin = "" if first.id == attachment.id else " (one in another Unicode normalization)"
            skill = first.skill if first.skill is not None else attachment.skill
            if skill is not None:
                # A host's upload named as a skill's file: which one clashed, and the fix.
                raise CodeModeError(
                    f"attachment {attachment.id!r} has the id of a file of skill {skill!r}"
                    f"{twin}; give the attachment another id"
                )
            raise CodeModeError(
                f"two attachments have the id {attachment.id!r}{twin}; give each its own id"
            )
        seen[key] = attachment


def record_files(
    blobs: BlobStore, attachments: list[Attachment], skills: StoredSkillFiles | None = None
) -> list[dict[str, Any]]:
    """Store each attachment's bytes and return what the script record keeps of them; a
    skill's file found in ``skills`` (stored before, unchanged) is not read again. Two ids
    that are one, or a path that cannot be opened, are refused before any is stored, so a
    refused start stores nothing (unless a file becomes unreadable as the others are
    stored)."""
    _check_ids(attachments)
    planned: list[tuple[Attachment, object, dict[str, Any] | None]] = []
    for attachment in attachments:
        source: object = None
        known = None
        if skills is not None and attachment.skill is not None:
            try:
                source = StoredSkillFiles.source(attachment)
            except OSError:
                source = None  # opened below, which says what is wrong with the path
            known = skills.get(attachment, source) if source is not None else None
        if known is None and attachment.path is not None:
            # Each opened first: one that cannot be was refused after the files before it
            # were stored, for a start that recorded no script.
            attachment._opened().close()
        planned.append((attachment, source, known))
    records = []
    for attachment, source, known in planned:
        if known is not None:
            records.append(known)
            continue
        try:
            digest, size = _stored(blobs, attachment)
        except OSError as e:
            raise StoreUnavailable(
                f"the file store failed storing attachment {attachment.id!r} ({e}); no script "
                "was started: run it again once the store is back"
            ) from None
        entry: dict[str, Any] = {
            "id": attachment.id,
            "mime": attachment.mime_type(),
            "size": size,
            "blob": digest,
        }
        if attachment.skill is not None:
            entry["skill"] = attachment.skill
        if skills is not None and source is not None:
            skills.add(attachment, source, entry)
        records.append(entry)
    return records


def _stored(blobs: BlobStore, attachment: Attachment) -> tuple[str, int]:
    """Put ``attachment``'s bytes in ``blobs``: their name and size. A file is put from the
    file (a chunk of it in memory at a time, where the store keeps files). ``OSError`` is
    the store's; the file's own failures are a :class:`CodeModeError` naming it."""
    try:
        if attachment.path is None:
            data = attachment.read()
            return blobs.put(data), len(data)
        with attachment._opened() as f:
            return blobs.put_file(_Source(f, attachment))
    except BlobTooLarge as e:
        raise ConfigError(
            f"{attachment._what()} {attachment.id!r} is {e}: give a smaller file, or a blob "
            "store that keeps it (CodeMode's blobs=, one every host of the log shares)"
        ) from None
    except BlobChanged:
        raise CodeModeError(
            f"{attachment._what()} {attachment.id!r} at {attachment.path} changed each time "
            f"it was read ({_PUT_FILE_TRIES} times): another program writes it; give a "
            "file that stays as it is while the script starts (a copy of it)"
        ) from None


class _Source:
    """An attachment's open file as :meth:`BlobStore.put_file` reads it: a failure to read
    it is a :class:`CodeModeError` naming the attachment, not an ``OSError`` (which there
    is the store's)."""

    def __init__(self, f: io.BufferedReader, attachment: Attachment) -> None:
        self._f = f
        self._attachment = attachment

    def read(self, size: int = -1, /) -> bytes:
        try:
            return self._f.read(size)
        except OSError as e:
            raise self._attachment._unreadable(e) from None

    def seek(self, offset: int, whence: int = 0, /) -> int:
        try:
            return self._f.seek(offset, whence)
        except OSError as e:
            raise self._attachment._unreadable(e) from None

    def tell(self) -> int:
        return self._f.tell()
