"""The package's public surface: `tiersim.__all__` names exactly the API defined or re-exported in
tiersim/__init__.py, and the stub _native.pyi agrees with the built extension (names, parameter
names and kinds, defaults where the extension states them)."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import tiersim
from tiersim import _native

PACKAGE = Path(tiersim.__file__).parent
STUB = PACKAGE / "_native.pyi"


def _module_tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_star_import_hands_out_exactly_all() -> None:
    namespace: dict[str, Any] = {}
    exec("from tiersim import *", namespace)
    names = set(namespace) - {"__builtins__"}
    assert names == set(tiersim.__all__)
    assert len(tiersim.__all__) == len(names), "a name is listed twice in __all__"
    for leaked in ("Any", "Path", "Mapping", "Sequence", "json", "os", "shutil", "tempfile", "annotations"):
        assert leaked not in names
    assert not [n for n in names if isinstance(namespace[n], types.ModuleType)]


def test_all_is_every_public_definition_and_reexport() -> None:
    tree = _module_tree(PACKAGE / "__init__.py")
    defined = {n for n in _top_level_names(tree) if not n.startswith("_")}
    reexportable = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tiersim."):
            reexportable.update(a.asname or a.name for a in node.names)
    # Names loaded on first use (their modules import polars) are re-exports too.
    for name, module in tiersim._LAZY.items():
        assert getattr(tiersim, name) is getattr(importlib.import_module(module), name)
        reexportable.add(name)
    exported = set(tiersim.__all__)
    # Everything public that __init__.py defines is API ...
    assert defined - exported == set()
    # ... and __all__ lists nothing else than that, the version and names imported from tiersim's own modules.
    assert exported - defined - reexportable - {"__version__"} == set()
    assert "TiersimError" in exported and "run" in exported and "TRACE_FORMATS" in exported


@pytest.mark.parametrize("name", sorted(n for n in tiersim.__all__ if callable(getattr(tiersim, n))))
def test_every_exported_callable_is_documented(name: str) -> None:
    doc = inspect.getdoc(getattr(tiersim, name)) or ""
    assert len(doc.split()) >= 3, f"tiersim.{name} has no docstring"


def test_import_and_cli_start_without_polars() -> None:
    """polars costs about 0.15 s of CPU to import; `tiersim --help` and `import tiersim` do not
    pay it, and the first use of a name that needs it loads it."""
    code = (
        "import sys, tiersim, tiersim.cli; before = 'polars' in sys.modules; "
        "tiersim.Characterization; print(before, 'polars' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]


def _stub_functions(body: list[ast.stmt]) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in body if isinstance(n, ast.FunctionDef)}


def _stub_params(fn: ast.FunctionDef) -> list[tuple[str, str, Any]]:
    """(name, kind, default) per parameter; default is `inspect.Parameter.empty` when there is
    none and Ellipsis for `= ...`."""
    a = fn.args
    out: list[tuple[str, str, Any]] = []
    positional = a.posonlyargs + a.args
    defaults = [inspect.Parameter.empty] * (len(positional) - len(a.defaults)) + [
        ast.literal_eval(d) for d in a.defaults
    ]
    for i, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
        kind = "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        out.append((arg.arg, kind, default))
    for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        out.append((arg.arg, "KEYWORD_ONLY", inspect.Parameter.empty if d is None else ast.literal_eval(d)))
    return out


def _check_signature(where: str, stub: ast.FunctionDef, real: Any, skip_self: bool = False) -> None:
    stub_params = _stub_params(stub)
    real_params = list(inspect.signature(real).parameters.values())
    if skip_self:
        stub_params = [p for p in stub_params if p[0] != "self"]
        real_params = [p for p in real_params if p.name != "self"]
    assert [p[0] for p in stub_params] == [p.name for p in real_params], f"{where}: parameter names"
    for (name, kind, default), p in zip(stub_params, real_params, strict=True):
        assert kind == p.kind.name, f"{where}({name}): stub says {kind}, extension {p.kind.name}"
        if p.default is inspect.Parameter.empty:
            assert default is inspect.Parameter.empty, f"{where}({name}): required in the extension"
        elif p.default is Ellipsis:
            # PyO3 writes `...` for defaults that are not literals (lists): only presence is checkable.
            assert default is not inspect.Parameter.empty, f"{where}({name}): optional in the extension"
        else:
            assert default == p.default and type(default) is type(p.default), (
                f"{where}({name}): stub default {default!r}, extension {p.default!r}"
            )


def test_native_stub_names_match_the_extension() -> None:
    tree = _module_tree(STUB)
    stub_names = {n for n in _top_level_names(tree) if not n.startswith("_")}
    real_names = {n for n in dir(_native) if not n.startswith("_")}
    assert stub_names == real_names


def test_native_stub_all_matches_the_extension() -> None:
    (stub_all,) = [
        n.value
        for n in _module_tree(STUB).body
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
    ]
    assert sorted(ast.literal_eval(stub_all)) == sorted(_native.__all__)


def test_native_stub_signatures_match_the_extension() -> None:
    tree = _module_tree(STUB)
    functions = _stub_functions(tree.body)
    assert functions, "no functions in the stub"
    for name, fn in functions.items():
        _check_signature(name, fn, getattr(_native, name))
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for name, cls in classes.items():
        real = getattr(_native, name)
        assert isinstance(real, type)
        for base in cls.bases:
            assert issubclass(real, getattr(builtins, ast.unparse(base))), f"{name}: base {ast.unparse(base)}"
        methods = _stub_functions(cls.body)
        real_methods = {m for m, v in vars(real).items() if not m.startswith("_") and callable(v)}
        assert {m for m in methods if not m.startswith("_")} == real_methods, f"{name}: methods"
        for m, fn in methods.items():
            if m == "__init__":
                _check_signature(f"{name}()", fn, real, skip_self=True)
            else:
                _check_signature(f"{name}.{m}", fn, getattr(real, m), skip_self=True)


def test_exported_native_names_are_in_the_stub() -> None:
    stub_names = _top_level_names(_module_tree(STUB))
    native = ("_native", "tiersim._native")
    from_native = [n for n in tiersim.__all__ if getattr(getattr(tiersim, n), "__module__", "") in native]
    assert from_native == ["TiersimError"]
    assert set(from_native) <= stub_names
