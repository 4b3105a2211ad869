"""p4c-ebpf's BPF object loaded by the system's libbpf (``libbpf.so.1``, Debian's libbpf1), through ctypes.

Why not ``bpftool prog loadall``: p4c-ebpf names its sections ``classifier/...`` and ``xdp/...``, from which
libbpf 1.x derives no program type (its table holds ``tc``, ``classifier`` and ``xdp`` alone), and bpftool
sets one type for every program of an object, while this one holds both kinds; and its maps are declared
pinned by name, which libbpf resolves against one pin root, ``/sys/fs/bpf`` by default -- the one bpffs
that every network namespace of this host shares.  A second switch loaded there would silently take the
first one's tables and registers as its own.  So each object is opened with its own pin root, each
program's type is set from its section before the load, and the verifier's verdict comes back as it
stated it (:class:`LoadError`).

Only the plain entry points of libbpf's API are used (object open/load/close, program and map accessors,
``bpf_obj_get``, ``bpf_map_*_elem``, ``bpf_prog_test_run_opts``); their structs are declared here as
libbpf 1.1's headers declare them, with their ``sz`` field, which is how libbpf tells versions apart.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness import bpffs

PROG_TYPE_SCHED_CLS, PROG_TYPE_XDP = 3, 6
LOG_LEVEL_VERBOSE, LOG_LEVEL_STATS = 1, 4
#: the verifier's log is read back when a load fails (a big program's full log runs to hundreds of MB:
#: the kernel keeps its last lines, where it says why, when the buffer is full)
FAILURE_LOG_BYTES = 16 << 20
STATS_LOG_BYTES = 1 << 16


class LibbpfError(RuntimeError):
    """libbpf is missing, or one of its calls failed (the message names the call and the errno)."""

    def __init__(self, message: str, errno: int = 0) -> None:
        super().__init__(message)
        self.errno = errno  # the call's errno (0: no call failed)


def _failed(call: str, err: int) -> LibbpfError:
    return LibbpfError(f"{call}: {os.strerror(err)} (errno {err})", err)


class LoadError(LibbpfError):
    """The kernel refused a program; the message ends with the verifier's last lines."""


class _OpenOpts(ctypes.Structure):
    _fields_ = (
        ("sz", ctypes.c_size_t),
        ("object_name", ctypes.c_char_p),
        ("relaxed_maps", ctypes.c_bool),
        ("pin_root_path", ctypes.c_char_p),
        ("_attach_prog_fd", ctypes.c_uint32),  # a removed field, kept as padding by libbpf
        ("kconfig", ctypes.c_char_p),
        ("btf_custom_path", ctypes.c_char_p),
        ("kernel_log_buf", ctypes.c_void_p),
        ("kernel_log_size", ctypes.c_size_t),
        ("kernel_log_level", ctypes.c_uint32),
    )


class _TestRunOpts(ctypes.Structure):
    _fields_ = (
        ("sz", ctypes.c_size_t),
        ("data_in", ctypes.c_void_p),
        ("data_out", ctypes.c_void_p),
        ("data_size_in", ctypes.c_uint32),
        ("data_size_out", ctypes.c_uint32),
        ("ctx_in", ctypes.c_void_p),
        ("ctx_out", ctypes.c_void_p),
        ("ctx_size_in", ctypes.c_uint32),
        ("ctx_size_out", ctypes.c_uint32),
        ("retval", ctypes.c_uint32),
        ("repeat", ctypes.c_int),
        ("duration", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("batch_size", ctypes.c_uint32),
    )


_lib: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    """libbpf, its functions typed (loaded once)."""
    global _lib
    if _lib is not None:
        return _lib
    name = ctypes.util.find_library("bpf")
    if name is None:
        raise LibbpfError("libbpf is not installed (Debian: apt-get install libbpf1 libbpf-dev)")
    c = ctypes.CDLL(name, use_errno=True)
    p, i, s = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    for fn, res, args in (
        ("bpf_object__open_file", p, (s, ctypes.POINTER(_OpenOpts))),
        ("bpf_object__load", i, (p,)),
        ("bpf_object__close", None, (p,)),
        ("bpf_object__next_program", p, (p, p)),
        ("bpf_program__section_name", s, (p,)),
        ("bpf_program__name", s, (p,)),
        ("bpf_program__set_type", i, (p, i)),
        ("bpf_program__fd", i, (p,)),
        ("bpf_program__pin", i, (p, s)),
        ("bpf_program__set_log_level", i, (p, ctypes.c_uint32)),
        ("bpf_program__set_log_buf", i, (p, p, ctypes.c_size_t)),
        ("libbpf_set_print", p, (p,)),
        ("bpf_obj_get", i, (s,)),
        ("bpf_map_lookup_elem", i, (i, p, p)),
        ("bpf_map_update_elem", i, (i, p, p, ctypes.c_uint64)),
        ("bpf_map_delete_elem", i, (i, p)),
        ("bpf_map_lookup_and_delete_elem", i, (i, p, p)),
        ("bpf_map_update_batch", i, (i, p, p, ctypes.POINTER(ctypes.c_uint32), p)),
        ("bpf_map_get_next_key", i, (i, p, p)),
        ("bpf_prog_test_run_opts", i, (i, ctypes.POINTER(_TestRunOpts))),
    ):
        f = getattr(c, fn)
        f.restype, f.argtypes = res, args
    c.libbpf_set_print(None)  # its warnings (p4c-ebpf's extra ELF sections) on stderr: quiet; errors come back here
    _lib = c
    return c


def _check(rc: int, call: str) -> int:
    if rc < 0:
        err = -rc if rc != -1 else ctypes.get_errno()
        raise _failed(call, err)
    return rc


def program_type(section: str) -> int:
    """The program type p4c-ebpf means by a section name (``classifier/...``: TC, ``xdp...``: XDP), or clang's
    libbpf-style one (``tc``: TC), as the objects of ``tools/`` name theirs."""
    if section.startswith("classifier") or section == "tc" or section.startswith("tc/"):
        return PROG_TYPE_SCHED_CLS
    if section.startswith("xdp"):
        return PROG_TYPE_XDP
    raise LibbpfError(f"section {section!r}: not a TC or XDP program section (classifier/..., tc, xdp/...)")


def _programs(obj: int) -> Iterator[tuple[int, str]]:
    """(libbpf's program handle, its section name) for every program of ``obj``, in section order."""
    prog = None
    while prog := lib().bpf_object__next_program(obj, prog):
        yield prog, lib().bpf_program__section_name(prog).decode()


@dataclass(frozen=True)
class Program:
    section: str
    name: str
    fd: int
    verified_insns: int  # instructions the verifier walked to accept it


class BpfObject:
    """One loaded object: its programs (by section), its maps pinned under ``pin_root`` (open them by path,
    :func:`map_get`).

    ``close()`` releases this process's handles; what is pinned stays until :func:`unpin` removes it."""

    def __init__(self, path: Path, pin_root: Path) -> None:
        self.path, self.pin_root = Path(path), Path(pin_root)
        self.programs: dict[str, Program] = {}
        self._handles: dict[str, int] = {}  # per program: libbpf's struct bpf_program *
        self._logs: dict[str, ctypes.Array[ctypes.c_char]] = {}  # per program: the verifier's words on it
        self._obj = self._load(LOG_LEVEL_STATS, STATS_LOG_BYTES)

    def _open(self, level: int, size: int) -> int:
        bpffs.ensure_mounted()
        self.pin_root.mkdir(parents=True, exist_ok=True)
        opts = _OpenOpts(sz=ctypes.sizeof(_OpenOpts), pin_root_path=str(self.pin_root).encode())
        ctypes.set_errno(0)
        obj = lib().bpf_object__open_file(str(self.path).encode(), ctypes.byref(opts))
        if not obj:
            err = ctypes.get_errno()
            raise _failed(f"bpf_object__open_file({self.path})", err)
        for prog, section in _programs(obj):
            _check(lib().bpf_program__set_type(prog, program_type(section)), f"bpf_program__set_type({section})")
            log = self._logs[section] = ctypes.create_string_buffer(size)
            _check(lib().bpf_program__set_log_buf(prog, ctypes.addressof(log), size), "bpf_program__set_log_buf")
            _check(lib().bpf_program__set_log_level(prog, level), "bpf_program__set_log_level")
        return obj

    def _load(self, level: int, size: int) -> int:
        obj = self._open(level, size)
        rc = lib().bpf_object__load(obj)
        if rc < 0:
            lib().bpf_object__close(obj)
            if level != LOG_LEVEL_VERBOSE:  # again, with the verifier saying why
                return self._load(LOG_LEVEL_VERBOSE, FAILURE_LOG_BYTES)
            # libbpf loads in section order and stops at the refusal: the last program with a log is the one
            refused = [(sec, log.value.decode(errors="replace").strip()) for sec, log in self._logs.items()]
            sec, text = next(((sec, t) for sec, t in reversed(refused) if t), ("?", ""))
            tail = "\n".join(text.splitlines()[-25:])
            raise LoadError(f"the kernel refused {self.path.name} ({sec}): {os.strerror(-rc)}\n{tail}")
        for prog, section in _programs(obj):
            name = lib().bpf_program__name(prog).decode()
            found = re.search(r"processed (\d+) insns", self._logs[section].value.decode(errors="replace"))
            insns = int(found.group(1)) if found else -1
            self.programs[section] = Program(section, name, lib().bpf_program__fd(prog), insns)
            self._handles[section] = prog
        self._logs.clear()
        return obj

    def pin_programs(self, directory: Path) -> dict[str, Path]:
        """Pin every program under ``directory`` (a section's slashes as underscores): what ``tc ...
        object-pinned`` attaches."""
        directory.mkdir(parents=True, exist_ok=True)
        out = {}
        for section in self.programs:
            path = directory / section.replace("/", "_")
            _check(lib().bpf_program__pin(self._handles[section], str(path).encode()), f"bpf_program__pin({path})")
            out[section] = path
        return out

    def test_run(self, section: str, data: bytes) -> int:
        """Run one program once on ``data`` (BPF_PROG_TEST_RUN) and return its return code: how p4c-ebpf's
        map initializer (default actions, the CRC32 table) is meant to be run once after the load."""
        return run_once(self.programs[section].fd, data)[0]

    def close(self) -> None:
        if self._obj:
            lib().bpf_object__close(self._obj)
            self._obj = 0


SKB_IFINDEX_END = 44  # struct __sk_buff up to its ifindex (offset 40): what run_once hands the kernel


def run_once(prog_fd: int, data: bytes, *, ifindex: int = 0, out_size: int = 0) -> tuple[int, bytes]:
    """Run a program once on ``data`` (BPF_PROG_TEST_RUN, on this thread's CPU): its return code and, with
    ``out_size``, the packet as it left (at most that many bytes).  ``ifindex`` (a TC program's): the
    interface the packet came in by, in this process's network namespace (0: loopback)."""
    buf = ctypes.create_string_buffer(data, len(data))
    out = ctypes.create_string_buffer(out_size) if out_size else None
    ctx = ctypes.create_string_buffer(bytes(SKB_IFINDEX_END - 4) + ifindex.to_bytes(4, "little")) if ifindex else None
    opts = _TestRunOpts(
        sz=ctypes.sizeof(_TestRunOpts),
        data_in=ctypes.addressof(buf),
        data_size_in=len(data),
        data_out=ctypes.addressof(out) if out is not None else None,
        data_size_out=out_size,
        ctx_in=ctypes.addressof(ctx) if ctx is not None else None,
        ctx_size_in=SKB_IFINDEX_END if ctx is not None else 0,
    )
    _check(lib().bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts)), "BPF_PROG_TEST_RUN")
    return int(opts.retval), out.raw[: opts.data_size_out] if out is not None else b""


def map_get(path: Path) -> int:
    """A file descriptor of the map pinned at ``path`` (close it with os.close)."""
    return _check(lib().bpf_obj_get(str(path).encode()), f"bpf_obj_get({path})")


def lookup(fd: int, key: bytes, value_size: int) -> bytes | None:
    """The value under ``key`` in map ``fd`` (None if there is none)."""
    k = ctypes.create_string_buffer(key, len(key))
    v = ctypes.create_string_buffer(value_size)
    if lib().bpf_map_lookup_elem(fd, ctypes.addressof(k), ctypes.addressof(v)) < 0:
        err = ctypes.get_errno()
        if err == errno.ENOENT:
            return None
        raise _failed("bpf_map_lookup_elem", err)
    return v.raw


def update(fd: int, key: bytes, value: bytes, flags: int = 0) -> None:
    """Write ``value`` under ``key`` in map ``fd`` (``flags``: BPF_ANY 0, BPF_NOEXIST 1, BPF_EXIST 2)."""
    k = ctypes.create_string_buffer(key, len(key))
    v = ctypes.create_string_buffer(value, len(value))
    _check(lib().bpf_map_update_elem(fd, ctypes.addressof(k), ctypes.addressof(v), flags), "bpf_map_update_elem")


def zero_array(fd: int, entries: int, value_size: int, batch: int = 65536) -> None:
    """Every cell of array map ``fd`` (``entries`` cells of ``value_size`` bytes) set to zeros, a batch of
    cells per system call (a detector's sketch has 200 000 of them)."""
    n = min(batch, entries)
    keys = (ctypes.c_uint32 * n)()
    zeros = ctypes.create_string_buffer(n * value_size)
    for start in range(0, entries, n):
        count = min(n, entries - start)
        for i in range(count):
            keys[i] = start + i
        done = ctypes.c_uint32(count)
        _check(
            lib().bpf_map_update_batch(fd, ctypes.addressof(keys), ctypes.addressof(zeros), ctypes.byref(done), None),
            "bpf_map_update_batch",
        )
        if done.value != count:
            raise LibbpfError(f"bpf_map_update_batch: {done.value} of {count} cells written")


def pop(fd: int, value_size: int) -> bytes | None:
    """The oldest value of queue map ``fd``, taken out of it (None if the queue is empty)."""
    v = ctypes.create_string_buffer(value_size)
    if lib().bpf_map_lookup_and_delete_elem(fd, None, ctypes.addressof(v)) < 0:
        err = ctypes.get_errno()
        if err == errno.ENOENT:
            return None
        raise _failed("bpf_map_lookup_and_delete_elem", err)
    return v.raw


def delete(fd: int, key: bytes) -> bool:
    """Remove ``key`` from map ``fd``; False if it was not there."""
    k = ctypes.create_string_buffer(key, len(key))
    if lib().bpf_map_delete_elem(fd, ctypes.addressof(k)) < 0:
        err = ctypes.get_errno()
        if err == errno.ENOENT:
            return False
        raise _failed("bpf_map_delete_elem", err)
    return True


def keys(fd: int, key_size: int) -> Iterator[bytes]:
    """Every key of map ``fd`` (a hash or LPM trie; the kernel's order).  If the last key returned is deleted
    meanwhile, the kernel starts over from the first (a key may come twice): walk a table under its lock."""
    prev: ctypes.Array[ctypes.c_char] | None = None
    nxt = ctypes.create_string_buffer(key_size)
    while True:
        rc = lib().bpf_map_get_next_key(fd, ctypes.addressof(prev) if prev is not None else None, ctypes.addressof(nxt))
        if rc < 0:
            err = ctypes.get_errno()
            if err == errno.ENOENT:
                return
            raise _failed("bpf_map_get_next_key", err)
        yield nxt.raw
        prev, nxt = nxt, ctypes.create_string_buffer(key_size)
