"""Issue 40, items 1 and 4: a catalog's model archive cannot write outside the cache, nor fill it.

Each test builds a real malicious archive (the technique of CVE-2025-4517, which tarfile's ``filter="data"`` lets
through on Python 3.11.7; absolute names, ``..``, links out, a member written through a link, devices; bombs) and
hands it to the model-source resolver as a catalog's ``path`` source does (``path:`` a file inside the archive). The
attack must fail with a one-line error naming the archive, and leave nothing outside the cache nor in it.
"""

from __future__ import annotations

import bz2
import io
import os
import shutil
import stat
import struct
import sys
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalfarm.catalog.specs import Source
from evalfarm.encoders import archives
from evalfarm.encoders.archives import ArchiveError, ArchiveLimits
from evalfarm.encoders.protocol import ModelLoadError
from evalfarm.encoders.sources import resolve_source

pytestmark = pytest.mark.faults  # issue 40 (`make faults`)

PAYLOAD = b"import os; os.system('echo pwned')\n"


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A folder with a short path: the CVE's technique needs the unpack folder's path well under PATH_MAX."""
    d = Path(tempfile.mkdtemp(prefix="ef40-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def place(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """The cache, the folder the archive lives in (a folder the user allows models from) and the victim's folder
    (where the attack would plant ``pwned.pth``), all inside ``short_tmp``."""
    out = {name: short_tmp / name for name in ("cache", "models", "victim")}
    for d in out.values():
        d.mkdir()
    monkeypatch.setenv("EVALFARM_CACHE", str(out["cache"]))
    monkeypatch.setenv("EVALFARM_MODEL_PATHS", str(out["models"]))
    for var in ("EVALFARM_ARCHIVE_MAX_SIZE", "EVALFARM_ARCHIVE_MAX_RATIO", "EVALFARM_ARCHIVE_MAX_MEMBERS"):
        monkeypatch.delenv(var, raising=False)
    return out


def _resolve(archive: Path) -> Path | str:
    """What a catalog's model does: a ``path`` source naming a file inside the archive."""
    return resolve_source(Source(type="path", ref=str(archive), path="vectors.txt"))


def _left_behind(place: dict[str, Path]) -> list[Path]:
    """Everything the attack left: any file in the victim's folder, anything unpacked in the cache."""
    victim = list(place["victim"].rglob("*"))
    unpacked = place["cache"] / "unpacked"
    return victim + (list(unpacked.rglob("*")) if unpacked.exists() else [])


def _info(name: str, kind: bytes = tarfile.REGTYPE, *, link: str = "", size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size, info.mode = kind, link, size, 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz" if path.name.endswith(".tar.gz") else "w", format=tarfile.PAX_FORMAT) as tf:
        for info, body in members:
            if body is not None:
                info.size = len(body)
            tf.addfile(info, io.BytesIO(body) if body is not None else None)
    return path


def cve_2025_4517(path: Path, victim: Path, dest_len: int) -> Path:
    """The CVE's archive: 16 nested folders with long names, a one-letter symlink to each, so that the chain
    ``a/b/…/p`` is short but resolves past PATH_MAX; a symlink at its end back up 16 levels (realpath, out of room,
    judges what follows lexically); ``escape`` -> that chain plus ``..`` up to ``/``, then ``victim``; and
    ``escape/pwned.pth`` written through it. ``dest_len``: the length of the folder it is unpacked into."""
    steps = "abcdefghijklmnop"
    comp = "d" * min(247, (4096 - dest_len - 40) // len(steps) - 1)
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    parent = ""
    for s in steps:
        members.append((_info(os.path.join(parent, comp), tarfile.DIRTYPE), None))
        members.append((_info(os.path.join(parent, s), tarfile.SYMTYPE, link=comp), None))
        parent = os.path.join(parent, comp)
    chain = os.path.join(*steps, "l" * 254)
    members.append((_info(chain, tarfile.SYMTYPE, link="../" * len(steps)), None))
    members.append((_info("escape", tarfile.SYMTYPE, link=chain + "/.." * (len(steps) + 1) + str(victim)), None))
    members.append((_info("escape/pwned.pth"), PAYLOAD))
    return _tar(path, members)


def _unpack_dir_len(place: dict[str, Path]) -> int:
    """The length of the temp folder the resolver unpacks into: <cache>/unpacked/.<16 hex>.<8 hex>.<pid>.<host>.tmp"""
    from evalfarm.atomic import temp_name

    return len(str(temp_name(place["cache"] / "unpacked" / ("0" * 16))))


def _stdlib_is_vulnerable() -> bool:
    """Python versions whose tarfile ``filter="data"`` the CVE's technique bypasses (fixed in 3.11.13, 3.12.11,
    3.13.4)."""
    v = sys.version_info
    return (v[:2] == (3, 11) and v[2] < 13) or (v[:2] == (3, 12) and v[2] < 11) or (v[:2] == (3, 13) and v[2] < 4)


def test_the_cve_archive_is_a_real_attack_on_this_python(short_tmp) -> None:
    """The archive below is the real thing: the stdlib's own guard lets it write outside (where it is vulnerable)."""
    if not _stdlib_is_vulnerable():
        pytest.skip(f"Python {sys.version.split()[0]}'s tarfile has the CVE-2025-4517 fix: nothing to show here")
    victim, dest = short_tmp / "victim", short_tmp / "dest"
    victim.mkdir()
    dest.mkdir()
    archive = cve_2025_4517(short_tmp / "poc.tar", victim, len(str(dest)))
    with tarfile.open(archive) as tf:
        tf.extractall(dest, filter="data")  # what evalfarm did before issue 40
    assert (victim / "pwned.pth").read_bytes() == PAYLOAD


def test_the_cve_2025_4517_archive_cannot_write_outside_the_cache(place) -> None:
    archive = cve_2025_4517(place["models"] / "model.tar", place["victim"], _unpack_dir_len(place))
    with pytest.raises(ArchiveError, match=r"model\.tar: .*refused") as err:
        _resolve(archive)
    assert "\n" not in str(err.value)
    assert _left_behind(place) == []


ATTACKS = {
    # name: (tar members, what the error says); {victim} is the victim's folder
    "absolute name": ([("{victim}/pwned.pth", tarfile.REGTYPE, "")], "is absolute"),
    "dot-dot": ([("../../victim/pwned.pth", tarfile.REGTYPE, "")], "'\\.\\.' segment"),
    "dot-dot inside": ([("a/../../victim/pwned.pth", tarfile.REGTYPE, "")], "'\\.\\.' segment"),
    "tilde": ([("~/.bashrc", tarfile.REGTYPE, "")], "starts with '~'"),
    "symlink out, then a file through it": (
        [("out", tarfile.SYMTYPE, "{victim}"), ("out/pwned.pth", tarfile.REGTYPE, "")],
        "outside the archive",
    ),
    "relative symlink out": ([("vectors.txt", tarfile.SYMTYPE, "../../../victim/pwned.pth")], "outside the archive"),
    "symlink to a folder inside, then a file through it": (
        [("sub", tarfile.DIRTYPE, ""), ("in", tarfile.SYMTYPE, "sub"), ("in/pwned.pth", tarfile.REGTYPE, "")],
        "which is a link, not a folder",
    ),
    "symlink to a folder": ([("sub", tarfile.DIRTYPE, ""), ("vectors.txt", tarfile.SYMTYPE, "sub")], "a folder"),
    "hard link out (absolute)": ([("vectors.txt", tarfile.LNKTYPE, "/etc/passwd")], "outside the archive"),
    "hard link out (dot-dot)": ([("vectors.txt", tarfile.LNKTYPE, "../victim/x")], "outside the archive"),
    "character device": ([("vectors.txt", tarfile.CHRTYPE, "")], "is a character device"),
    "block device": ([("vectors.txt", tarfile.BLKTYPE, "")], "is a block device"),
    "FIFO": ([("vectors.txt", tarfile.FIFOTYPE, "")], "is a FIFO"),
    "a long name": ([("x" * 2000, tarfile.REGTYPE, "")], "a member name of 2000 characters"),
    "the same name twice": ([("vectors.txt", tarfile.REGTYPE, ""), ("vectors.txt", tarfile.REGTYPE, "")], "twice"),
    "link loop": ([("vectors.txt", tarfile.SYMTYPE, "b"), ("b", tarfile.SYMTYPE, "vectors.txt")], "more than 16"),
}


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_tar_member_cannot_lead_outside_or_be_anything_but_a_file(place, attack) -> None:
    members, why = ATTACKS[attack]
    built = []
    for name, kind, link in members:
        info = _info(name.format(victim=place["victim"]), kind, link=link.format(victim=place["victim"]))
        built.append((info, PAYLOAD if kind == tarfile.REGTYPE else None))
    archive = _tar(place["models"] / "model.tar.gz", built)
    with pytest.raises(ArchiveError, match=rf"model\.tar\.gz: .*{why}"):
        _resolve(archive)
    assert _left_behind(place) == []


def _zip_symlink(zf: zipfile.ZipFile, name: str, target: str) -> None:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    zf.writestr(info, target)


@pytest.mark.parametrize(
    "attack, why",
    [
        ("absolute", "is absolute"),
        ("dot-dot", "'\\.\\.' segment"),
        ("backslash", "'\\.\\.' segment"),
        ("symlink out", "outside the archive"),
        ("through a symlink", "outside the archive"),
        ("through a symlink inside", "which is a link, not a folder"),
        ("fifo", "not a regular file"),
    ],
)
def test_a_zip_member_cannot_lead_outside_either(place, attack, why) -> None:
    archive = place["models"] / "model.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        if attack == "absolute":
            zf.writestr(zipfile.ZipInfo(f"{place['victim']}/pwned.pth"), PAYLOAD)  # ZipFile.writestr keeps it
            zf.filelist[-1].filename = f"{place['victim']}/pwned.pth"
        elif attack == "dot-dot":
            zf.writestr("../../victim/pwned.pth", PAYLOAD)
        elif attack == "backslash":
            zf.writestr("..\\..\\victim\\pwned.pth", PAYLOAD)
        elif attack == "symlink out":
            _zip_symlink(zf, "vectors.txt", "../../victim/pwned.pth")
        elif attack == "through a symlink":
            _zip_symlink(zf, "out", str(place["victim"]))
            zf.writestr("out/pwned.pth", PAYLOAD)
        elif attack == "through a symlink inside":
            zf.writestr("sub/", b"")
            _zip_symlink(zf, "in", "sub")
            zf.writestr("in/pwned.pth", PAYLOAD)
        else:
            info = zipfile.ZipInfo("vectors.txt")
            info.external_attr = (stat.S_IFIFO | 0o644) << 16
            zf.writestr(info, b"")
    with pytest.raises(ArchiveError, match=rf"model\.zip: .*{why}"):
        _resolve(archive)
    assert _left_behind(place) == []


def test_an_archive_of_files_folders_and_links_inside_it_unpacks_with_links_as_copies(place) -> None:
    """What a real model archive holds still works: ``./`` names, folders, and links to its own files, each written
    as a regular file (nothing on disk is a link)."""
    archive = _tar(
        place["models"] / "model.tar.gz",
        [
            (_info("./model", tarfile.DIRTYPE), None),
            (_info("./model/blobs/ab12"), b"the 2 3\nof 4 5\n"),
            (_info("./model/vectors.txt", tarfile.SYMTYPE, link="blobs/ab12"), None),
            (_info("./model/copy.txt", tarfile.LNKTYPE, link="model/blobs/ab12"), None),
        ],
    )
    out = resolve_source(Source(type="path", ref=str(archive), path="model/vectors.txt"))
    assert isinstance(out, Path) and out.read_bytes() == b"the 2 3\nof 4 5\n"
    for p in out.parent.rglob("*"):
        assert not p.is_symlink() and (p.is_dir() or p.stat().st_mode & 0o777 == 0o644), p
    assert (out.parent / "copy.txt").read_bytes() == out.read_bytes()


def test_a_path_inside_an_archive_cannot_climb_out_of_it(place) -> None:
    archive = _tar(place["models"] / "model.tar", [(_info("vectors.txt"), b"a 1\n")])
    for sub in ("../../victim", "/etc/passwd"):
        spec = Source.model_construct(type="path", ref=str(archive), path=sub)  # built without validation
        with pytest.raises(ModelLoadError, match="absolute|'\\.\\.' segment"):
            resolve_source(spec)


# -- bombs (item 4) ---------------------------------------------------------------------------------------------------
GIB = 1 << 30


def tar_bz2_bomb(path: Path) -> Path:
    """A 3 KB .tar.bz2 holding one 1 GiB file of zeros: bzip2 streams may be concatenated, so 64 copies of one
    compressed 16 MiB of zeros (45 bytes) are 1 GiB; built in a fraction of a second, never written out in full."""
    header = _info("vectors.txt", size=GIB).tobuf(format=tarfile.GNU_FORMAT)
    zeros = bz2.compress(bytes(1 << 24))
    path.write_bytes(bz2.compress(header) + zeros * (GIB >> 24) + bz2.compress(bytes(1024)))
    return path


def zip_bomb(path: Path, declared: int = GIB, real: int = GIB) -> Path:
    """A zip of one deflated file of ``real`` zeros whose headers say ``declared`` bytes (the two differ: a header
    that lies). 16 MiB of zeros deflate (full-flushed, so each copy stands alone) to 16 KB."""
    step = 1 << 24
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    seg = c.compress(bytes(step)) + c.flush(zlib.Z_FULL_FLUSH)
    data = seg * (real // step) + zlib.compressobj(6, zlib.DEFLATED, -15).flush()
    crc = 0
    block = bytes(step)
    for _ in range(real // step):
        crc = zlib.crc32(block, crc)
    name = b"vectors.txt"
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(data), declared, len(name), 0) + name
    fields = (20, 20, 0, 8, 0, 0, crc, len(data), declared, len(name), 0, 0, 0, 0, 0o644 << 16, 0)
    central = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", *fields) + name
    offset = len(local) + len(data)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(central), offset, 0)
    path.write_bytes(local + data + central + end)
    return path


@pytest.fixture
def copies(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The members whose bytes the unpacker started to write (a bomb must be refused before its first byte)."""
    seen: list[str] = []
    real = archives._copy

    def counting(archive, dest, m, budget):
        seen.append(m.name)
        return real(archive, dest, m, budget)

    monkeypatch.setattr(archives, "_copy", counting)
    return seen


@pytest.mark.parametrize("build", [tar_bz2_bomb, zip_bomb], ids=["tar.bz2", "zip"])
def test_a_tiny_archive_that_would_unpack_to_a_gibibyte_is_refused_at_its_header(place, copies, build) -> None:
    archive = build(place["models"] / ("model.tar.bz2" if build is tar_bz2_bomb else "model.zip"))
    assert archive.stat().st_size < 2 * 1024 * 1024
    with pytest.raises(ArchiveError, match=r"model\.(tar\.bz2|zip): would unpack to more than 200 times its own"):
        _resolve(archive)
    assert copies == []  # refused on the header's size: not one byte decompressed into the cache
    assert _left_behind(place) == []


def test_the_size_limit_applies_whatever_the_ratio(place, copies, monkeypatch) -> None:
    monkeypatch.setenv("EVALFARM_ARCHIVE_MAX_RATIO", "0")  # no ratio limit: the total size stops it
    monkeypatch.setenv("EVALFARM_ARCHIVE_MAX_SIZE", "100MB")
    archive = tar_bz2_bomb(place["models"] / "model.tar.bz2")
    with pytest.raises(ArchiveError, match=r"more than 100000000 bytes in all .*EVALFARM_ARCHIVE_MAX_SIZE"):
        _resolve(archive)
    assert copies == [] and _left_behind(place) == []


def test_a_zip_entry_larger_than_its_header_says_stops_at_the_header_size(place, monkeypatch) -> None:
    """A header that lies small (10 bytes declared, 16 MiB inside) cannot slip the bytes past the limits."""
    archive = zip_bomb(place["models"] / "model.zip", declared=10, real=1 << 24)
    with pytest.raises(ModelLoadError, match=r"model\.zip: .*(more than the 10 bytes its header says|Bad CRC)"):
        _resolve(archive)
    assert _left_behind(place) == []


def test_an_archive_of_too_many_members_is_refused(place, monkeypatch) -> None:
    monkeypatch.setenv("EVALFARM_ARCHIVE_MAX_MEMBERS", "50")
    archive = _tar(place["models"] / "model.tar", [(_info(f"f{i}"), b"") for i in range(51)])
    with pytest.raises(ArchiveError, match=r"model\.tar: holds more than 50 members .*EVALFARM_ARCHIVE_MAX_MEMBERS"):
        _resolve(archive)
    assert _left_behind(place) == []


def test_a_zips_member_count_is_checked_before_anything_is_written(place, tmp_path) -> None:
    """Issue 48: a zip's central directory gives its member count first, so 101 empty members under a limit of 100
    are refused with nothing created (on main: 100 files written, then the error, then removed by the caller)."""
    from evalfarm.encoders.archives import unpack

    archive = place["models"] / "model.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for i in range(101):
            zf.writestr(f"f{i}", b"")
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(ArchiveError, match=r"model\.zip: holds more than 100 members"):
        unpack(archive, dest, ArchiveLimits(max_members=100))
    assert list(dest.iterdir()) == []


def test_the_archive_limits_are_settings_of_the_config_file(tmp_path, monkeypatch) -> None:
    from evalfarm.config import ConfigError, resolve_settings

    for var in ("EVALFARM_ARCHIVE_MAX_SIZE", "EVALFARM_ARCHIVE_MAX_RATIO", "EVALFARM_ARCHIVE_MAX_MEMBERS"):
        monkeypatch.delenv(var, raising=False)
    assert ArchiveLimits.from_env() == ArchiveLimits(20 * 10**9, 200.0, 100_000)
    cfg = tmp_path / ".evalfarm.toml"
    cfg.write_text('archive_max_size = "1GiB"\narchive_max_ratio = 50\narchive_max_members = 10\n')
    with resolve_settings(config_file=cfg).data_exported():  # what every command and API call does
        assert ArchiveLimits.from_env() == ArchiveLimits(GIB, 50.0, 10)
    assert ArchiveLimits.from_env() == ArchiveLimits()
    cfg.write_text('archive_max_size = "big"\n')
    with pytest.raises(ConfigError, match="archive_max_size must be a size"):
        resolve_settings(config_file=cfg)
    monkeypatch.setenv("EVALFARM_ARCHIVE_MAX_MEMBERS", "many")
    with pytest.raises(ModelLoadError, match="EVALFARM_ARCHIVE_MAX_MEMBERS: archive_max_members must be a whole"):
        ArchiveLimits.from_env()
