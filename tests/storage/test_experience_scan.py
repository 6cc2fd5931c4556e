"""``ExperienceReader.scan`` (one directory descriptor, reader threads ahead) answers exactly what ``read`` answers
for each listed file, in the listing's order: the same StoredExperience, the same BadFile errors, the same skips."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from reme_procedure_memory.storage import experiences as experiences
from reme_procedure_memory.storage.experiences import BATCH, BadFile, ExperienceReader, StoredExperience

from helpers import experience_record, place_trajectory

TRAJECTORIES = "session/trajectories"


def directory(ws: Path) -> ExperienceReader:
    """A fresh instance (its source checks are cached per instance)."""
    return ExperienceReader(ws, "procedures", TRAJECTORIES)


def valid(i: int, source: str = f"{TRAJECTORIES}/run.jsonl") -> bytes:
    return json.dumps(
        experience_record(f"d{i}", f"when service {i} degrades", f"restart service {i}", sources=(source,))
    ).encode()


def one_by_one(ws: Path) -> list[StoredExperience | BadFile]:
    """What ``read`` answers for every listed path, each by a fresh instance."""
    return [item for path in directory(ws).paths() if (item := directory(ws).read(path)) is not None]


@pytest.fixture(params=["inline", "readers"])
def reading(request, monkeypatch) -> str:
    """Both ways a scan reads: in its own thread (files in the page cache), or with reader threads ahead (reads
    that wait on the disk); which one a scan takes depends on timing, so each test forces each."""
    if request.param == "readers":
        monkeypatch.setattr(experiences, "SLOW_READ", 0.0)
        monkeypatch.setattr(experiences, "SLOW_AFTER", 1)
    else:
        monkeypatch.setattr(experiences, "SLOW_READ", float("inf"))
    return request.param


@pytest.fixture
def ws(tmp_path: Path, reading: str) -> Path:
    place_trajectory(tmp_path)
    (tmp_path / "procedures").mkdir()
    return tmp_path


def test_scan_answers_what_read_answers_for_every_kind_of_entry(ws: Path, tmp_path_factory) -> None:
    procedures = ws / "procedures"
    (procedures / "restart-service.json").write_bytes(valid(1))
    (procedures / "large-experience.json").write_text(
        json.dumps(
            experience_record(
                "large", "when a long runbook applies", "step. " * 40_000, sources=(f"{TRAJECTORIES}/run.jsonl",)
            )
        )
    )
    (procedures / "broken-json.json").write_bytes(b'{"description": "d", ')
    (procedures / "not-utf8.json").write_bytes(b"\xff\xfe{}")
    (procedures / "Bad_Name.json").write_bytes(valid(2))
    (procedures / "missing-source.json").write_bytes(valid(3, f"{TRAJECTORIES}/gone.jsonl"))
    (procedures / "link-inside.json").symlink_to(procedures / "restart-service.json")
    outside = tmp_path_factory.mktemp("outside") / "secret.json"
    outside.write_bytes(valid(4))
    (procedures / "link-outside.json").symlink_to(outside)
    (procedures / "dangling-link.json").symlink_to(procedures / "nothing.json")
    (procedures / "subdirectory.json").mkdir()
    (procedures / "subdirectory.json" / "inner.json").write_bytes(valid(5))
    (procedures / "half-written.json.tmp").write_bytes(valid(6))

    scanned = list(directory(ws).scan())

    assert scanned == one_by_one(ws)
    by_path = {item.path: item for item in scanned}
    assert [item.path for item in scanned] == sorted(by_path)
    assert {p for p, item in by_path.items() if isinstance(item, StoredExperience)} == {
        "procedures/restart-service.json",
        "procedures/large-experience.json",
    }
    bad = {p.removeprefix("procedures/"): item.error for p, item in by_path.items() if isinstance(item, BadFile)}
    assert sorted(bad) == [
        "Bad_Name.json",
        "broken-json.json",
        "dangling-link.json",
        "link-inside.json",
        "link-outside.json",
        "missing-source.json",
        "not-utf8.json",
    ]
    assert "rename the file" in bad["Bad_Name.json"]
    assert "invalid JSON" in bad["broken-json.json"]
    assert "not UTF-8" in bad["not-utf8.json"]
    assert "does not exist" in bad["missing-source.json"]
    for link in ("link-inside.json", "link-outside.json", "dangling-link.json"):
        assert "symbolic link" in bad[link]
        assert str(outside) not in bad[link]  # a link's target is never shown
    # a link's version is that of its target path, never of the file it points to
    assert by_path["procedures/link-inside.json"].version != by_path["procedures/restart-service.json"].version


def test_scan_keeps_the_listing_order_across_many_batches(ws: Path) -> None:
    count = 3 * BATCH + 7
    for i in range(count):
        data = valid(i) if i % 10 else b"not json"
        (ws / "procedures" / f"experience-{i:04d}.json").write_bytes(data)

    scanned = list(directory(ws).scan())

    assert [item.path for item in scanned] == [f"procedures/experience-{i:04d}.json" for i in range(count)]
    assert sum(isinstance(item, BadFile) for item in scanned) == len(range(0, count, 10))
    assert scanned == one_by_one(ws)


def test_entries_removed_or_replaced_after_the_listing_are_skipped(ws: Path, monkeypatch) -> None:
    procedures = ws / "procedures"
    count = BATCH + 10
    for i in range(count):
        (procedures / f"experience-{i:04d}.json").write_bytes(valid(i))
    removed = {f"experience-{i:04d}.json" for i in (0, 5, BATCH + 3)}
    replaced = f"experience-{BATCH + 1:04d}.json"
    listing = experiences.entry_names

    def list_then_change(dir_fd: int) -> list[str]:
        names = listing(dir_fd)
        for name in removed:
            (procedures / name).unlink()
        (procedures / replaced).unlink()
        (procedures / replaced).mkdir()  # a directory now has the listed file's name
        return names + ["never-existed.json"]

    monkeypatch.setattr(experiences, "entry_names", list_then_change)
    scanned = [item.path for item in directory(ws).scan()]

    expected = [f"procedures/experience-{i:04d}.json" for i in range(count)]
    assert scanned == [p for p in expected if p.removeprefix("procedures/") not in removed | {replaced}]


def test_a_scan_closed_early_stops_its_readers_and_closes_the_directory(ws: Path, monkeypatch) -> None:
    for i in range(12 * BATCH):
        (ws / "procedures" / f"experience-{i:04d}.json").write_bytes(valid(i))
    fds = sorted(os.listdir("/proc/self/fd"))
    closed = threading.Event()
    late_reads = []  # reads begun after the scan was closed: their directory descriptor may be another file's
    read_batch = experiences.read_batch

    def watched(names: list[str], dir_fd: int):
        if closed.is_set():
            late_reads.append(names[0])
        return read_batch(names, dir_fd)

    monkeypatch.setattr(experiences, "read_batch", watched)
    scan = directory(ws).scan()
    for i in range(BATCH + 1):  # into the second batch: the readers, if any, have batches in flight
        assert next(scan).path == f"procedures/experience-{i:04d}.json"
    scan.close()
    closed.set()

    for thread in threading.enumerate():  # a reader left running would still read its queued batches
        if thread.name.startswith("experience-scan"):
            thread.join(timeout=30)
    assert late_reads == []
    assert not [t for t in threading.enumerate() if t.name.startswith("experience-scan")]
    assert sorted(os.listdir("/proc/self/fd")) == fds


def test_an_unreadable_file_stops_the_scan_there(ws: Path, monkeypatch) -> None:
    for i in range(3 * BATCH):
        (ws / "procedures" / f"experience-{i:04d}.json").write_bytes(valid(i))
    unreadable = f"experience-{2 * BATCH + 5:04d}.json"
    read_entry = experiences.read_entry

    def denied(path: str, dir_fd: int | None = None):
        if path == unreadable:  # as os.open answers for a file the process may not read (tests run as root)
            raise PermissionError(13, "Permission denied", path)
        return read_entry(path, dir_fd)

    monkeypatch.setattr(experiences, "read_entry", denied)
    scanned = []
    with pytest.raises(PermissionError):
        for item in directory(ws).scan():
            scanned.append(item.path)

    assert scanned == [f"procedures/experience-{i:04d}.json" for i in range(2 * BATCH + 5)]


def test_a_missing_directory_scans_empty(tmp_path: Path) -> None:
    assert list(directory(tmp_path).scan()) == []
    assert directory(tmp_path).paths() == []
