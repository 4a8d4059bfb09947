"""One storage interface for every workload: file://, s3:// and hdfs:// URIs.

Each store is rooted at a URI; paths passed to its methods are relative to that root,
with "/" separators. Single-object writes are atomic: readers see the old object or the
whole new one, never a prefix (local and HDFS write a temporary name then rename;
an S3 PUT is atomic by itself).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from urllib.parse import urlparse

from . import secrets
from .contract import TrainerEnv

SCHEMES = ("file", "s3", "hdfs")
# Name prefix of in-flight writes (local, HDFS): list() hides them, so a reader of a directory
# never sees a half-written object, nor the debris of a writer killed mid-write.
TMP_PREFIX = "._tmp."


def _tmp_name(name: str) -> str:
    return f"{TMP_PREFIX}{name}.{uuid.uuid4().hex}"


class StorageError(Exception):
    """A storage operation failed; the message names the URI."""


class Store(ABC):
    """A directory-like view of one storage root."""

    def __init__(self, root_uri: str) -> None:
        self.root_uri = root_uri.rstrip("/")

    def uri(self, path: str = "") -> str:
        """The absolute URI of `path` under this store."""
        path = path.strip("/")
        return f"{self.root_uri}/{path}" if path else self.root_uri

    def child(self, path: str) -> Store:
        """A store rooted at `path` under this one."""
        return open_store(self.uri(path))

    @abstractmethod
    def read_bytes(self, path: str) -> bytes: ...

    @abstractmethod
    def write_bytes(self, path: str, data: bytes) -> None:
        """Write atomically, creating parent directories."""

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def list(self, path: str = "") -> list[str]:
        """Names of the immediate children of directory `path`, sorted; [] if it is none."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove a file or a whole directory tree; missing paths are not an error."""

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8")

    def write_text(self, path: str, text: str) -> None:
        self.write_bytes(path, text.encode("utf-8"))

    def download(self, path: str, local_path: str | os.PathLike[str]) -> None:
        """Copy one object to a local file (atomically)."""
        local = Path(local_path)
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".{local.name}.{uuid.uuid4().hex}.tmp")
        try:
            self._download_to(path, tmp)
            os.replace(tmp, local)
        finally:
            tmp.unlink(missing_ok=True)

    def upload(self, local_path: str | os.PathLike[str], path: str) -> None:
        """Copy one local file to an object (atomically)."""
        self.write_bytes(path, Path(local_path).read_bytes())

    def _download_to(self, path: str, local: Path) -> None:
        local.write_bytes(self.read_bytes(path))


class LocalStore(Store):
    def __init__(self, root_uri: str) -> None:
        super().__init__(root_uri)
        self.root = Path(urlparse(root_uri).path)

    def _path(self, path: str) -> Path:
        return self.root / path.strip("/") if path.strip("/") else self.root

    def read_bytes(self, path: str) -> bytes:
        try:
            return self._path(path).read_bytes()
        except FileNotFoundError as err:
            raise FileNotFoundError(f"{self.uri(path)} does not exist") from err

    def write_bytes(self, path: str, data: bytes) -> None:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(_tmp_name(target.name))
        try:
            # Not mkstemp: its 0600 mode would survive the rename; 0666 & ~umask is a new file's.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def exists(self, path: str) -> bool:
        return self._path(path).exists()

    def list(self, path: str = "") -> list[str]:
        target = self._path(path)
        if not target.is_dir():
            return []
        return sorted(p.name for p in target.iterdir() if not p.name.startswith(TMP_PREFIX))

    def delete(self, path: str) -> None:
        target = self._path(path)
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)

    def _download_to(self, path: str, local: Path) -> None:
        try:
            shutil.copyfile(self._path(path), local)
        except FileNotFoundError as err:
            raise FileNotFoundError(f"{self.uri(path)} does not exist") from err


class S3Store(Store):
    """S3-compatible storage; endpoint and keys come from boto3's standard environment."""

    def __init__(self, root_uri: str) -> None:
        super().__init__(root_uri)
        import boto3  # imported here so file:// users need no boto3 configuration

        parsed = urlparse(root_uri)
        if not parsed.netloc:
            raise StorageError(f"{root_uri}: an s3:// URI needs a bucket (s3://bucket/prefix)")
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.client = boto3.client("s3")

    def _key(self, path: str) -> str:
        return posixpath.join(self.prefix, path.strip("/")).strip("/")

    def read_bytes(self, path: str) -> bytes:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(path))
        except self.client.exceptions.NoSuchKey as err:
            raise FileNotFoundError(f"{self.uri(path)} does not exist") from err
        return bytes(response["Body"].read())

    def write_bytes(self, path: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(path), Body=data)

    def exists(self, path: str) -> bool:
        """True for an object, or a "directory": a prefix that has objects under it."""
        key = self._key(path)
        if key:
            # Exact key first: a listing of Prefix=key could be filled by siblings such as
            # "key.bak" or "key-1", which sort before "key/...".
            listing = self.client.list_objects_v2(Bucket=self.bucket, Prefix=key, MaxKeys=1)
            if any(o["Key"] == key for o in _contents(listing)):
                return True
            key += "/"
        listing = self.client.list_objects_v2(Bucket=self.bucket, Prefix=key, MaxKeys=1)
        return bool(_contents(listing))

    def list(self, path: str = "") -> list[str]:
        prefix = self._key(path)
        prefix = prefix + "/" if prefix else ""
        names: set[str] = set()
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
            names.update(o["Key"][len(prefix) :] for o in page.get("Contents", []))
            names.update(
                p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", [])
            )
        return sorted(n for n in names if n)

    def delete(self, path: str) -> None:
        key = self._key(path)
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=key):
            doomed = [
                {"Key": o["Key"]}
                for o in page.get("Contents", [])
                if o["Key"] == key or o["Key"].startswith(key.rstrip("/") + "/")
            ]
            if doomed:
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": doomed})

    def _download_to(self, path: str, local: Path) -> None:
        if not self.exists(path):
            raise FileNotFoundError(f"{self.uri(path)} does not exist")
        self.client.download_file(self.bucket, self._key(path), str(local))

    def upload(self, local_path: str | os.PathLike[str], path: str) -> None:
        # upload_file streams (multipart for large files); S3 completes it atomically.
        self.client.upload_file(str(local_path), self.bucket, self._key(path))


def _contents(listing: dict[str, list[dict[str, str]]]) -> list[dict[str, str]]:
    return listing.get("Contents", [])


class HdfsStore(Store):
    """HDFS over its native RPC (no JVM). User from HADOOP_USER_NAME, else HDFS_UGI (a
    secret: elasticctr_common.secrets)."""

    def __init__(self, root_uri: str) -> None:
        super().__init__(root_uri)
        from hdfs_native import Client

        parsed = urlparse(root_uri)
        if not parsed.netloc:
            raise StorageError(f"{root_uri}: an hdfs:// URI needs host:port")
        ugi = secrets.read(TrainerEnv.HDFS_UGI)
        if ugi and "HADOOP_USER_NAME" not in os.environ:
            # ElasticCTR's UGI is "user,password"; simple auth only uses the user.
            os.environ["HADOOP_USER_NAME"] = ugi.split(",", 1)[0]
        self.root = parsed.path.rstrip("/") or "/"
        self.client = Client(f"hdfs://{parsed.netloc}")

    def _path(self, path: str) -> str:
        return posixpath.join(self.root, path.strip("/")).rstrip("/") or "/"

    def read_bytes(self, path: str) -> bytes:
        try:
            with self.client.read(self._path(path)) as reader:
                return bytes(reader.read())
        except FileNotFoundError as err:
            raise FileNotFoundError(f"{self.uri(path)} does not exist") from err

    def write_bytes(self, path: str, data: bytes) -> None:
        target = self._path(path)
        parent = posixpath.dirname(target)
        self.client.mkdirs(parent, create_parent=True)
        tmp = posixpath.join(parent, _tmp_name(posixpath.basename(target)))
        try:
            with self.client.create(tmp) as writer:
                writer.write(data)
            self.client.rename(tmp, target, overwrite=True)
        except BaseException:
            with contextlib.suppress(Exception):  # keep the original error, not the clean-up's
                self.client.delete(tmp)
            raise

    def exists(self, path: str) -> bool:
        try:
            self.client.get_file_info(self._path(path))
        except FileNotFoundError:
            return False
        return True

    def list(self, path: str = "") -> list[str]:
        target = self._path(path)
        try:
            if not self.client.get_file_info(target).isdir:
                return []  # list_status of a file is the file itself; other stores give []
            statuses = list(self.client.list_status(target))
        except FileNotFoundError:
            return []
        names = (posixpath.basename(s.path.rstrip("/")) for s in statuses)
        return sorted(n for n in names if not n.startswith(TMP_PREFIX))

    def delete(self, path: str) -> None:
        if self.exists(path):
            self.client.delete(self._path(path), recursive=True)


def open_store(uri: str) -> Store:
    """The store for a file://, s3:// or hdfs:// URI; a bare absolute path means file://.
    A relative path is refused: in a pod it would name a directory of the image."""
    if uri.startswith("/"):
        uri = "file://" + uri
    elif "://" not in uri:
        raise StorageError(
            f"{uri}: not a storage URI; pass file:///<absolute directory> (or the absolute "
            f"path, e.g. {Path(uri).absolute()}), s3://<bucket>/<prefix> or "
            "hdfs://<host:port>/<path>"
        )
    parsed = urlparse(uri)
    scheme = parsed.scheme
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            # file://data is the host "data" with an empty path: the current directory.
            raise StorageError(
                f"{uri}: a file:// URI names its directory by an absolute path "
                f"(file:///{parsed.netloc}{parsed.path} is /{parsed.netloc}{parsed.path}), "
                f"and {parsed.netloc!r} is read as a host here; pass file:///<absolute "
                "directory>, or its absolute path"
            )
        return LocalStore(uri)
    if scheme == "s3":
        return S3Store(uri)
    if scheme == "hdfs":
        return HdfsStore(uri)
    raise StorageError(
        f"{uri}: unsupported storage scheme {scheme!r}; allowed: {', '.join(SCHEMES)}"
    )
