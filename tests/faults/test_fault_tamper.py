"""Tampering is detected by ``datasets-hub verify``; no code path that reads upstream data unpickles."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

import datasets_hub as dh
from datasets_hub.cache.verify import verify
from datasets_hub.cli import main as cli

GYM = "gym/cartpole-random-v0"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def build():
    path = dh.download(GYM, steps=120)
    assert verify(GYM, params={"steps": 120}).ok
    return path


def _cli_verify(capsys) -> tuple[int, str]:
    code = cli(["verify", GYM, "--param", "steps=120"])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("leaf", ["obs/observation", "steps/action", "steps/next/reward", "episodes/length"])
def test_one_flipped_byte_in_a_memmap_file_is_detected(build, capsys, leaf):
    target = build / "data" / f"{leaf}.memmap"
    raw = bytearray(target.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # same size: only the sha256 can tell
    target.write_bytes(bytes(raw))
    result = verify(GYM, params={"steps": 120})
    assert not result.ok and any(str(target) in p and "does not match" in p for p in result.problems)
    code, out = _cli_verify(capsys)
    assert code == 1 and "FAILED" in out and str(target) in out


def test_a_truncated_or_missing_memmap_file_is_detected(build, capsys):
    target = build / "data" / "steps" / "action.memmap"
    target.write_bytes(target.read_bytes()[:-8])
    assert any("bytes, the manifest's schema says" in p for p in verify(GYM, params={"steps": 120}).problems)
    target.unlink()
    assert any("missing" in p for p in verify(GYM, params={"steps": 120}).problems)
    assert _cli_verify(capsys)[0] == 1


@pytest.mark.parametrize("edit", ["counts", "stats", "schema sha", "params", "reformat"])
def test_an_edited_manifest_is_detected(build, capsys, edit):
    path = build / "manifest.json"
    manifest = json.loads(path.read_text())
    if edit == "counts":
        manifest["counts"]["transitions"] += 1
    elif edit == "stats":
        manifest["stats"]["episode_return"]["mean"] += 1.0
    elif edit == "schema sha":  # hide a data edit by recording the new hash: the manifest checksum still tells
        manifest["schema"]["steps/action"]["sha256"] = "0" * 64
    elif edit == "params":
        manifest["params"]["steps"] = 121
    path.write_text(json.dumps(manifest, indent=2 if edit == "reformat" else 1))
    result = verify(GYM, params={"steps": 120})
    assert not result.ok and any("manifest" in p for p in result.problems), result.problems
    assert _cli_verify(capsys)[0] == 1


def test_an_edited_manifest_without_its_checksum_file_is_still_caught(build):
    """Deleting manifest.sha256 too: the manifest is checked against what the data recomputes."""
    (build / "manifest.sha256").unlink()
    path = build / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["stats"]["episode_length"]["max"] += 3
    path.write_text(json.dumps(manifest))
    result = verify(GYM, params={"steps": 120})
    assert not result.ok and any("stats.episode_length.max" in p for p in result.problems)


def test_a_tampered_raw_file_is_detected(tmp_path, monkeypatch, capsys):
    from fixtures.faults import d4rl_entry, register, write_d4rl

    src = write_d4rl(tmp_path / "t.hdf5")
    register(tmp_path / "extra.yaml", {"d4rl/tamper-v0": d4rl_entry(src.as_uri())})
    monkeypatch.setenv("DATASETS_HUB_REGISTRY", str(tmp_path / "extra.yaml"))
    dh.download("d4rl/tamper-v0")
    assert verify("d4rl/tamper-v0").ok
    raw = dh.info("d4rl/tamper-v0").manifest["sources"][0]
    path = next((Path(dh.info("d4rl/tamper-v0").build_path).parents[3] / "raw" / "d4rl").glob("*/" + raw["name"]))
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    result = verify("d4rl/tamper-v0")
    assert not result.ok and any(str(path) in p and "corrupt or was modified" in p for p in result.problems)


# ---------------------------------------------------------------------------------------- no unpickling
# Code that reads what came from upstream: the downloader, the build, the catalogue and every loader.
UPSTREAM_READERS = sorted(
    [
        ROOT / "datasets_hub" / n
        for n in (
            "downloads/fetch.py",
            "downloads/http.py",
            "downloads/huggingface.py",
            "build/pipeline.py",
            "build/format.py",
            "build/reader.py",
            "build/checks.py",
            "build/writer.py",
            "catalogue.py",
            "hub.py",
            "sources.py",
            "cache/layout.py",
            "cache/verify.py",
            "cache/listing.py",
            "build/storage.py",
            "plugins.py",
            "loader.py",
            "cache/maintenance.py",
        )
    ]
    + [p for p in (ROOT / "loaders").rglob("*.py") if p.name != "__init__.py"]
)
assert all(p.is_file() for p in UPSTREAM_READERS), [p for p in UPSTREAM_READERS if not p.is_file()]
UNSAFE_CALLS = {
    ("pickle", "load"),
    ("pickle", "loads"),
    ("pickle", "Unpickler"),
    ("cPickle", "load"),
    ("dill", "load"),
    ("dill", "loads"),
    ("cloudpickle", "load"),
    ("cloudpickle", "loads"),
    ("joblib", "load"),
    ("marshal", "load"),
    ("marshal", "loads"),
    ("shelve", "open"),
    ("pd", "read_pickle"),
    ("pandas", "read_pickle"),
    ("yaml", "unsafe_load"),
    ("yaml", "full_load"),
}


def _unsafe(tree: ast.AST) -> list[str]:
    found = []
    # names bound to an expression (``safe_loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)``)
    bound = {
        t.id: ast.unparse(n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            )
            found += [
                f"import {n}"
                for n in names
                if n.split(".")[0] in ("pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve")
            ]
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
        kwargs = {k.arg: k.value for k in node.keywords}
        line = f"line {node.lineno}: {owner + '.' if owner else ''}{name}"
        if (owner, name) in UNSAFE_CALLS or (name in ("eval", "exec") and not owner):
            found.append(line)
        elif name == "load" and owner in ("np", "numpy"):
            flag = kwargs.get("allow_pickle")
            if not (isinstance(flag, ast.Constant) and flag.value is False):
                found.append(line + " without allow_pickle=False")
        elif name == "load" and owner == "torch":
            flag = kwargs.get("weights_only")
            if not (isinstance(flag, ast.Constant) and flag.value is True):
                found.append(line + " without weights_only=True")
        elif name == "load" and owner == "yaml":
            loader = kwargs.get("Loader")
            text = bound.get(loader.id, "") if isinstance(loader, ast.Name) else ast.unparse(loader) if loader else ""
            if "Safe" not in text or "Unsafe" in text:
                found.append(line + " without a safe Loader")
        elif name in ("load_memmap", "load") and "allow_pickle" in kwargs:
            flag = kwargs["allow_pickle"]
            if not (isinstance(flag, ast.Constant) and flag.value is False):
                found.append(line + " with allow_pickle")
    return found


#: modules that unpickle upstream data through an allow-list: a ``pickle.Unpickler`` whose ``find_class``
#: refuses every global not listed, or ``torch.load(weights_only=True)`` with extra safe globals (the module
#: then imports pickle only for its exception types). Each is checked for one of the two.
ALLOW_LIST_UNPICKLERS = {
    "loaders/calvin/safe_npy.py": "CALVIN's language annotations are a pickled object array",
    "loaders/tdmpc2/safe_load.py": "TD-MPC2's chunks are pickled TensorDicts",
}


def _overrides_find_class(tree: ast.AST) -> bool:
    return any(
        isinstance(node, ast.ClassDef)
        and any(isinstance(b, ast.Attribute) and b.attr == "Unpickler" for b in node.bases)
        and any(isinstance(item, ast.FunctionDef) and item.name == "find_class" for item in node.body)
        for node in ast.walk(tree)
    )


def test_allow_list_unpicklers_refuse_what_is_not_listed():
    for name in ALLOW_LIST_UNPICKLERS:
        tree = ast.parse((ROOT / name).read_text())
        restricted = _overrides_find_class(tree) or set(_unsafe(tree)) <= {"import pickle"}
        assert restricted, f"{name}: neither an Unpickler.find_class override nor only weights_only loads"


def test_no_code_path_reading_upstream_data_unpickles():
    assert len(UPSTREAM_READERS) > 15
    problems = {
        str(p.relative_to(ROOT)): _unsafe(ast.parse(p.read_text(), str(p)))
        for p in UPSTREAM_READERS
        if str(p.relative_to(ROOT)) not in ALLOW_LIST_UNPICKLERS
    }
    problems = {k: v for k, v in problems.items() if v}
    assert not problems, f"code that reads upstream data must never unpickle: {problems}"


def test_the_scan_catches_what_it_looks_for():
    """A scan that cannot fail is a defect: every unsafe form is flagged, the safe forms are not."""
    unsafe = [
        "import pickle",
        "pickle.loads(b)",
        "np.load(f)",
        "np.load(f, allow_pickle=True)",
        "torch.load(f)",
        "torch.load(f, weights_only=False)",
        "yaml.load(f)",
        "yaml.load(f, Loader=yaml.Loader)",
        "yaml.unsafe_load(f)",
        "l = yaml.UnsafeLoader\nyaml.load(f, Loader=l)",
        "eval(s)",
        "marshal.loads(b)",
        "joblib.load(f)",
    ]
    safe = [
        "np.load(f, allow_pickle=False)",
        "torch.load(f, weights_only=True)",
        "yaml.load(f, Loader=yaml.CSafeLoader)",
        "yaml.safe_load(f)",
        "json.load(f)",
        "safe = getattr(yaml, 'CSafeLoader', yaml.SafeLoader)\nyaml.load(f, Loader=safe)",
    ]
    for code in unsafe:
        assert _unsafe(ast.parse(code)), code
    for code in safe:
        assert not _unsafe(ast.parse(code)), code


def test_numpy_files_with_objects_are_refused_by_the_atari_reader(tmp_path):
    """Dopamine's .npy.gz files are read by our own header parser: an object array (pickle) is refused."""
    import gzip

    from datasets_hub.errors import LoaderError
    from datasets_hub.loaders.atari.replay import NpyStream

    path = tmp_path / "$store$_observation_ckpt.0.gz"
    with gzip.open(path, "wb") as fh:
        np.save(fh, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(LoaderError, match="pickled"):
        NpyStream(path)
