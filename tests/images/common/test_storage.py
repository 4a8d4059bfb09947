"""elasticctr_common.storage against real backends: local files, an S3 server, HDFS."""

from __future__ import annotations

import os
import re
import threading

import pytest
from elasticctr_common.storage import (
    TMP_PREFIX,
    HdfsStore,
    LocalStore,
    S3Store,
    StorageError,
    open_store,
)


def _missing(store, path: str) -> re.Pattern[str]:
    return re.compile(re.escape(store.uri(path)))


def test_bytes_and_text_round_trip(store):
    every_byte = bytes(range(256)) * 3
    store.write_bytes("blob.bin", every_byte)
    store.write_text("note.txt", "héllo\nwörld\n")
    assert store.read_bytes("blob.bin") == every_byte
    assert store.read_text("note.txt") == "héllo\nwörld\n"
    store.write_bytes("empty", b"")
    assert store.read_bytes("empty") == b""


def test_overwrite_replaces_the_whole_object(store):
    store.write_bytes("obj", b"long old content" * 100)
    store.write_bytes("obj", b"new")
    assert store.read_bytes("obj") == b"new"


def test_nested_directories_are_created_and_listed(store):
    store.write_text("a/b/c/d.txt", "deep")
    assert store.list() == ["a"]
    assert store.list("a") == ["b"]
    assert store.list("/a/b/c/") == ["d.txt"]  # leading/trailing slashes do not matter
    assert store.exists("a") and store.exists("a/b/c") and store.exists("a/b/c/d.txt")
    assert store.read_text("a/b/c/d.txt") == "deep"


def test_list_gives_sorted_immediate_children(store):
    for name in ("x/2", "x/10", "x/1", "x/sub/deep", "y"):
        store.write_text(name, name)
    assert store.list("x") == ["1", "10", "2", "sub"]
    assert store.list() == ["x", "y"]


def test_list_of_a_missing_path_or_a_file_is_empty(store):
    store.write_text("f", "file")
    assert store.list("nope") == []
    assert store.list("f") == []


def test_exists_is_not_fooled_by_siblings_sharing_a_name_prefix(store):
    # On S3 these keys sort before "a/..." and once hid it from a 2-key listing.
    for name in ("a-1", "a.bak", "ab"):
        store.write_text(name, name)
    assert not store.exists("a")
    store.write_text("a/x", "x")
    assert store.exists("a")
    assert not store.exists("missing")


def test_reading_a_missing_path_raises_file_not_found_naming_the_uri(store):
    with pytest.raises(FileNotFoundError, match=_missing(store, "no/such")):
        store.read_bytes("no/such")
    with pytest.raises(FileNotFoundError, match=_missing(store, "nope.txt")):
        store.read_text("nope.txt")


def test_download_of_a_missing_path_raises_and_leaves_no_file(store, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(FileNotFoundError, match=_missing(store, "gone")):
        store.download("gone", out / "copy")
    assert list(out.iterdir()) == []


def test_delete_removes_files_and_trees_but_not_name_prefix_siblings(store):
    for name in ("d/1", "d/e/2", "dx", "keep/f"):
        store.write_text(name, name)
    store.delete("d")
    assert not store.exists("d") and not store.exists("d/e/2")
    assert store.exists("dx")
    store.delete("dx")
    store.delete("never/there")  # not an error
    assert store.list() == ["keep"]


@pytest.mark.slow
def test_upload_and_download_a_large_file(store, tmp_path):
    # 9 MiB: above boto3's 8 MiB multipart threshold, more than one HDFS packet stream.
    data = os.urandom(9 * 1024 * 1024)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    store.upload(src, "models/1/big.bin")
    store.download("models/1/big.bin", tmp_path / "dl" / "big.bin")
    assert (tmp_path / "dl" / "big.bin").read_bytes() == data
    assert os.listdir(tmp_path / "dl") == ["big.bin"]  # no temp file left behind


def test_upload_of_a_missing_local_file_raises(store, tmp_path):
    with pytest.raises(FileNotFoundError):
        store.upload(tmp_path / "absent", "x")
    assert not store.exists("x")


def test_child_store_shares_the_tree(store):
    models = store.child("models")
    models.write_text("donefile", "line\n")
    assert store.read_text("models/donefile") == "line\n"
    assert models.uri("/1/dense/") == store.uri("models/1/dense")
    assert models.uri() == store.uri("models")


def test_a_reader_never_sees_a_partial_object(store):
    big, small = b"a" * (3 * 1024 * 1024), b"b" * (2 * 1024 * 1024 + 7)
    store.write_bytes("obj", small)
    done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for i in range(8):  # bounded: 8 writes, then stop the reader
                store.write_bytes("obj", big if i % 2 == 0 else small)
        except BaseException as err:
            errors.append(err)
        finally:
            done.set()

    writer = threading.Thread(target=write)
    writer.start()
    reads = 0
    while not done.is_set():
        seen = store.read_bytes("obj")
        assert seen in (big, small), f"partial object of {len(seen)} bytes visible"
        reads += 1
    writer.join()
    assert not errors, errors
    assert reads > 0


def _fail_commit(store, monkeypatch) -> None:
    """Make the step that publishes a written object fail."""

    def boom(*args, **kwargs):
        raise OSError("injected failure")

    if isinstance(store, LocalStore):
        monkeypatch.setattr("elasticctr_common.storage.os.replace", boom)
    elif isinstance(store, HdfsStore):
        monkeypatch.setattr(store.client, "rename", boom)
    else:
        assert isinstance(store, S3Store)
        monkeypatch.setattr(store.client, "put_object", boom)


def _raw_names(store, path: str) -> list[str]:
    """Directory entries as the backend has them, temp names included."""
    if isinstance(store, LocalStore):
        return sorted(os.listdir(store._path(path)))
    if isinstance(store, HdfsStore):
        return sorted(os.path.basename(s.path) for s in store.client.list_status(store._path(path)))
    return store.list(path)


def test_a_failed_write_keeps_the_old_object_and_leaves_no_temp(store, monkeypatch):
    store.write_text("dir/obj", "old")
    _fail_commit(store, monkeypatch)
    with pytest.raises(OSError, match="injected failure"):
        store.write_text("dir/obj", "new")
    monkeypatch.undo()
    assert store.read_text("dir/obj") == "old"
    assert _raw_names(store, "dir") == ["obj"]


def test_list_hides_debris_of_a_writer_killed_mid_write(store):
    if isinstance(store, S3Store):
        pytest.skip("S3 writes are single PUTs: no temp objects")
    store.write_text("hour/part-0", "data")
    store.write_text(f"hour/{TMP_PREFIX}part-1.0123", "half")  # what a killed writer leaves
    assert store.list("hour") == ["part-0"]


def test_local_files_get_the_usual_mode(tmp_path):
    umask = os.umask(0)
    os.umask(umask)
    store = open_store(str(tmp_path))
    store.write_text("f", "x")
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.slow
def test_hdfs_user_comes_from_hdfs_ugi(hdfs_cluster, monkeypatch):
    monkeypatch.setenv("HADOOP_USER_NAME", "placeholder")  # records it for restoring, then:
    monkeypatch.delenv("HADOOP_USER_NAME")
    monkeypatch.setenv("HDFS_UGI", f"{hdfs_cluster.user},secret")
    store = open_store(f"{hdfs_cluster.url}/ugi-test")
    assert isinstance(store, HdfsStore)
    store.write_text("f", "x")
    assert store.client.get_file_info(store._path("f")).owner == hdfs_cluster.user


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        (
            "ftp://host/data",
            "ftp://host/data: unsupported storage scheme 'ftp'; allowed: file, s3, hdfs",
        ),
        ("relative/dir", "relative/dir: not a storage URI; pass file:///<absolute directory>"),
        ("s3:///prefix", "s3:///prefix: an s3:// URI needs a bucket"),
        ("hdfs:///train_data", "hdfs:///train_data: an hdfs:// URI needs host:port"),
    ],
)
def test_bad_uris_are_refused_with_the_uri_in_the_message(uri, message):
    with pytest.raises(StorageError, match=re.escape(message)):
        open_store(uri)


def test_a_bare_absolute_path_is_a_local_store(tmp_path):
    store = open_store(str(tmp_path))
    assert isinstance(store, LocalStore)
    assert store.uri("a/b") == f"file://{tmp_path}/a/b"


@pytest.mark.parametrize("uri", ["file://data", "file://data/train", "file://tmp/ctr"])
def test_a_file_uri_with_a_host_is_refused_not_read_as_the_current_directory(
    uri, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StorageError, match="read as a host here; pass file:///<absolute"):
        open_store(uri)
    assert list(tmp_path.iterdir()) == []


def test_file_localhost_is_the_local_root(tmp_path):
    store = open_store(f"file://localhost{tmp_path}")
    store.write_text("x.txt", "1")
    assert (tmp_path / "x.txt").read_text() == "1"
