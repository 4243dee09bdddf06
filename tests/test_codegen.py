"""Compiled CasADi functions: same numbers as CasADi, cached across processes, robust cache."""

from __future__ import annotations

import json
import subprocess
import sys

import casadi as ca
import numpy as np
import pytest

from mbctl.dynamics.codegen import CodegenWarning, compile_function
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.symbolic import SymbolicDynamics


def _entries(cache) -> list[str]:
    return sorted(p.name for p in cache.glob("*.so"))


def test_compiled_results_equal_casadi(robots, tmp_path):
    """RNEA, the mass matrix, a frame Jacobian and sparse outputs give CasADi's numbers bit for bit."""
    sd = SymbolicDynamics(robots["scara"])
    rng = np.random.default_rng(0)
    q, dq, ddq = (rng.normal(size=4) for _ in range(3))
    rnea = compile_function(sd.rnea, cache=tmp_path)
    assert rnea.compiled and rnea.library.parent == tmp_path
    (tau,) = rnea(q, dq, ddq)
    assert np.array_equal(tau, sd.rnea(q, dq, ddq).full().ravel())
    (M,) = compile_function(sd.mass_matrix, cache=tmp_path)(q)
    assert M.shape == (4, 4) and np.array_equal(M, sd.mass_matrix(q).full())
    x = ca.SX.sym("x", 3)
    sparse = ca.Function("sparse", [x], [ca.diag(ca.sin(x)), ca.vertcat(x[0], 0, x[2] ** 2)])
    assert sparse.sparsity_out(0).nnz() == 3
    D, v = compile_function(sparse, cache=tmp_path)([0.1, 0.2, 0.3])
    assert np.array_equal(D, np.diag(np.sin([0.1, 0.2, 0.3]))) and np.array_equal(v, [0.1, 0.0, 0.09])
    (J,) = compile_function(sd.frame_jacobian("tool"), cache=tmp_path)(q)
    assert np.array_equal(J, sd.frame_jacobian("tool")(q).full())


def test_buffers_give_the_allocation_free_path(robots, tmp_path):
    """Writing inputs, eval() and reading outputs equals the convenience call."""
    sd = SymbolicDynamics(robots["scara"])
    f = compile_function(sd.inverse_dynamics, cache=tmp_path)
    args = [np.linspace(-1, 1, 4) * k for k in (1.0, 2.0, 3.0, 1e-4)]
    for buf, value in zip(f.inputs, args):
        buf[:] = value
    f.eval()
    expected = sd.inverse_dynamics(*args)
    for out, ref in zip(f.outputs, expected):
        assert np.array_equal(out, ref.full().reshape(out.shape, order="F"), equal_nan=True)
    with pytest.raises(TypeError, match="takes 4 inputs"):
        f(*args[:3])


def test_two_entries_carry_a_recursion_on_without_a_copy(tmp_path):
    """Entries that swap the buffers of m and m_next (ping-pong), called in turn, give the recursion
    m_k+1 = 2 m_k + u from the last call's output; an input pointed elsewhere stays pointed."""
    m, u = ca.SX.sym("m", 3), ca.SX.sym("u", 3)
    f = compile_function(ca.Function("step", [m, u], [2 * m + u, ca.sum1(m)]), cache=tmp_path)
    a, b = f.inputs[0], f.outputs[0]
    u_values = np.array([1.0, -2.0, 0.5])
    f.point_input(1, u_values.ctypes.data)
    entries = [f.entry(), f.entry({0: b.ctypes.data}, {0: a.ctypes.data})]
    a[:] = [0.1, 0.2, 0.3]
    expected = a.copy()
    for k in range(5):
        assert entries[k % 2].call() == 0
        assert f.outputs[1][0] == pytest.approx(expected.sum())  # the memory this call read
        expected = 2 * expected + u_values
        assert np.array_equal((b, a)[k % 2], expected)
    entries[0].arguments[1] = f.inputs[1].ctypes.data  # an entry's pointer moves alone
    f.inputs[1][:] = 0.0
    entries[0].call()
    assert np.array_equal(b, 2 * a)


SCRIPT = """
import json, sys
from mbctl.dynamics.codegen import compile_function
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.symbolic import SymbolicDynamics
f = compile_function(SymbolicDynamics(load_robot(sys.argv[1])).gravity, cache=sys.argv[2])
print(json.dumps({"reused": f.reused, "library": str(f.library), "g": f([0.1, -1.0, 1.2, 0.3, -0.5, 0.7])[0].tolist()}))
"""


def _in_processes(count: int, config, cache) -> list[dict]:
    """Run SCRIPT in ``count`` concurrent Python processes."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(config), str(cache)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(count)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    return results


def test_cache_is_reused_by_other_processes(robots, tmp_path):
    """Other processes find the library by its hash and load it without compiling."""
    robot = robots["ur5"]
    first = compile_function(SymbolicDynamics(robot).gravity, cache=tmp_path)
    assert not first.reused and _entries(tmp_path) == [first.library.name]
    expected = first([0.1, -1.0, 1.2, 0.3, -0.5, 0.7])[0]
    for other in _in_processes(2, robot.source, tmp_path):
        assert other["reused"] and other["library"] == str(first.library)
        assert np.array_equal(other["g"], expected)


def test_processes_compiling_at_once_leave_one_valid_entry(robots, tmp_path):
    """Two processes building the same function into an empty cache both succeed."""
    results = _in_processes(2, robots["ur5"].source, tmp_path)
    assert results[0]["library"] == results[1]["library"] and results[0]["g"] == results[1]["g"]
    assert len(_entries(tmp_path)) == 1 and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert compile_function(SymbolicDynamics(robots["ur5"]).gravity, cache=tmp_path).reused


def test_changed_model_gets_a_new_entry(configs, tmp_path):
    """Changing one link mass changes the function, hence the cache key."""
    robot = load_robot(configs / "scara.toml")
    a = compile_function(SymbolicDynamics(robot).rnea, cache=tmp_path)
    robot.model.inertias[2].mass += 0.5
    b = compile_function(SymbolicDynamics(robot).rnea, cache=tmp_path)
    assert a.library != b.library and len(_entries(tmp_path)) == 2
    again = compile_function(SymbolicDynamics(robot).rnea, cache=tmp_path)
    assert again.reused and again.library == b.library


@pytest.mark.parametrize("damage", ["garbage library", "truncated library", "bad checksum", "missing checksum"])
def test_corrupt_entry_is_rebuilt(robots, tmp_path, damage):
    """A damaged cache entry is detected before loading and compiled again."""
    sd = SymbolicDynamics(robots["scara"])
    f = compile_function(sd.rnea, cache=tmp_path)
    so, meta = f.library, f.library.with_suffix(".json")
    content = so.read_bytes()
    if damage.endswith("library"):
        so.unlink()  # never rewrite a loaded library in place: this process has it mapped
        so.write_bytes(b"not a shared library" if damage == "garbage library" else content[:1000])
    elif damage == "bad checksum":
        meta.write_text(json.dumps({"sha256": "0" * 64}))
    else:
        meta.unlink()
    g = compile_function(sd.rnea, cache=tmp_path)
    assert g.compiled and not g.reused and g.library == so
    x = np.arange(4.0)
    assert np.array_equal(g(x, x, x)[0], sd.rnea(x, x, x).full().ravel())
    assert compile_function(sd.rnea, cache=tmp_path).reused


def test_without_a_compiler_the_interpreter_is_used(robots, tmp_path, monkeypatch):
    """No compiler: one warning, and the same interface and numbers from CasADi."""
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    sd = SymbolicDynamics(robots["scara"])
    with pytest.warns(CodegenWarning, match="no C compiler found") as record:
        f = compile_function(sd.inverse_dynamics, cache=tmp_path)
    assert len(record) == 1 and "\n" not in str(record[0].message)
    assert not f.compiled and f.library is None and _entries(tmp_path) == []
    args = [np.full(4, 0.3), np.full(4, -0.2), np.full(4, 1.5), np.zeros(4)]
    for got, ref in zip(f(*args), sd.inverse_dynamics(*args)):
        assert np.array_equal(got, ref.full().reshape(got.shape), equal_nan=True)


def test_failed_compilation_falls_back_with_a_warning(tmp_path, monkeypatch):
    """A compiler that fails gives one warning naming it, then the interpreter."""
    fake = tmp_path / "fakecc"
    fake.write_text("#!/bin/sh\necho 'fakecc: error: out of luck' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    x = ca.SX.sym("x", 2)
    with pytest.warns(CodegenWarning, match="fakecc: error: out of luck"):
        f = compile_function(ca.Function("f", [x], [ca.sin(x)]), cache=tmp_path)
    assert not f.compiled and np.allclose(f([0.5, 1.0])[0], np.sin([0.5, 1.0]))
