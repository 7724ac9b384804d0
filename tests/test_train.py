"""``train_topic`` and the use of saved model files by ``build_topic_model``."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from jlse.models.persist import ARRAYS_FILE, HEADER_FILE, read_model_header
from jlse.models.topic_model import TopicModel
from jlse.sandbox import build_web
from jlse.topic import TopicError, build_topic_model, load_topic
from jlse.train import train_topic

CLASSIFIERS = ["nb", "kde-nb", "gaussian-nb", "vsm", "svm", "anchor-nb"]


@pytest.fixture(scope="module")
def trained_topic(tmp_path_factory) -> tuple[Path, object]:
    """A sandbox topic directory trained once with the default settings, and its report."""
    directory = tmp_path_factory.mktemp("phones")
    build_web().write_topic_dir("phones", directory)
    return directory, train_topic(directory)


@pytest.fixture()
def topic_copy(trained_topic, tmp_path) -> Path:
    """A private copy of the trained topic directory (model files included)."""
    return Path(shutil.copytree(trained_topic[0], tmp_path / "topic"))


def _forbid_fitting(monkeypatch) -> None:
    def fail(self, samples):
        raise AssertionError("the model was trained, not loaded")

    monkeypatch.setattr(TopicModel, "fit", fail)


def test_train_writes_model_files_and_reports_accuracies(trained_topic) -> None:
    directory, report = trained_topic
    model_dir = directory / "model"
    assert (model_dir / HEADER_FILE).is_file() and (model_dir / ARRAYS_FILE).is_file()
    assert report.model_dir == model_dir and report.model_version == 1
    assert [row.key for row in report.rows] == CLASSIFIERS
    assert report.accuracy("nb") > 0.8 and report.accuracy("kde-nb") > 0.8
    for row in report.rows:
        assert len(row.fold_scores) == 5 and 0.0 <= row.mean <= 1.0 and row.n_samples > 0
    assert report.sources == {"relevance": "page_nb", "target": "svm", "anchor": "anchor_nb"}
    header = read_model_header(model_dir)
    assert header["page_classifier"] == "nb" and header["cv_report"] == report.to_dict()["cv"]
    json.dumps(report.to_dict(), allow_nan=False)


def test_report_renders_a_table(trained_topic) -> None:
    report = trained_topic[1]
    table = report.render()
    for row in report.rows:
        line = next(line for line in table.splitlines() if row.classifier in line)
        assert f"{row.mean:.3f} ± {row.std:.3f}" in line and line.rstrip().endswith(str(row.n_samples))
    assert next(line for line in table.splitlines() if "page NB" in line).startswith("*")
    assert "GaussianNB (baseline)" in table and "model version 1" in table


def test_train_uses_the_topics_page_classifier(topic_copy, tmp_path) -> None:
    toml = topic_copy / "topic.toml"
    toml.write_text(toml.read_text(encoding="utf-8") + 'page_classifier = "kde-nb"\n', encoding="utf-8")
    out_dir = tmp_path / "elsewhere"
    report = train_topic(topic_copy, out_dir=out_dir, folds=3)
    assert report.sources["relevance"] == "page_kde_nb" and report.model_version == 1
    assert all(len(row.fold_scores) == 3 for row in report.rows)
    assert read_model_header(out_dir)["page_classifier"] == "kde-nb"
    assert next(line for line in report.render().splitlines() if "KDE-NB" in line).startswith("*")


def test_build_topic_model_loads_the_saved_model(topic_copy, monkeypatch, caplog) -> None:
    topic = load_topic(topic_copy)
    _forbid_fitting(monkeypatch)
    with caplog.at_level(logging.INFO, logger="jlse.topic"):
        model = build_topic_model(topic)
    assert "using the saved model" in caplog.text
    assert model.fingerprint_ == topic.samples.fingerprint() and model.sources_["relevance"] == "page_nb"
    assert model.relevance(topic.samples.relevant[0]) > 0.5 > model.relevance(topic.samples.irrelevant[0])


def test_stale_model_is_replaced_by_training(topic_copy, caplog) -> None:
    toml = topic_copy / "topic.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace('keywords = [', 'keywords = ["feature phone", '),
                    encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="jlse.topic"):
        model = build_topic_model(load_topic(topic_copy))
    assert "stale" in caplog.text and "samples or keywords changed" in caplog.text
    assert "feature phone" in load_topic(topic_copy).samples.keywords
    assert model.fingerprint_ == load_topic(topic_copy).samples.fingerprint()


def test_other_settings_make_the_model_stale(topic_copy, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="jlse.topic"):
        model = build_topic_model(load_topic(topic_copy, {"page_classifier": "vsm"}))
    assert "page_classifier is 'vsm'" in caplog.text
    assert model.sources_["relevance"] == "vsm"


def test_incompatible_model_is_replaced_by_training(topic_copy, caplog) -> None:
    path = topic_copy / "model" / HEADER_FILE
    header = json.loads(path.read_text(encoding="utf-8"))
    header["libraries"]["numpy"] = "0.9.0"
    path.write_text(json.dumps(header), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="jlse.topic"):
        model = build_topic_model(load_topic(topic_copy))
    assert "saved model not used" in caplog.text and "numpy 0.9.0" in caplog.text
    assert model.sources_["relevance"] == "page_nb"


def test_train_refuses_bad_input(tmp_path) -> None:
    with pytest.raises(ValueError, match="folds"):
        train_topic(tmp_path, folds=1)
    with pytest.raises(TopicError, match="not found"):
        train_topic(tmp_path / "missing")
    (tmp_path / "seeds.txt").write_text("http://a.test/\n", encoding="utf-8")
    with pytest.raises(TopicError, match="cannot train"):
        train_topic(tmp_path)
    assert not (tmp_path / "model").exists()


def _page(words: str) -> str:
    return f"<html><head><title>{words[:20]}</title></head><body><p>{words}</p></body></html>"


def test_samples_that_are_not_pages_are_skipped_by_name(tmp_path, caplog) -> None:
    topic = Path(shutil.copytree(build_web().write_topic_dir("phones", tmp_path / "t"),
                                 tmp_path / "topic"))
    relevant = topic / "samples" / "relevant"
    before = len(load_topic(topic).samples.relevant)
    (relevant / "empty.html").write_bytes(b"")
    (relevant / "image.html").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64))
    (relevant / "noise.html").write_bytes(bytes(range(256)) * 8)
    (relevant / "notes.txt").write_text("not a sample")
    with caplog.at_level(logging.WARNING, logger="jlse.topic"):
        samples = load_topic(topic).samples
    assert len(samples.relevant) == before
    for name, why in (("empty.html", "empty"), ("image.html", "binary"),
                      ("noise.html", "binary"), ("notes.txt", "ignored")):
        assert any(name in r.getMessage() and why in r.getMessage() for r in caplog.records), name


def test_a_model_at_chance_is_warned_about(tmp_path, caplog) -> None:
    """Relevant and irrelevant samples alike: cross-validation is at chance; both jlse train
    and a crawl that trains the model on the fly say so."""
    topic = tmp_path / "chance"
    (topic / "samples" / "relevant").mkdir(parents=True)
    (topic / "samples" / "irrelevant").mkdir(parents=True)
    (topic / "seeds.txt").write_text("http://a.test/\n")
    words = ["phone", "camera", "price", "battery", "screen", "review", "shop", "deal"]
    for i in range(12):
        text = " ".join(words[(i + k) % len(words)] for k in range(30))
        for kind in ("relevant", "irrelevant"):
            (topic / "samples" / kind / f"{i}.html").write_text(_page(text))
    with caplog.at_level(logging.WARNING, logger="jlse.topic"):
        report = train_topic(topic)
    assert report.accuracy("nb") <= 0.55
    assert "no better than chance" in caplog.text and "the page classifier" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jlse.topic"):
        build_topic_model(load_topic(topic))  # loads the saved model and its CV report
    assert "no better than chance" in caplog.text and "the saved model" in caplog.text
    caplog.clear()
    shutil.rmtree(topic / "model")
    with caplog.at_level(logging.WARNING, logger="jlse.topic"):
        build_topic_model(load_topic(topic))
    assert "no better than chance" in caplog.text and "trained on the fly" in caplog.text


def test_a_good_model_is_not_warned_about(trained_topic, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="jlse.topic"):
        build_topic_model(load_topic(trained_topic[0]))
    assert "chance" not in caplog.text
