"""The architecture, checked: the import graph and the private-attribute rule (docs/design/architecture.md).

Every module of ``datasets_hub`` (the repository's ``loaders/`` counted as ``datasets_hub.loaders``)
is parsed with ``ast``; every import statement counts, also the ones inside functions (lazy
imports hide cycles, they do not remove them). ``from datasets_hub import Name`` and
``datasets_hub.Name`` count as an import of the module ``datasets_hub._EXPORTS`` maps ``Name`` to.
Imports under ``if TYPE_CHECKING:`` count too: a type a module names is a dependency.

Rules:

1. No import cycle between modules (a package's ``__init__`` counts as a module).
2. ``datasets_hub/buffers/`` knows nothing of the hub: it imports only itself and the leaf
   modules in ``BUFFERS_MAY_IMPORT``, except the lazy imports in ``CONVENIENCE_IMPORTS``
   (listed by method), the one documented way up. Those edges are left out of rule 1's graph: they
   run when the user calls the method, never at import.
3. The hub reaches loaders only through entry points: no module outside ``datasets_hub.loaders``
   imports one.
4. No module reads another object's private attribute (``obj._x`` where ``obj`` is not
   ``self``/``cls``) unless the class is defined in the same module, or the pair is in
   ``PRIVATE_ACCESS_ALLOWED`` with its reason.
5. A module of ``datasets_hub/`` or ``loaders/`` longer than ``MAX_LINES`` lines holds one concept and
   says which in its docstring (``ONE_CONCEPT``): files are split along concepts, never to meet a count.
6. The hub's packages stand in the order of ``LAYERS``: a module imports modules of its own layer or
   of layers below it, never above (the convenience imports of rule 2 excepted).
7. A loader imports, of the hub, only the plugin contract's modules (``LOADER_MAY_IMPORT``): never a
   private module of the pipeline (downloads, builds, the cache).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "datasets_hub"

#: leaf modules the buffer layer may import: they import nothing of datasets_hub but each other
BUFFERS_MAY_IMPORT = {"datasets_hub.errors", "datasets_hub.files"}

#: (importing module, enclosing function, imported module): ReplayBuffer's convenience methods
CONVENIENCE_IMPORTS = {
    ("datasets_hub.buffers.replay_buffers", "ReplayBuffer.preprocess", "datasets_hub.preprocess.pipeline"),
    ("datasets_hub.buffers.replay_buffers", "ReplayBuffer.to_torchrl", "datasets_hub.interop.torchrl"),
    ("datasets_hub.buffers.replay_buffers", "ReplayBuffer.as_map_dataset", "datasets_hub.interop.torch_data"),
    ("datasets_hub.buffers.replay_buffers", "ReplayBuffer.as_iterable_dataset", "datasets_hub.interop.torch_data"),
}

#: (module, attribute) pairs allowed to read another object's private attribute, with the reason
PRIVATE_ACCESS_ALLOWED: dict[tuple[str, str], str] = {
    # tensordict's tensorclass: no public zero-copy way between an instance and its TensorDict
    ("datasets_hub.buffers.tensor_leaves", "_tensordict"): "tensorclass -> its TensorDict, no copy",
    ("datasets_hub.buffers.tensor_storages", "_from_tensordict"): "TensorDict -> tensorclass, no copy or check",
    # TorchRL's SliceSampler: to_torchrl() fills its trajectory cache from our episode index (one
    # read of the episode column instead of a scan of the whole build on the first sample)
    ("datasets_hub.interop.torchrl", "_cache"): "TorchRL SliceSampler's trajectory cache",
    ("datasets_hub.interop.torchrl", "_fetch_traj"): "TorchRL SliceSampler: trajectories by key or by end",
    ("datasets_hub.interop.torchrl", "_traj_key_auto"): "TorchRL SliceSampler: the key was chosen for it",
    ("datasets_hub.interop.torchrl", "_find_start_stop_traj"): "TorchRL SliceSampler's boundary finder",
}

#: the hub's layers, bottom first: module-name prefixes (the longest matching prefix places a module)
LAYERS: list[tuple[str, ...]] = [
    # leaves: errors, files, environment, redaction, fork-safe locks, the build format's facts, the loader contract
    (PACKAGE, f"{PACKAGE}.errors", f"{PACKAGE}.files", f"{PACKAGE}.env", f"{PACKAGE}.redact", f"{PACKAGE}.process_locks",
     f"{PACKAGE}.build.format", f"{PACKAGE}.ted_contract", f"{PACKAGE}.fingerprint", f"{PACKAGE}.loader"),
    # the buffer layer; downloads; finding plugins (and their facts); what a loader may use to reach its upstream
    (f"{PACKAGE}.buffers", f"{PACKAGE}.downloads", f"{PACKAGE}.progress", f"{PACKAGE}.plugins", f"{PACKAGE}.sources",
     f"{PACKAGE}.plugin_facts"),
    # the cache's layout and locks; the catalogue (which caches remote catalogues there); the dataset card's class
    (f"{PACKAGE}.cache.layout", f"{PACKAGE}.catalogue", f"{PACKAGE}.scores", f"{PACKAGE}.dataset_info"),
    (f"{PACKAGE}.build",),  # writing and reading builds
    # listing, verifying, pruning builds; preprocessing them; the data doctor (verify --deep) reading them
    (f"{PACKAGE}.cache", f"{PACKAGE}.preprocess", f"{PACKAGE}.doctor"),
    (f"{PACKAGE}.remote", f"{PACKAGE}.exporters"),  # published builds; builds in other tools' formats
    # the public API: load-by-name, export and push of a build by name, interop, the plugin author's checks
    (f"{PACKAGE}.hub", f"{PACKAGE}.remote.publish", f"{PACKAGE}.interop", f"{PACKAGE}.loader_check", f"{PACKAGE}.testing"),
    (f"{PACKAGE}.cli",),
]  # fmt: skip

#: what a loader may import of the hub (docs/plugins.md): the contract, errors, the catalogue, the
#: buffer layer, the upstream helpers (sources) and the plugin author's test kit
LOADER_MAY_IMPORT = (
    f"{PACKAGE}.loader", f"{PACKAGE}.errors", f"{PACKAGE}.catalogue", f"{PACKAGE}.buffers", f"{PACKAGE}.sources",
    f"{PACKAGE}.testing", f"{PACKAGE}.process_locks", f"{PACKAGE}.loaders",
)  # fmt: skip

#: past this many lines a module must name its one concept in its docstring (rule 5)
MAX_LINES = 600


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    function: str  # "" at module level, else the enclosing function's qualified name


def _module_files() -> dict[str, Path]:
    files: dict[str, Path] = {}
    for base, prefix in ((ROOT / PACKAGE, PACKAGE), (ROOT / "loaders", f"{PACKAGE}.loaders")):
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join([prefix, *parts])] = path
    return files


MODULES = _module_files()


def _exports() -> dict[str, str]:
    tree = ast.parse((ROOT / PACKAGE / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "_EXPORTS":
            return {k: f"{PACKAGE}.{v}" for k, v in ast.literal_eval(node.value).items()}
    raise AssertionError("datasets_hub/__init__.py has no _EXPORTS table")


EXPORTS = _exports()


class _Imports(ast.NodeVisitor):
    """Every import of one module, with the function it sits in."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.module = module
        self.is_package = is_package
        self.stack: list[str] = []
        self.edges: list[Edge] = []
        self.package_aliases: set[str] = set()  # names bound to the datasets_hub package itself

    def _add(self, target: str, node: ast.AST) -> None:
        if target != self.module:
            self.edges.append(Edge(self.module, target, node.lineno, ".".join(self.stack)))

    def _scoped(self, node: ast.AST) -> None:
        self.stack.append(node.name)  # type: ignore[attr-defined]  # only function and class nodes come here
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            name = alias.name
            if name == PACKAGE and alias.asname:
                self.package_aliases.add(alias.asname)
            elif name == PACKAGE:
                self.package_aliases.add(PACKAGE)
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name:
                self._add(name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.module.split(".")
            if not self.is_package:
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        if prefix not in MODULES:
            return
        for alias in node.names:
            full = f"{prefix}.{alias.name}"
            if full in MODULES:
                self._add(full, node)
            elif prefix == PACKAGE and alias.name in EXPORTS:
                self._add(EXPORTS[alias.name], node)  # the lazy re-export is a real dependency
            else:
                self._add(prefix, node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.value.id in self.package_aliases and node.attr in EXPORTS:
            self._add(EXPORTS[node.attr], node)
        self.generic_visit(node)


def _edges() -> list[Edge]:
    edges = []
    for module, path in MODULES.items():
        visitor = _Imports(module, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(), str(path)))
        edges += visitor.edges
    return edges


EDGES = _edges()


def _where(edge: Edge) -> str:
    path = MODULES[edge.source].relative_to(ROOT)
    return f"{path}:{edge.line} ({edge.function or 'module level'}) imports {edge.target}"


def _is_convenience(edge: Edge) -> bool:
    return (edge.source, edge.function, edge.target) in CONVENIENCE_IMPORTS


def _cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for e in edges:
        graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


# ------------------------------------------------------------------------------------------ the rules
def test_the_walk_sees_lazy_imports_and_the_package_re_exports():
    """The checker itself: a function-level import and a lazy re-export are edges (else it proves nothing)."""
    lazy = [e for e in EDGES if e.function]
    assert lazy, "no function-level import found: the walk does not descend into functions"
    assert any(_is_convenience(e) for e in EDGES), "the convenience imports of ReplayBuffer were not seen"
    assert len(MODULES) > 40 and f"{PACKAGE}.loaders.d4rl" in MODULES and f"{PACKAGE}.buffers.storages" in MODULES
    visitor = _Imports(f"{PACKAGE}.cli", False)
    visitor.visit(
        ast.parse("def f():\n    from datasets_hub import load\n    import datasets_hub as dh\n    dh.ReplayBuffer\n")
    )
    assert {e.target for e in visitor.edges} == {f"{PACKAGE}.hub", PACKAGE, EXPORTS["ReplayBuffer"]}


def test_a_cycle_is_found():
    fake = [
        Edge("datasets_hub.cache.layout", "datasets_hub.build.pipeline", 1, "f"),
        Edge("datasets_hub.build.pipeline", "datasets_hub.cache.layout", 1, ""),
    ]
    assert _cycles(fake) == [["datasets_hub.build.pipeline", "datasets_hub.cache.layout"]]


def test_no_import_cycle_between_modules():
    cycles = _cycles([e for e in EDGES if not _is_convenience(e)])
    report = []
    for component in cycles:
        members = set(component)
        report.append(" <-> ".join(component))
        report += [
            "    " + _where(e) for e in EDGES if e.source in members and e.target in members and not _is_convenience(e)
        ]
    assert not cycles, "import cycles (lazy imports included):\n" + "\n".join(report)


def test_the_buffer_layer_imports_only_itself():
    prefix = f"{PACKAGE}.buffers"
    outside = [
        e
        for e in EDGES
        if (e.source == prefix or e.source.startswith(prefix + "."))
        and not (e.target == prefix or e.target.startswith(prefix + "."))
        and e.target not in BUFFERS_MAY_IMPORT
        and not _is_convenience(e)
    ]
    assert not outside, "datasets_hub/buffers/ imports the hub:\n" + "\n".join(map(_where, outside))


def test_the_convenience_imports_are_lazy_and_all_exist():
    seen = {(e.source, e.function, e.target) for e in EDGES}
    assert seen >= CONVENIENCE_IMPORTS, f"listed but gone (update the list): {sorted(CONVENIENCE_IMPORTS - seen)}"
    assert all(function for _source, function, _target in CONVENIENCE_IMPORTS)


def test_the_leaf_modules_the_buffer_layer_uses_import_nothing_of_the_hub():
    leaves = [e for e in EDGES if e.source in BUFFERS_MAY_IMPORT and e.target not in BUFFERS_MAY_IMPORT]
    assert not leaves, "\n".join(map(_where, leaves))


def test_the_hub_reaches_loaders_only_through_entry_points():
    prefix = f"{PACKAGE}.loaders"
    direct = [e for e in EDGES if not e.source.startswith(prefix) and e.target.startswith(prefix)]
    assert not direct, "\n".join(map(_where, direct))


def _layer(module: str) -> int | None:
    """The index in ``LAYERS`` of the longest prefix naming ``module``; ``None`` for loaders."""
    if module.startswith(f"{PACKAGE}.loaders"):
        return None
    best, found = -1, None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), index
    return found


def test_every_hub_module_has_a_layer():
    missing = [m for m in MODULES if not m.startswith(f"{PACKAGE}.loaders") and _layer(m) is None]
    assert not missing, f"modules in no layer (add them to LAYERS): {missing}"


def test_the_packages_import_only_their_own_layer_and_those_below():
    upward = [
        e
        for e in EDGES
        if not _is_convenience(e)
        and (source := _layer(e.source)) is not None
        and (target := _layer(e.target)) is not None
        and target > source
    ]
    assert not upward, "imports of a higher layer (see LAYERS):\n" + "\n".join(map(_where, upward))


def test_loaders_import_only_the_plugin_contract():
    private = [
        e
        for e in EDGES
        if e.source.startswith(f"{PACKAGE}.loaders")
        and not any(e.target == m or e.target.startswith(m + ".") for m in LOADER_MAY_IMPORT)
    ]
    assert not private, "loaders importing hub internals (use datasets_hub.sources):\n" + "\n".join(
        map(_where, private)
    )


# ------------------------------------------------------------------------------ private attributes
def _classes_defined(tree: ast.AST) -> set[str]:
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}


def _private_names_defined(tree: ast.AST) -> set[str]:
    """Private attribute names the classes of this module own: ``self._x = ...``, methods and class
    attributes named ``_x`` (a module may read its own classes' state, e.g. ``other._x`` in ``__eq__``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
    return {n for n in names if n.startswith("_")}


def _private_reads(module: str, tree: ast.AST) -> list[tuple[int, str, str]]:
    """``obj._x`` with ``obj`` not self/cls, ``_x`` not owned by a class of this module; dunders and
    module aliases (``module._helper``) excluded."""
    local_classes = _classes_defined(tree)
    own = _private_names_defined(tree)
    imported_modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported_modules |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported_modules |= {a.asname or a.name for a in node.names}
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            attr = node.args[1].value  # getattr(obj, "_x"): the same read, spelled as a string
            owner = node.args[0]
        elif isinstance(node, ast.Attribute):
            attr, owner = node.attr, node.value
        else:
            continue
        if not attr.startswith("_") or (attr.startswith("__") and attr.endswith("__")):
            continue
        if isinstance(owner, ast.Name) and (owner.id in ("self", "cls") or owner.id in local_classes):
            continue
        if attr in own:
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id in ("super", "type"):
            continue  # super()._x / type(self)._x: the object's own class hierarchy
        if isinstance(owner, ast.Name) and owner.id in imported_modules:
            continue  # module._function: a module's private helper, not an object's state
        if (module, attr) in PRIVATE_ACCESS_ALLOWED:
            continue
        found.append((node.lineno, ast.unparse(owner), attr))
    return found


def test_the_private_attribute_scan_finds_a_read():
    tree = ast.parse(
        "class A:\n    def f(self, other):\n        self._a = 1\n"
        "        return self._a + other._b + other._a + getattr(other, '_c', 0)\n"
    )
    assert sorted(_private_reads("m", tree)) == [(4, "other", "_b"), (4, "other", "_c")]


def test_no_module_reads_another_objects_private_attributes():
    problems = []
    for module, path in MODULES.items():
        for line, owner, attr in _private_reads(module, ast.parse(path.read_text())):
            problems.append(f"{path.relative_to(ROOT)}:{line}: {owner}.{attr}")
    assert not problems, (
        "private attributes read from outside their object (use or add a public "
        "method; see docs/design/architecture.md):\n" + "\n".join(problems)
    )


def test_every_private_access_allowance_is_still_needed():
    for module, attr in PRIVATE_ACCESS_ALLOWED:
        tree = ast.parse(MODULES[module].read_text())
        used = any(
            (isinstance(n, ast.Attribute) and n.attr == attr) or (isinstance(n, ast.Constant) and n.value == attr)
            for n in ast.walk(tree)
        )
        assert used, f"{module}: {attr} is no longer read; remove it from PRIVATE_ACCESS_ALLOWED"


# ------------------------------------------------------------------------------------- module size
ONE_CONCEPT = "This module holds one concept:"


def _line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def _long_without_a_concept(files: dict[str, Path], limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """``(module, lines)`` of every module over ``limit`` lines whose docstring does not name its one concept."""
    found = []
    for module, path in files.items():
        text = path.read_text()
        n = len(text.splitlines())
        if n > limit and ONE_CONCEPT not in (ast.get_docstring(ast.parse(text)) or ""):
            found.append((module, n))
    return found


def test_a_long_module_without_its_concept_is_found(tmp_path):
    """The checker itself: a long module is reported unless its docstring names its one concept."""
    over, named, at = tmp_path / "over.py", tmp_path / "named.py", tmp_path / "at.py"
    over.write_text('"""Things."""\n' + "x = 1\n" * MAX_LINES)
    named.write_text(f'"""{ONE_CONCEPT} the thing."""\n' + "x = 1\n" * MAX_LINES)
    at.write_text("x = 1\n" * MAX_LINES)
    assert _long_without_a_concept({"pkg.over": over, "pkg.named": named, "pkg.at": at}) == [
        ("pkg.over", MAX_LINES + 1)
    ]


def test_a_long_module_holds_one_concept_named_in_its_docstring():
    """House style: split along concepts, never to meet a line count; a long file says what its one concept is."""
    long = _long_without_a_concept(MODULES)
    assert not long, f"modules over {MAX_LINES} lines whose docstring does not say '{ONE_CONCEPT} ...':\n" + "\n".join(
        f"    {MODULES[m].relative_to(ROOT)}: {n} lines" for m, n in long
    )
