"""Compile CasADi functions to C shared libraries and call them with preallocated buffers.

Calling a CasADi ``Function`` from Python costs ~20 µs whatever its size, too much
for a 1 kHz loop that also reads drives. :func:`compile_function` generates C with
CasADi, compiles it with the system C compiler (``cc -O3 -shared -fPIC``), loads it
with ctypes and calls the generated entry point through a one-argument C shim, on
numpy buffers allocated once.

**Cache.** Libraries live in ``$MBCTL_CODEGEN_CACHE`` (default
``~/.cache/mbctl/codegen``), named by the SHA-256 of the serialized function, the
CasADi version, the compiler (its path and ``--version`` line) and the flags (``-O3``, or
``-O1`` for generated sources above :data:`LARGE_SOURCE` bytes, which compile in half the
time at the same speed). Another
process (or a later run) with the same function loads the library without
compiling; a changed model changes the serialized function and so the key. Each
entry is ``<key>.so`` plus ``<key>.json`` holding the library's SHA-256; a missing,
unreadable or mismatching entry is rebuilt (never loaded). Files are written to a
temporary name in the cache directory and renamed, so processes compiling the same
function at once do not see half-written files.

**No compiler.** When no compiler is found (``$CC``, else ``cc`` or ``gcc`` on the
PATH) or compiling fails, the returned callable evaluates the function with
CasADi's interpreter instead, with the same interface, after one
:class:`CodegenWarning`.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import casadi as ca
import numpy as np

__all__ = ["CompiledFunction", "CodegenWarning", "Entry", "compile_function", "cache_dir", "CACHE_ENV", "FLAGS"]

CACHE_ENV = "MBCTL_CODEGEN_CACHE"
FLAGS = ("-O3", "-shared", "-fPIC")
# above this much generated C (bytes) -O1 replaces -O3: on the 23-DOF flexible chain's right-hand
# side (690 kB) it compiles in about half the time (17 s against 31 s) and runs within the noise
# of -O3 (47.7 against 46.8 us median per call; measured on a loaded 2-core VM)
LARGE_SOURCE = 200_000
_FORMAT = 2  # bump when the shim or the file layout changes
_ENTRY = "mbctl_f"

_SHIM = """
/* mbctl: a one-argument entry point, so ctypes passes a single pointer per call */
typedef struct {
  const casadi_real** arg;
  casadi_real** res;
  casadi_int* iw;
  casadi_real* w;
  int mem;
} mbctl_ctx;

int mbctl_eval(const mbctl_ctx* c) { return %(name)s(c->arg, c->res, c->iw, c->w, c->mem); }
int mbctl_work(casadi_int* sz_arg, casadi_int* sz_res, casadi_int* sz_iw, casadi_int* sz_w) {
  return %(name)s_work(sz_arg, sz_res, sz_iw, sz_w);
}
int mbctl_checkout(void) { %(name)s_incref(); return %(name)s_checkout(); }
"""


class CodegenWarning(UserWarning):
    """A function could not be compiled and runs in CasADi's interpreter."""


@dataclass(frozen=True)
class Entry:
    """A way into a compiled call on pointers of its own (:meth:`CompiledFunction.entry`).

    Attributes:
        arguments: The inputs' addresses, a ctypes array: ``arguments[i] = address`` points input ``i``
            at other float64 entries from the next call on.
        call: Evaluates the function; returns its status (0: success).
    """

    arguments: ctypes.Array
    call: Callable[[], int]
    keep: tuple = field(repr=False)  # what the pointers point into: alive as long as the entry


class _Context(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.POINTER(ctypes.c_void_p)),
        ("res", ctypes.POINTER(ctypes.c_void_p)),
        ("iw", ctypes.c_void_p),
        ("w", ctypes.c_void_p),
        ("mem", ctypes.c_int),
    ]


def cache_dir() -> Path:
    """The library cache: ``$MBCTL_CODEGEN_CACHE``, else ``~/.cache/mbctl/codegen``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "mbctl" / "codegen"


def _compiler() -> list[str] | None:
    """Compiler command: ``$CC`` (split like a shell would), else ``cc`` or ``gcc``."""
    env = os.environ.get("CC")
    if env:
        cmd = shlex.split(env)
        return cmd if cmd and shutil.which(cmd[0]) else None
    for name in ("cc", "gcc"):
        path = shutil.which(name)
        if path:
            return [path]
    return None


@lru_cache(maxsize=8)
def _compiler_identity(cmd: tuple[str, ...]) -> str:
    """Resolved path and first ``--version`` line, so a compiler upgrade changes the key."""
    try:
        done = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=30)
        version = (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr).strip() else ""
    except (OSError, subprocess.SubprocessError):
        version = ""
    return f"{shutil.which(cmd[0])} {' '.join(cmd[1:])} | {version}"


def _dense_wrapper(f: ca.Function) -> ca.Function:
    """``f`` with dense inputs and outputs under the fixed C name :data:`_ENTRY`."""
    sym = ca.SX.sym if f.is_a("SXFunction") else ca.MX.sym
    ins = [sym(f.name_in(i), f.size1_in(i), f.size2_in(i)) for i in range(f.n_in())]
    outs = f.call(ins)
    return ca.Function(_ENTRY, ins, [ca.densify(o) for o in outs], f.name_in(), f.name_out())


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_atomic(directory: Path, name: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, directory / name)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _valid_entry(so: Path, meta: Path) -> bool:
    try:
        return json.loads(meta.read_text())["sha256"] == _sha256(so)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _flags(source_bytes: int, full: bool = False) -> tuple[str, ...]:
    """Compiler flags for generated C of ``source_bytes``: :data:`FLAGS`, with ``-O1`` for large sources unless ``full``."""
    return ("-O1", *FLAGS[1:]) if source_bytes > LARGE_SOURCE and not full else FLAGS


def _build(g: ca.Function, cmd: list[str], directory: Path, key: str, full: bool = False) -> None:
    """Generate, compile and install ``<key>.so`` and ``<key>.json`` in ``directory``.

    Raises:
        RuntimeError: With the compiler's first error line, if compiling fails.
    """
    gen = ca.CodeGenerator("mbctl_generated.c", {"with_header": False})
    gen.add(g)
    source = gen.dump() + _SHIM % {"name": _ENTRY}
    with tempfile.TemporaryDirectory(prefix=".build-", dir=directory) as tmp:
        c_file, so_file = Path(tmp) / f"{key}.c", Path(tmp) / f"{key}.so"
        c_file.write_text(source)
        flags = _flags(len(source), full)
        done = subprocess.run([*cmd, *flags, "-o", str(so_file), str(c_file), "-lm"], capture_output=True, text=True)
        if done.returncode != 0 or not so_file.is_file():
            lines = [ln for ln in (done.stderr or done.stdout).splitlines() if "error" in ln] or ["no output"]
            raise RuntimeError(f"{cmd[0]} failed: {lines[0].strip()}")
        digest = _sha256(so_file)
        os.replace(so_file, directory / f"{key}.so")
    _write_atomic(directory, f"{key}.c", source.encode())
    _write_atomic(directory, f"{key}.json", json.dumps({"sha256": digest, "casadi": ca.__version__, "key": key}).encode())


class CompiledFunction:
    """A CasADi function callable from Python at C speed (or, as a fallback, interpreted).

    Call it with one array per input (any shape holding the input's entries; a
    matrix input in its natural (rows, cols) shape); it returns a tuple with one new
    array per output: shape (n,) for an n x 1 output, (rows, cols) otherwise.

    For the last microsecond, write into :attr:`inputs`, call :meth:`eval` and read
    :attr:`outputs` (overwritten by the next evaluation): no allocation at all.
    The buffers make an instance single-threaded: use one per thread.

    Attributes:
        function: The CasADi function (dense inputs and outputs).
        name: Name of the function that was compiled.
        compiled: True when the generated C library is used.
        library: Path of the shared library, or None when interpreted.
        reused: True when the library came from the cache without compiling.
        inputs: One preallocated float64 array per input (column-major entries).
        outputs: One preallocated float64 array per output.
    """

    def __init__(self, function: ca.Function, library: Path | None, reused: bool = False, name: str | None = None):
        self.function = function
        self.name = name or function.name()
        self.library = library
        self.reused = reused
        self.compiled = library is not None
        f = function
        self.inputs = tuple(self._buffer(f.size1_in(i), f.size2_in(i)) for i in range(f.n_in()))
        self.outputs = tuple(self._buffer(f.size1_out(i), f.size2_out(i)) for i in range(f.n_out()))
        self._free = len(self.inputs)  # inputs a call gives; the others are bound (see bind)
        if self.compiled:
            self._bind(library)

    @staticmethod
    def _buffer(rows: int, cols: int) -> np.ndarray:
        return np.zeros(rows) if cols == 1 else np.zeros((rows, cols), order="F")

    def _bind(self, library: Path) -> None:
        lib = ctypes.CDLL(str(library))
        sizes = [ctypes.c_longlong() for _ in range(4)]
        if lib.mbctl_work(*(ctypes.byref(s) for s in sizes)) != 0:
            raise RuntimeError(f"{library}: work-size query failed")
        sz_arg, sz_res, sz_iw, sz_w = (max(int(s.value), 1) for s in sizes)
        self._arg = (ctypes.c_void_p * max(sz_arg, len(self.inputs)))(*[b.ctypes.data for b in self.inputs])
        self._res = (ctypes.c_void_p * max(sz_res, len(self.outputs)))(*[b.ctypes.data for b in self.outputs])
        self._iw = np.zeros(sz_iw, dtype=np.int64)
        self._w = np.zeros(sz_w)
        self._ctx = _Context(
            ctypes.cast(self._arg, ctypes.POINTER(ctypes.c_void_p)),
            ctypes.cast(self._res, ctypes.POINTER(ctypes.c_void_p)),
            self._iw.ctypes.data,
            self._w.ctypes.data,
            lib.mbctl_checkout(),  # memory slot of functions that keep state (0 for SX functions)
        )
        self._ctx_ref = ctypes.byref(self._ctx)
        self._lib = lib  # keeps the library loaded
        self._c_eval = lib.mbctl_eval
        # the same entry point called with the interpreter lock held (entry): for a call of microseconds, releasing
        # and retaking the lock costs more than it frees, and a thread that took it meanwhile could hold the
        # caller up to the interpreter's switch interval (5 ms)
        self._c_eval_held = ctypes.PyDLL(str(library), handle=lib._handle).mbctl_eval

    def eval(self) -> None:
        """Evaluate on the current :attr:`inputs`, writing :attr:`outputs`."""
        if self.compiled:
            if self._c_eval(self._ctx_ref):
                raise RuntimeError(f"{self.library}: evaluation failed")
            return
        results = self.function.call(list(self.inputs))
        for buf, value in zip(self.outputs, results):
            buf[...] = np.asarray(value).reshape(buf.shape, order="F")

    def point_input(self, i: int, address: int) -> None:
        """Let the compiled call read input ``i`` at ``address`` (of float64 entries that outlive the
        calls, e.g. a table's row: ``table.ctypes.data + 8 * offset``) instead of its buffer: no copy
        per call. Compiled functions only."""
        if not self.compiled:
            raise RuntimeError(f"{self.name}: an interpreted function reads its input buffers")
        self._arg[i] = address

    def entry(self, inputs: dict[int, int] | None = None, outputs: dict[int, int] | None = None) -> Entry:
        """Another way into the compiled call, on the same library, buffers and work space, with input
        ``i`` read at ``inputs[i]`` and output ``j`` written at ``outputs[j]`` (addresses of float64
        entries that outlive the calls) and every other pointer as it is now (:meth:`point_input`).

        Two entries that swap an input and an output carry a call's result on to the next call without
        a copy (the memory of a recursion, ``m -> m_next``: call them in turn). The call keeps the
        interpreter lock (:meth:`eval` releases it): meant for calls of microseconds on a loop's
        deadline. Compiled functions only.
        """
        if not self.compiled:
            raise RuntimeError(f"{self.name}: an interpreted function has no compiled entry")
        arg = (ctypes.c_void_p * len(self._arg))(*self._arg)
        res = (ctypes.c_void_p * len(self._res))(*self._res)
        for i, address in (inputs or {}).items():
            arg[i] = address
        for j, address in (outputs or {}).items():
            res[j] = address
        ctx = _Context(ctypes.cast(arg, ctypes.POINTER(ctypes.c_void_p)), ctypes.cast(res, ctypes.POINTER(ctypes.c_void_p)),
                       self._iw.ctypes.data, self._w.ctypes.data, self._ctx.mem)  # fmt: skip
        # a partial of the C function on its context: one C-level call, no Python frame
        return Entry(arg, partial(self._c_eval_held, ctypes.byref(ctx)), (self, res, ctx))

    def instance(self) -> CompiledFunction:
        """Another callable on the same library with buffers of its own (one per thread or per
        set of bound inputs), without generating or compiling anything."""
        return CompiledFunction(self.function, self.library, reused=True, name=self.name)

    def bind(self, *values: Any) -> CompiledFunction:
        """Fix the last ``len(values)`` inputs (a parameter vector, say) to ``values``: calls then
        give only the others, and writing the first :attr:`inputs` leaves these alone. Returns self."""
        first = len(self.inputs) - len(values)
        for buf, value in zip(self.inputs[first:], values):
            buf[...] = np.reshape(value, buf.shape, order="F")
        self._free = first
        return self

    def __call__(self, *args: Any) -> tuple[np.ndarray, ...]:
        if len(args) != self._free:
            raise TypeError(f"{self.name} takes {self._free} inputs, got {len(args)}")
        for buf, value in zip(self.inputs, args):
            try:
                buf[...] = value
            except ValueError:
                buf[...] = np.reshape(value, buf.shape, order="F")
        self.eval()
        return tuple(out.copy() for out in self.outputs)

    def __repr__(self) -> str:
        how = f"compiled {self.library}" if self.compiled else "interpreted"
        return f"<CompiledFunction {self.name} ({how})>"


def compile_function(f: ca.Function, *, cache: str | Path | None = None, optimise_large: bool = False) -> CompiledFunction:
    """Generate, compile (or reuse from the cache) and load ``f``.

    Args:
        f: Any CasADi function (SX or MX); sparse inputs and outputs are densified.
        cache: Cache directory (default: :func:`cache_dir`).
        optimise_large: ``-O3`` however large the source (a function on the control loop's
            deadline: the UR5's MPC update, 0.86 MB of C, runs in 136 against 195 µs median
            at ``-O1`` and compiles in about 11 s).

    Returns:
        A :class:`CompiledFunction`; interpreted (``compiled`` False) after a
        :class:`CodegenWarning` when there is no working C compiler.
    """
    g = _dense_wrapper(f)
    name = f.name()

    def interpreted(reason: str) -> CompiledFunction:
        warnings.warn(f"{reason}; {name} runs in CasADi's interpreter", CodegenWarning, stacklevel=3)
        return CompiledFunction(g, None, name=name)

    cmd = _compiler()
    if cmd is None:
        return interpreted("no C compiler found (set CC or install cc)")
    directory = Path(cache) if cache is not None else cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return interpreted(f"cannot create the codegen cache {directory} ({exc.strerror})")
    identity = "\n".join([f"format {_FORMAT}", ca.__version__, _compiler_identity(tuple(cmd)), " ".join(FLAGS), "-O3 at any size" if optimise_large else f"-O1 above {LARGE_SOURCE}", g.serialize()])
    stem = "".join(c if c.isalnum() or c == "_" else "_" for c in name[:40])
    key = f"{stem}-{hashlib.sha256(identity.encode()).hexdigest()[:32]}"
    so, meta = directory / f"{key}.so", directory / f"{key}.json"
    reused = _valid_entry(so, meta)
    # a cached library that passed its checksum yet does not load is rebuilt once
    for attempt in ("cached", "fresh") if reused else ("fresh",):
        if attempt == "fresh":
            try:
                _build(g, cmd, directory, key, optimise_large)
            except (RuntimeError, OSError) as exc:
                return interpreted(f"compiling failed ({_first_line(exc)})")
        try:
            return CompiledFunction(g, so, reused=attempt == "cached", name=name)
        except (OSError, RuntimeError) as exc:
            failure = exc
    return interpreted(f"loading {so} failed ({_first_line(failure)})")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
