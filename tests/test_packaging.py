"""The wheel: everything under the single ``jlse`` namespace, data files included."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAPPED = {"models": "jlse/models", "scheduler": "jlse/scheduler", "workers": "jlse/workers",
          "learner": "jlse/learner", "jlse": "jlse"}  # source folder -> place in the wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the sources (so no build/ or egg-info lands in the repo)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for folder in MAPPED:
        shutil.copytree(ROOT / folder, src / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out),
         str(src)], capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stdout + build.stderr
    assert "Warning" not in build.stdout + build.stderr, build.stdout + build.stderr
    (path,) = out.glob("jlse-*.whl")
    return path


def test_wheel_holds_only_the_jlse_namespace(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names}
    assert "jlse" in top
    assert [t for t in top if t != "jlse"] == [f"jlse-{wheel.name.split('-')[1]}.dist-info"]
    for expected in ("jlse/models/tokenizer.py", "jlse/models/data/stopwords_en.txt",
                     "jlse/scheduler/store/sql.py", "jlse/workers/pipeline.py",
                     "jlse/learner/__init__.py", "jlse/learner/learner.py"):
        assert expected in names


def test_wheel_has_every_source_module(wheel: Path) -> None:
    """A new subfolder must be added to [tool.setuptools] packages, or it is left out."""
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, target in MAPPED.items():
        for source in (ROOT / folder).rglob("*.py"):
            assert f"{target}/{source.relative_to(ROOT / folder).as_posix()}" in names


def test_tokenizer_loads_its_stopwords_from_the_wheel(wheel: Path, tmp_path: Path) -> None:
    zipfile.ZipFile(wheel).extractall(tmp_path)
    code = ("import jlse.models.tokenizer as t; print(t.__file__); "
            "assert 'the' in t.STOPWORDS and t.tokenize('The phones') == ['phones']")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert Path(run.stdout.strip()).is_relative_to(tmp_path)
