"""The demo's input: Debian package changelog entries, parsed with python-debian.

Every Debian package installs ``/usr/share/doc/<package>/changelog.Debian.gz``: a gzip-compressed
changelog in the format of ``deb-changelog(5)``, newest entry first. Each entry has a header line
(``package (version) distributions; urgency=...``), change lines (which may close bugs with
``Closes: #123``) and a trailer (`` -- Maintainer <email>  date``).

Parsing is best effort and never raises for bad input: a file that cannot be read or parsed at
all is skipped, an entry without a package name or version is skipped, and both are counted in
:class:`CorpusStats` (with a few samples of why), so the demo can say what it left out.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import gzip
import logging
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from facade.errors import ConfigurationError

try:
    from debian.changelog import Changelog
except ImportError as exc:  # python-debian comes with the demo extra, not with kmq itself
    raise ConfigurationError("the demo's changelog corpus needs python-debian, which is not "
                             "installed", hint="pip install 'kmq[demo]'") from exc

__all__ = [
    "DEFAULT_CORPUS",
    "ChangelogEntry",
    "CorpusStats",
    "find_changelogs",
    "interleave",
    "load_corpus",
    "parse_changelog",
]

#: Where Debian installs package documentation; the demo's default corpus.
DEFAULT_CORPUS = Path("/usr/share/doc")
#: File name pattern under a corpus directory.
CHANGELOG_GLOB = "*/changelog.Debian.gz"
#: Highest bug number kept (PROPID_M_APPSPECIFIC is a 32-bit unsigned int).
_MAX_BUG = 0xFFFFFFFF
#: Skip reasons kept as samples for the summary.
_MAX_SAMPLES = 5


@dataclass(frozen=True)
class ChangelogEntry:
    """One changelog entry.

    Attributes:
        package (str): source package name from the header.
        version (str): version string from the header.
        distributions (tuple[str, ...]): target distributions from the header, as written
            (e.g. ``("unstable",)``, ``("frozen", "unstable")``); may be empty.
        urgency (str): the urgency, lowercased (``low``, ``medium``, ``high``...); ``""`` if
            none was given.
        maintainer (str): ``Name <email>`` from the trailer; ``""`` if the entry has none.
        date (datetime | None): the trailer's date, timezone-aware (UTC when the changelog gave
            ``-0000``); None if missing or unparsable.
        date_text (str): the trailer's date as written; ``""`` if missing.
        text (str): the whole entry (header, changes, trailer) as text.
        closed_bugs (tuple[int, ...]): Debian bug numbers from ``Closes:``, in order.
        source (str): the file it came from.
    """

    package: str
    version: str
    distributions: tuple[str, ...]
    urgency: str
    maintainer: str
    date: dt.datetime | None
    date_text: str
    text: str
    closed_bugs: tuple[int, ...]
    source: str


@dataclass
class CorpusStats:
    """What parsing found and what it left out.

    Attributes:
        files (int): changelog files found.
        files_skipped (int): files that could not be read or parsed at all.
        entries (int): entries parsed (before ``--limit``).
        entries_skipped (int): entries without a package name or version.
        parse_warnings (int): problems python-debian reported and worked around (non-strict).
        samples (list[str]): a few ``file: reason`` lines for the skipped files and entries.
    """

    files: int = 0
    files_skipped: int = 0
    entries: int = 0
    entries_skipped: int = 0
    parse_warnings: int = 0
    samples: list[str] = field(default_factory=list)

    def skip_file(self, path: Path, reason: str) -> None:
        """Count a skipped file and keep its reason as a sample."""
        self.files_skipped += 1
        self._sample(f"{path}: {reason}")

    def skip_entry(self, path: Path, reason: str) -> None:
        """Count a skipped entry and keep its reason as a sample."""
        self.entries_skipped += 1
        self._sample(f"{path}: {reason}")

    def _sample(self, line: str) -> None:
        if len(self.samples) < _MAX_SAMPLES:
            self.samples.append(line[:300])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"files": self.files, "files_skipped": self.files_skipped,
                "entries": self.entries, "entries_skipped": self.entries_skipped,
                "parse_warnings": self.parse_warnings, "skipped_samples": list(self.samples)}


def find_changelogs(path: Path) -> list[Path]:
    """The changelog files of a corpus, sorted by path.

    Args:
        path (Path): a directory (searched for ``*/changelog.Debian.gz``) or a single changelog
            file (gzip-compressed or plain text).

    Returns:
        list[Path]: the files; empty when the directory holds none or the path does not exist.
    """
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(p for p in path.glob(CHANGELOG_GLOB) if p.is_file())
    return []


def read_text(path: Path) -> str:
    """The text of a changelog file: gunzipped if it is gzip, decoded as UTF-8 or else Latin-1.

    Debian policy asks for UTF-8, but old entries in other encodings exist; Latin-1 decodes any
    byte, so odd bytes become odd characters rather than an error.

    Raises:
        OSError: unreadable file, or a corrupt or truncated gzip stream (``gzip.BadGzipFile`` is
            an OSError; ``EOFError`` and ``zlib.error`` are re-raised as OSError).
    """
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, zlib.error) as exc:
            raise OSError(f"corrupt gzip data: {exc}") from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


@contextmanager
def _counting_parse_warnings(stats: CorpusStats) -> Iterator[None]:
    """Count python-debian's non-strict parse warnings instead of printing them on stderr."""

    class _Counter(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            stats.parse_warnings += 1

    logger = logging.getLogger("debian.changelog")
    handler, propagate = _Counter(logging.WARNING), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def parse_changelog(path: Path, stats: CorpusStats) -> list[ChangelogEntry]:
    """Parse one changelog file, best effort; problems are counted in ``stats``, never raised.

    Args:
        path (Path): the file.
        stats (CorpusStats): updated with skipped files/entries and warnings.

    Returns:
        list[ChangelogEntry]: the file's entries, newest first; empty when it was skipped.
    """
    try:
        text = read_text(path)
    except OSError as exc:
        stats.skip_file(path, f"unreadable: {exc}")
        return []
    with _counting_parse_warnings(stats):
        try:
            changelog = Changelog(text, strict=False)
            blocks = list(changelog)
        except Exception as exc:  # noqa: BLE001 - python-debian raises many kinds; skip the file
            stats.skip_file(path, f"not a changelog ({type(exc).__name__}: {exc})")
            return []
    entries = []
    for block in blocks:
        entry = _entry(block, path, stats)
        if entry is not None:
            entries.append(entry)
    if not entries and not blocks:
        stats.skip_file(path, "no entries")
    return entries


def _entry(block: Any, path: Path, stats: CorpusStats) -> ChangelogEntry | None:
    """One ChangeBlock as a ChangelogEntry, or None (counted) when it has no package/version."""
    try:
        package = (block.package or "").strip()
        version = str(block.version).strip() if block.version is not None else ""
    except Exception as exc:  # noqa: BLE001 - a malformed version string raises ValueError
        stats.skip_entry(path, f"bad header ({type(exc).__name__}: {exc})")
        return None
    if not package or not version:
        stats.skip_entry(path, "entry without package name or version")
        return None
    try:
        text = str(block).strip("\n")
        bugs = tuple(b for b in block.bugs_closed if 0 < b <= _MAX_BUG)
    except Exception as exc:  # noqa: BLE001 - never stop the corpus for one odd entry
        stats.skip_entry(path, f"{package} {version}: unreadable entry ({exc})")
        return None
    date_text = (block.date or "").strip()
    return ChangelogEntry(
        package=package, version=version,
        distributions=tuple((block.distributions or "").split()),
        urgency=(block.urgency or "").strip().lower(),
        maintainer=(block.author or "").strip(),
        date=_parse_date(date_text), date_text=date_text, text=text, closed_bugs=bugs,
        source=str(path),
    )


def _parse_date(text: str) -> dt.datetime | None:
    """An RFC 2822 date (``Mon, 01 Jan 2024 12:00:00 +0100``) as an aware datetime, or None."""
    if not text:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    # "-0000" means "time zone unknown": the stdlib returns a naive datetime; read it as UTC.
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def interleave(per_file: list[list[ChangelogEntry]], limit: int | None) -> list[ChangelogEntry]:
    """Take entries round-robin over the files (each file's newest first) up to ``limit``.

    A short run then still covers every package and the spread of distributions and urgencies,
    instead of the complete history of the first few packages in alphabetical order.

    Args:
        per_file (list[list[ChangelogEntry]]): entries of each file, newest first.
        limit (int | None): most entries to return; None for all.

    Returns:
        list[ChangelogEntry]: round 1 is every file's newest entry, round 2 the next, ...
    """
    total = sum(len(entries) for entries in per_file)
    wanted = total if limit is None else min(limit, total)
    chosen: list[ChangelogEntry] = []
    depth = 0
    while len(chosen) < wanted:
        for entries in per_file:
            if depth < len(entries):
                chosen.append(entries[depth])
                if len(chosen) == wanted:
                    break
        depth += 1
    return chosen


def load_corpus(path: Path, limit: int | None = None,
                on_file: Callable[[int, int], None] | None = None
                ) -> tuple[list[ChangelogEntry], CorpusStats]:
    """Find and parse a corpus, then pick up to ``limit`` entries (see :func:`interleave`).

    Args:
        path (Path): a directory or one changelog file (see :func:`find_changelogs`).
        limit (int | None): most entries to use; None for all.
        on_file (Callable[[int, int], None] | None): progress callback, called with (files done,
            files total) after each file.

    Returns:
        tuple[list[ChangelogEntry], CorpusStats]: the chosen entries and what parsing found
        (``stats.entries`` counts every parsed entry, before the limit).
    """
    files = find_changelogs(path)
    stats = CorpusStats(files=len(files))
    per_file = []
    for done, file in enumerate(files, 1):
        entries = parse_changelog(file, stats)
        stats.entries += len(entries)
        if entries:
            per_file.append(entries)
        if on_file is not None:
            on_file(done, len(files))
    return interleave(per_file, limit), stats
