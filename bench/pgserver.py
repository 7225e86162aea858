"""A throwaway local PostgreSQL server for benchmarks and tests.

:func:`local_postgres` runs ``initdb`` and ``pg_ctl start`` from the Debian
``postgresql`` package (binaries under ``/usr/lib/postgresql/<major>/bin``, or
on ``PATH``) in a temporary directory, listening on ``127.0.0.1`` on a free
port with ``trust`` authentication, and stops and deletes it on exit.
PostgreSQL refuses to run as root, so when the caller is root the server runs
as an unprivileged user (``nobody`` by default) through ``runuser``.

The server keeps PostgreSQL's durable defaults (``fsync=on``,
``synchronous_commit=on``): the benchmark compares durable savers.

Example:
    >>> from deltalog.bench.pgserver import local_postgres, find_pg_bindir
    >>> if find_pg_bindir() is not None:  # doctest: +SKIP
    ...     with local_postgres() as dsn:
    ...         print(dsn)
    postgresql://postgres@127.0.0.1:54321/postgres
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["PostgresUnavailable", "find_pg_bindir", "local_postgres", "postgres_reachable"]


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries were found, or the server did not start."""


def find_pg_bindir() -> Path | None:
    """Locate the directory holding ``initdb`` and ``pg_ctl``.

    Looks at ``$PG_BINDIR``, then the newest ``/usr/lib/postgresql/<major>/bin``
    (Debian and Ubuntu do not put ``initdb`` on ``PATH``), then ``PATH``.

    Returns:
        The directory, or ``None`` if PostgreSQL is not installed.
    """
    candidates: list[Path] = []
    if env := os.environ.get("PG_BINDIR"):
        candidates.append(Path(env))
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():

        def major(p: Path) -> tuple[int, ...]:
            return tuple(int(x) for x in re.findall(r"\d+", p.name)) or (0,)

        candidates.extend(p / "bin" for p in sorted(debian.iterdir(), key=major, reverse=True))
    if on_path := shutil.which("initdb"):
        candidates.append(Path(on_path).resolve().parent)
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "pg_ctl").is_file():
            return directory
    return None


def postgres_reachable(dsn: str, timeout: float = 3.0) -> str | None:
    """Check that a PostgreSQL server answers at ``dsn``.

    Args:
        dsn: A libpq connection string or URL.
        timeout: Connect timeout in seconds.

    Returns:
        ``None`` when a connection succeeded, else the reason it did not.
    """
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install 'deltalog[postgres]')"
    try:
        with psycopg.connect(dsn, connect_timeout=max(1, int(timeout))) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"cannot connect to {dsn}: {exc}".strip()
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(cmd: Sequence[str], user: str | None, *, timeout: float) -> None:
    full = ["runuser", "-u", user, "--", *cmd] if user else list(cmd)
    proc = subprocess.run(full, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise PostgresUnavailable(
            f"{' '.join(full)} exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()}"
        )


@contextlib.contextmanager
def local_postgres(
    *,
    user: str | None = None,
    port: int | None = None,
    settings: dict[str, str] | None = None,
    start_timeout: float = 60.0,
) -> Iterator[str]:
    """Start a throwaway PostgreSQL server and yield its DSN.

    Args:
        user: Unprivileged user to run the server as when the caller is root
            (default ``nobody``); ignored when not root.
        port: TCP port on 127.0.0.1; a free one by default.
        settings: Extra ``-c name=value`` server settings.
        start_timeout: Seconds to wait for ``initdb`` and for the server to
            accept connections.

    Yields:
        ``postgresql://postgres@127.0.0.1:<port>/postgres`` (trust auth).

    Raises:
        PostgresUnavailable: If the binaries are missing or the server does not
            start; the message carries the server log's tail.
    """
    bindir = find_pg_bindir()
    if bindir is None:
        raise PostgresUnavailable(
            "PostgreSQL server binaries not found (looked in $PG_BINDIR, "
            "/usr/lib/postgresql/*/bin and PATH); install them with "
            "`apt-get install postgresql` or pass --pg DSN"
        )
    run_as = (user or "nobody") if os.geteuid() == 0 else None
    if run_as is not None and shutil.which("runuser") is None:
        raise PostgresUnavailable(
            "running as root but `runuser` is missing, and PostgreSQL refuses to run as "
            "root; run the benchmark as a normal user or pass --pg DSN"
        )
    root = Path(tempfile.mkdtemp(prefix="deltalog-pg-"))
    data = root / "data"
    log = root / "server.log"
    port = port or _free_port()
    options = {"listen_addresses": "127.0.0.1", "port": str(port)}
    options["unix_socket_directories"] = str(root)
    options.update(settings or {})
    started = False
    try:
        if run_as is not None:
            shutil.chown(root, user=run_as)
        _run(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-instructions",
            ],
            run_as,
            timeout=start_timeout,
        )
        opts = " ".join(f"-c {k}={v}" for k, v in options.items())
        try:
            _run(
                [
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    opts,
                    "-l",
                    str(log),
                    "-w",
                    "-t",
                    str(int(start_timeout)),
                    "start",
                ],
                run_as,
                timeout=start_timeout + 10,
            )
        except PostgresUnavailable as exc:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise PostgresUnavailable(f"{exc}\nserver log:\n{tail}") from exc
        started = True
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if started:
            with contextlib.suppress(PostgresUnavailable, subprocess.TimeoutExpired):
                _run(
                    [str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                    run_as,
                    timeout=60,
                )
        shutil.rmtree(root, ignore_errors=True)
