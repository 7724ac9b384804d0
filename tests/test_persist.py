"""Model files without pickle: exact round trips, version checks, corrupt and foreign files."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from jlse.models.page_stats import PageStats
from jlse.models.persist import (
    ARRAYS_FILE,
    FORMAT_VERSION,
    HEADER_FILE,
    ModelFileError,
    ModelVersionError,
    library_versions,
    load_topic_model,
    read_model_header,
    save_topic_model,
)
from jlse.models.topic_model import TopicModel, TopicSamples
from jlse.sandbox import build_web
from jlse.topic import load_topic


@pytest.fixture(scope="module")
def phones(tmp_path_factory) -> TopicSamples:
    directory = tmp_path_factory.mktemp("phones")
    build_web().write_topic_dir("phones", directory)
    return load_topic(directory).samples


@pytest.fixture(scope="module")
def nb_model(phones) -> TopicModel:
    return TopicModel().fit(phones)


def _probe(samples: TopicSamples) -> dict:
    pages = samples.relevant[:5] + samples.irrelevant[:5] + ["", "手机 smartphone", "pasta"]
    anchors = [text for text, _ in samples.anchors] + ["", "新款手机评测"]
    blocks = [{"title": page[:40], "headings": page[40:80], "body": page} for page in pages]
    stats = samples.target[:5] + samples.nontarget[:5] + [PageStats(), PageStats(500, 50, 10, [120, 80])]
    return {"pages": pages, "anchors": anchors, "blocks": blocks, "stats": stats}


def _predictions(model: TopicModel, probe: dict) -> dict[str, np.ndarray]:
    return {
        "relevance": model.relevance_texts(probe["pages"]),
        "relevance_page": np.array([model.relevance_page(text, blocks)
                                    for text, blocks in zip(probe["pages"], probe["blocks"], strict=True)]),
        "context": model.context_relevance(probe["anchors"] + probe["pages"]),
        "anchor": model.anchor_similarity(probe["anchors"]),
        "target": np.array([model.is_target(stats) for stats in probe["stats"]]),
    }


def _assert_same_predictions(original: TopicModel, loaded: TopicModel, samples: TopicSamples) -> None:
    probe = _probe(samples)
    expected, got = _predictions(original, probe), _predictions(loaded, probe)
    for name in expected:
        assert np.array_equal(expected[name], got[name]), name  # exactly equal, not approximately


def _edit_header(directory: Path, change) -> None:
    path = directory / HEADER_FILE
    header = json.loads(path.read_text(encoding="utf-8"))
    change(header)
    path.write_text(json.dumps(header), encoding="utf-8")


def _samples_for(kind: str, phones: TopicSamples) -> TopicSamples:
    if kind == "keywords":
        return TopicSamples(keywords=phones.keywords)
    if kind == "anchors":
        return TopicSamples(anchors=phones.anchors)
    return phones


@pytest.mark.parametrize(("classifier", "kind"), [
    ("nb", "all"), ("kde-nb", "all"), ("vsm", "all"), ("vsm", "keywords"), ("nb", "keywords"), ("nb", "anchors"),
])
def test_round_trip_predicts_identically(phones, tmp_path, classifier: str, kind: str) -> None:
    samples = _samples_for(kind, phones)
    model = TopicModel(relevance_threshold=0.45, anchor_floor=0.02, page_classifier=classifier).fit(samples)
    save_topic_model(model, tmp_path)
    loaded = load_topic_model(tmp_path)
    assert loaded.sources_ == model.sources_ and loaded.context_source_ == model.context_source_
    assert (loaded.relevance_threshold, loaded.anchor_floor, loaded.page_classifier) == (0.45, 0.02, classifier)
    assert loaded.fingerprint_ == samples.fingerprint()
    _assert_same_predictions(model, loaded, samples)


def test_header_records_versions_and_counts_saves(nb_model, tmp_path) -> None:
    assert save_topic_model(nb_model, tmp_path, cv_report={"nb": {"accuracy": 0.9}}) == tmp_path / HEADER_FILE
    header = read_model_header(tmp_path)
    assert header["format_version"] == FORMAT_VERSION and header["model_version"] == 1
    assert header["libraries"] == library_versions()
    assert set(header["libraries"]) == {"jlse", "numpy", "scipy", "scikit-learn", "jieba"}
    assert header["page_classifier"] == "nb" and header["cv_report"] == {"nb": {"accuracy": 0.9}}
    assert header["created_at"].endswith("+00:00")
    assert isinstance(header["topic_model"]["parts"]["relevance"]["state"]["vocabulary"], list)
    save_topic_model(nb_model, tmp_path)
    assert read_model_header(tmp_path)["model_version"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [HEADER_FILE, ARRAYS_FILE]  # no temporary files left


@pytest.mark.parametrize(("library", "field"), [("scikit-learn", "libraries"), ("numpy", "libraries"),
                                                ("model format", "format_version")])
def test_version_mismatch_is_refused_clearly(nb_model, tmp_path, library: str, field: str) -> None:
    save_topic_model(nb_model, tmp_path)
    installed = library_versions().get(library, str(FORMAT_VERSION))

    def change(header: dict) -> None:
        if field == "format_version":
            header["format_version"] = 99
        else:
            header["libraries"][library] = "0.1.0"

    _edit_header(tmp_path, change)
    with pytest.raises(ModelVersionError) as raised:
        load_topic_model(tmp_path)
    saved = "99" if field == "format_version" else "0.1.0"
    assert library in str(raised.value) and saved in str(raised.value) and installed in str(raised.value)
    assert (raised.value.library, raised.value.saved, raised.value.installed) == (library, saved, installed)
    assert isinstance(raised.value, ValueError)


def test_patch_versions_differing_still_load(nb_model, tmp_path) -> None:
    save_topic_model(nb_model, tmp_path)
    major, minor = library_versions()["scikit-learn"].split(".")[:2]
    _edit_header(tmp_path, lambda header: header["libraries"].update({"scikit-learn": f"{major}.{minor}.999"}))
    assert load_topic_model(tmp_path).sources_ == nb_model.sources_


def test_corrupt_or_foreign_arrays_are_refused(nb_model, tmp_path) -> None:
    save_topic_model(nb_model, tmp_path)
    npz = tmp_path / ARRAYS_FILE
    data = bytearray(npz.read_bytes())
    data[len(data) // 2] ^= 0xFF
    npz.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="sha256"):
        load_topic_model(tmp_path)
    # garbage whose checksum matches the header: unreadable, not a crash
    npz.write_bytes(b"not a zip file at all")
    _edit_header(tmp_path, lambda header: header.update(
        {"arrays_sha256": hashlib.sha256(b"not a zip file at all").hexdigest()}))
    with pytest.raises(ModelFileError, match="unreadable"):
        load_topic_model(tmp_path)


def test_missing_or_malformed_files_are_refused(nb_model, tmp_path) -> None:
    with pytest.raises(ModelFileError, match="no model file"):
        load_topic_model(tmp_path)
    save_topic_model(nb_model, tmp_path)
    (tmp_path / ARRAYS_FILE).unlink()
    with pytest.raises(ModelFileError, match="unreadable"):
        load_topic_model(tmp_path)
    save_topic_model(nb_model, tmp_path)
    _edit_header(tmp_path, lambda header: header["topic_model"]["parts"].pop("target"))
    with pytest.raises(ModelFileError, match="do not describe a topic model"):
        load_topic_model(tmp_path)
    (tmp_path / HEADER_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(ModelFileError, match="unreadable model header"):
        load_topic_model(tmp_path)


def test_no_pickle_anywhere(nb_model, phones, tmp_path) -> None:
    model = TopicModel(page_classifier="vsm").fit(phones)
    save_topic_model(model, tmp_path)
    with np.load(tmp_path / ARRAYS_FILE, allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}  # would raise on a pickled object array
    assert arrays and not any(array.dtype.hasobject for array in arrays.values())
    assert any(name.startswith("context.") for name in arrays)  # the link-text KDE-NB is saved
    # an npz holding an object array (pickled by np.savez) is refused, never unpickled
    buffer = io.BytesIO()
    np.savez(buffer, **{**arrays, "relevance.idf": np.array([{"x": 1}], dtype=object)})
    (tmp_path / ARRAYS_FILE).write_bytes(buffer.getvalue())
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    _edit_header(tmp_path, lambda header: header.update({"arrays_sha256": digest}))
    with pytest.raises(ModelFileError, match="unreadable"):
        load_topic_model(tmp_path)
    with zipfile.ZipFile(tmp_path / ARRAYS_FILE) as archive:
        assert "relevance.idf.npy" in archive.namelist()


def test_saving_an_object_array_is_refused(nb_model, tmp_path, monkeypatch) -> None:
    arrays, header = nb_model.get_state()
    monkeypatch.setattr(nb_model, "get_state", lambda: ({**arrays, "x": np.array([None])}, header))
    with pytest.raises(TypeError, match="'x'"):
        save_topic_model(nb_model, tmp_path)
    assert not (tmp_path / HEADER_FILE).exists()
