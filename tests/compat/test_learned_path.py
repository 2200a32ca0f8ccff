"""The learned path of the fm-training-estimator drop-in: the original's lookup (its own test,
ported), its data formats, its model features read through fmest's model resolution, and
:func:`learned_answer` (lookup, then a model, then nothing), with the original's test CSVs
(tests/compat/data/, source in the SOURCE file beside them)."""

from __future__ import annotations

import csv
import json
import sys
import time
import zipfile
from pathlib import Path

import pytest

from fmest.compat.fm_training_estimator.data import (
    ACCEPTED_HEADERS,
    format_query,
    formats,
    get_format_by_version,
    lookup_format_version,
)
from fmest.compat.fm_training_estimator.learned import (
    EMPTY,
    MIN_TRAINING_ROWS,
    LearnedAnswer,
    learned_answer,
)
from fmest.compat.fm_training_estimator.lookup import LookupRegressor
from fmest.compat.fm_training_estimator.model import (
    extract_model_features,
    get_model_max_length,
)
from fmest.convert import job_from_dict
from fmest.errors import InputError

DATA = Path(__file__).parent / "data"
test_data1 = (DATA / "data1.csv").as_posix()
test_data2 = (DATA / "data2.csv").as_posix()
test_data3 = (DATA / "data3.csv").as_posix()


# -- the original's regressor/lookup/test_lookup.py, imports switched ---------------------------
def test_lookup():
    reg = LookupRegressor()

    reg.load(test_data1)

    res = reg.run(
        {
            "model_name": "mercury-12b",
            "gpu_model": "X100",
            "number_gpus": 2,
            "batch_size": 4,
            "seq_len": 512,
        }
    )

    assert res.shape[0] == 1
    assert res["tokens_per_second"][0] == 500

    # should return multiple entries
    res = reg.run(
        {
            "model_name": "mercury-12b",
            "gpu_model": "X100",
            "number_gpus": 2,
            "batch_size": 4,
        }
    )

    assert res.shape[0] == 3

    reg.load(test_data2)

    res = reg.run(
        {
            "model_name": "ibm-granite/granite-7b-base",
            "number_gpus": 2,
            "batch_size": 4,
            "seq_len": 512,
        }
    )

    assert res.shape[0] == 1
    assert res[0:1]["tokens_per_second"].item() == 500

    res = reg.run(
        {
            "model_name": "ibm-granite/granite-7b-base",
            "number_gpus": 2,
            "batch_size": 4,
            "seq_len": 1024,
        }
    )

    assert res.shape[0] == 1
    assert res[0:1]["tokens_per_second"].item() == 1000


# -- the lookup's result object and its errors --------------------------------------------------
def test_lookup_result_is_a_small_table():
    reg = LookupRegressor(test_data2)
    res = reg.run({"model_name": "ibm-granite/granite-7b-base", "number_gpus": 4})
    assert res.shape == (3, 5) and len(res) == 3 and not res.empty
    assert res.columns == ("batch_size", "seq_len", "tokens_per_second", "memory", "memory_act")
    assert res["batch_size"].tolist() == [4, 8, 16]
    assert res["memory"][0:1].item() == 20                       # the hybrid estimators' read
    assert res.rows[0] == {"batch_size": 4, "seq_len": 1024, "tokens_per_second": 500,
                           "memory": 20, "memory_act": 10}
    assert res.row_numbers == (6, 7, 8)                          # lines in the file
    assert isinstance(res.rows[0]["memory"], int)                # typed as read_csv types
    with pytest.raises(ValueError, match="size 1"):
        res["memory"].item()
    miss = reg.run({"model_name": "ibm-granite/granite-7b-base", "number_gpus": 3})
    assert miss.empty and miss.shape == (0, 5) and len(miss) == 0


def test_lookup_compares_numbers_numerically_and_text_exactly(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("model_name,number_gpus,batch_size,seq_len,tokens_per_second,memory,"
                    "memory_act\nm,2,4.0,512,1.5e3,,10\n")
    reg = LookupRegressor(str(path))
    res = reg.run({"model_name": "m", "number_gpus": 2.0, "batch_size": 4, "seq_len": 512})
    assert res.shape == (1, 3)
    assert res["tokens_per_second"][0] == 1500.0
    assert res["memory"][0] != res["memory"][0]                  # an empty number cell: NaN
    assert reg.run({"model_name": "M", "number_gpus": 2}).empty  # text: exactly
    assert reg.run({"model_name": None}).empty                   # None matches nothing


def test_lookup_errors_name_the_path_and_the_accepted_headers(tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(InputError) as err:
        LookupRegressor(str(missing))
    assert str(missing) in str(err.value)
    assert err.value.accepted == list(ACCEPTED_HEADERS)
    assert "v1: model_name,number_gpus,batch_size,seq_len,tokens_per_second" in str(err.value)

    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(InputError, match="no header"):
        LookupRegressor(str(empty))

    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00\x81garbage")
    with pytest.raises(InputError) as err:
        LookupRegressor(str(binary))
    assert str(binary) in str(err.value)

    ragged = tmp_path / "ragged.csv"
    ragged.write_text("a,b\n1,2,3\n")
    with pytest.raises(InputError, match="line 2 has 3 fields"):
        LookupRegressor(str(ragged))

    reg = LookupRegressor(test_data1)
    assert reg.get_data_format() == "undefined"                  # as the original answers
    with pytest.raises(InputError) as err:
        reg.check_data_format()
    assert test_data1 in str(err.value) and err.value.accepted == list(ACCEPTED_HEADERS)
    with pytest.raises(InputError) as err:
        reg.run({"gpu": "X100"})
    assert err.value.field == "gpu" and "gpu_model" in err.value.accepted


# -- data formats -------------------------------------------------------------------------------
def test_formats_are_the_originals():
    assert [f.name for f in formats] == ["v1", "v2", "v3"]
    assert lookup_format_version("model_name,number_gpus,batch_size,seq_len,"
                                 "tokens_per_second,memory,memory_act") == "v1"
    for path, version in ((test_data2, "v1"), (test_data3, "v2")):
        header = Path(path).read_text().splitlines()[0]
        assert lookup_format_version(header) == version
    assert lookup_format_version("model_name,gpu_model") == "undefined"
    v3 = get_format_by_version("v3")
    assert v3 is not None and v3.X.split(",")[6:8] == ["method", "gpu_model"]
    assert v3.Y == "tokens_per_second,memory,memory_act"
    assert get_format_by_version("v9") is None


QUERY = {"model_name": "ibm-granite/granite-3b-code-base", "number_gpus": 4, "batch_size": 16,
         "seq_len": 1024, "gpu_model": "A100", "method": "full"}


def test_format_query_keeps_the_versions_keys_in_order():
    assert format_query(QUERY, "v1") == {"model_name": "ibm-granite/granite-3b-code-base",
                                         "number_gpus": 4, "batch_size": 16, "seq_len": 1024}
    v3 = format_query(QUERY, "v3")
    assert list(v3) == get_format_by_version("v3").X.split(",")
    assert v3["model_arch"] == "LlamaForCausalLM" and v3["model_hidden_size"] == 2560
    assert v3["method"] == "full" and v3["gpu_model"] == "A100"
    assert list(format_query(QUERY, "v2", only_values=True)) == [
        "LlamaForCausalLM", 2560, 10240, 32, 32, 32, 4, 16, 1024]
    partial = format_query({"model_name": "x"}, "v1")
    assert partial == {"model_name": "x", "number_gpus": None, "batch_size": None,
                       "seq_len": None}


def test_format_query_refuses_an_unknown_version_and_an_unknown_model():
    with pytest.raises(InputError) as err:
        format_query(QUERY, "undefined")
    assert err.value.accepted == ["v1", "v2", "v3"]
    with pytest.raises(InputError) as err:
        format_query(dict(QUERY, model_name="no-such-org/no-such-model-xyz"), "v2")
    assert "no-such-org/no-such-model-xyz" in str(err.value)


# -- model features -----------------------------------------------------------------------------
def _shipped(name: str) -> bool:
    from fmest.models.local import resolve_model

    try:
        resolve_model(name, hub=False)
    except InputError:
        return False
    return True


def test_extract_model_features():
    # the original's utils/test_model.py, granite-3b-code-base being a shipped preset alias
    res = extract_model_features("ibm-granite/granite-3b-code-base")
    assert res["model_num_hidden_layers"] == 32

    res = extract_model_features("ibm-granite/granite-3b-code-base", fmt="list")
    assert res == ["LlamaForCausalLM", 2560, 10240, 32, 32, 32]

    res = extract_model_features("ibm-granite/granite-3b-code-base", fmt="csv")
    assert res == "LlamaForCausalLM,2560,10240,32,32,32"

    assert extract_model_features("granite-3b-code-base", fmt="yaml") == \
        extract_model_features("granite-3b-code-base")          # unknown fmt: the dict


@pytest.mark.parametrize("name, expected", [
    ("ibm-granite/granite-20b-code-base", ["GPTBigCodeForCausalLM", 6144, 24576, 48, 52, 48]),
    ("ibm-granite/granite-7b-base", ["LlamaForCausalLM", 4096, 11008, 32, 32, 32]),
])
def test_extract_model_features_of_other_granite_models(name, expected):
    if not _shipped(name):
        pytest.skip(f"{name} is not among fmest's shipped presets")
    assert extract_model_features(name, fmt="list") == expected


def test_features_fall_back_as_the_original_does(tmp_path):
    folder = tmp_path / "gpt-like"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 256,
        "n_inner": 1024, "n_head": 4, "n_layer": 2, "vocab_size": 1000}))
    assert extract_model_features(str(folder), fmt="list") == [
        "GPT2LMHeadModel", 256, 1024, 4, 2, 4]                   # kv heads = attention heads
    assert get_model_max_length(str(folder)) == 4096             # neither key: the fallback
    assert get_model_max_length("ibm-granite/granite-3b-code-base") == 2048
    if _shipped("bigcode/gpt_bigcode-santacoder"):
        assert get_model_max_length("bigcode/gpt_bigcode-santacoder") == 2048  # n_positions


def test_unknown_model_is_an_input_error_naming_it():
    with pytest.raises(InputError) as err:
        extract_model_features("no-such-org/no-such-model-xyz")
    assert err.value.field == "model" and "no-such-org/no-such-model-xyz" in str(err.value)


# -- learned_answer (the engine fixture: tests/compat/conftest.py) ------------------------------
@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """Each test its own model cache."""
    monkeypatch.setenv("FMEST_CACHE_DIR", str(tmp_path / "cache"))


def _job(model: str, gpus: int, batch: int, seq: int, gpu: str = "A100-80GB"):
    d = {"model": model, "training": {"micro_batch_size": batch, "seq_len": seq,
                                      "dtype": "fp32", "precision": "pure"},
         "hardware": {"gpus_per_node": gpus, "nodes": 1, "gpu": gpu}}
    if gpus > 1:
        d["parallelism"] = {"fsdp": "full_shard"}
    return job_from_dict(d)


def _query(model: str, gpus: int, batch: int, seq: int, gpu: str = "A100",
           method: str = "full") -> dict:
    return {"model_name": model, "number_gpus": gpus, "batch_size": batch, "seq_len": seq,
            "gpu_model": gpu, "method": method}


def test_no_paths_answer_nothing_at_once(engine):
    start = time.perf_counter()
    for _ in range(1000):
        got = learned_answer(QUERY, None, data_path=None, model_path=None, engine=engine)
    assert got is EMPTY and got == LearnedAnswer(None, None, "", "", ())
    assert time.perf_counter() - start < 0.1


def test_lookup_hit_answers_both_from_the_row(engine):
    q = _query("ibm-granite/granite-7b-base", 2, 4, 1024, gpu="H100")   # v1: any GPU matches
    got = learned_answer(q, _job("granite-7b-base", 2, 4, 1024), data_path=test_data2,
                         model_path=None, engine=engine)
    assert (got.memory_bytes, got.tokens_per_second) == (20, 1000)
    assert got.memory_basis == got.tps_basis == f"lookup: {test_data2} row 3"
    assert got.warnings == ()


def test_v2_lookup_keys_rows_by_the_models_features(engine):
    q = _query("ibm-granite/granite-3b-code-base", 4, 16, 1024)
    got = learned_answer(q, _job("granite-3b-code-base", 4, 16, 1024), data_path=test_data3,
                         model_path=None, engine=engine)
    assert got.memory_bytes == 20 and got.memory_basis == f"lookup: {test_data3} row 2"


def test_v3_lookup_matches_gpu_and_method(tmp_path, engine):
    v3 = get_format_by_version("v3")
    path = tmp_path / "v3.csv"
    path.write_text(v3.get_all_columns_string() + "\n"
                    "LlamaForCausalLM,2560,10240,32,32,32,full,A100,1,4,512,111,5000,1\n"
                    "LlamaForCausalLM,2560,10240,32,32,32,lora,A100,1,4,512,222,6000,1\n"
                    "LlamaForCausalLM,2560,10240,32,32,32,full,H100,1,4,512,333,7000,1\n")
    job = _job("granite-3b-code-base", 1, 4, 512)
    for gpu, method, tps, line in (("A100", "full", 111, 2), ("A100", "lora", 222, 3),
                                   ("H100", "full", 333, 4)):
        got = learned_answer(_query("granite-3b-code-base", 1, 4, 512, gpu, method), job,
                             data_path=str(path), model_path=None, engine=engine)
        assert got.tokens_per_second == tps and got.tps_basis.endswith(f"row {line}")
    miss = learned_answer(_query("granite-3b-code-base", 1, 4, 512, "L40S"), job,
                          data_path=str(path), model_path=None, engine=engine)
    assert miss.memory_bytes is None and miss.tokens_per_second is None
    assert any(f"has 3 rows; a model is trained from {MIN_TRAINING_ROWS}" in w
               for w in miss.warnings)


def test_unusable_paths_are_warnings_never_errors(tmp_path, engine):
    job = _job("granite-7b-base", 2, 4, 512)
    q = _query("ibm-granite/granite-7b-base", 2, 4, 512)
    missing = tmp_path / "missing.csv"
    got = learned_answer(q, job, data_path=str(missing), model_path=None, engine=engine)
    assert got.memory_bytes is None and got.tokens_per_second is None
    assert str(missing) in got.warnings[0] and "v1: model_name" in got.warnings[0]

    got = learned_answer(q, job, data_path=test_data1, model_path=None, engine=engine)
    assert "none of fm-training-estimator's data formats" in got.warnings[0]
    assert "v3: model_arch" in got.warnings[0]

    got = learned_answer(_query("no-such-org/no-such-model-xyz", 4, 16, 1024), job,
                         data_path=test_data3, model_path=None, engine=engine)
    assert got.memory_bytes is None
    assert "format v2" in got.warnings[0] and "no-such-org/no-such-model-xyz" in got.warnings[0]

    got = learned_answer(q, job, data_path=None, model_path=str(tmp_path / "no-model"),
                         engine=engine)
    assert got.memory_bytes is None and "no such file or directory" in got.warnings[0]


def test_the_originals_model_zip_is_a_warning_and_the_lookup_still_answers(tmp_path, engine):
    model = tmp_path / "model.zip"
    with zipfile.ZipFile(model, "w") as z:
        z.writestr("model_type", "xgboost")
        z.writestr("model.json", "{}")
    q = _query("ibm-granite/granite-7b-base", 2, 4, 512)
    job = _job("granite-7b-base", 2, 4, 512)
    got = learned_answer(q, job, data_path=test_data2, model_path=str(model), engine=engine)
    assert got.tokens_per_second == 500 and got.warnings == ()   # the lookup answered both
    got = learned_answer(dict(q, seq_len=4096), job, data_path=test_data2,
                         model_path=str(model), engine=engine)
    assert got.memory_bytes is None
    assert any(w.startswith(f"fmest cannot read fm-training-estimator's xgboost model {model}")
               for w in got.warnings)


# -- a model trained on the user's CSV ----------------------------------------------------------
#: Measured = theory x this factor per model, so the learned correction depends on the model.
FACTORS = {"llama-3.2-1b": (1.3, 0.7), "granite-3b-code-base": (1.1, 0.9),
           "qwen2.5-0.5b": (1.2, 0.8)}
SHAPES = ((1, 1, 512), (1, 2, 1024), (2, 2, 512), (2, 4, 1024))


@pytest.fixture(scope="module")
def synthetic_csv(tmp_path_factory, engine):
    """12 v1 rows (3 presets x 4 shapes, more than MIN_TRAINING_ROWS) whose memory and tokens/s
    are fmest's theory times :data:`FACTORS`."""
    header = "model_name,number_gpus,batch_size,seq_len,tokens_per_second,memory,memory_act"
    rows = []
    for model, (mem_factor, tps_factor) in FACTORS.items():
        for gpus, batch, seq in SHAPES:
            report = engine.estimate(_job(model, gpus, batch, seq),
                                     quantities=("memory", "time", "tokens"))
            rows.append([model, gpus, batch, seq,
                         round(report.tokens.tokens_per_second * tps_factor, 3),
                         int(report.memory.total_bytes * mem_factor), 0])
    assert len(rows) >= MIN_TRAINING_ROWS
    path = tmp_path_factory.mktemp("synthetic") / "runs.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header.split(","))
        writer.writerows(rows)
    return str(path)


def test_a_miss_is_answered_by_a_model_trained_on_the_csv_and_cached(synthetic_csv, engine,
                                                                    tmp_path):
    pytest.importorskip("lightgbm")
    job = _job("llama-3.2-1b", 2, 1, 1024)              # not a row: a lookup miss
    theory = engine.estimate(job, quantities=("memory", "time", "tokens"))
    got = learned_answer(_query("llama-3.2-1b", 2, 1, 1024), job, data_path=synthetic_csv,
                         model_path=None, engine=engine)
    assert got.warnings == ()
    assert got.memory_basis == f"model trained on {synthetic_csv} (12 rows)"
    assert got.tps_basis == got.memory_basis
    # between theory and the measured factor's answer (the correction is learned, gated)
    assert theory.memory.total_bytes <= got.memory_bytes <= 1.31 * theory.memory.total_bytes
    assert 0.69 * theory.tokens.tokens_per_second <= got.tokens_per_second \
        <= theory.tokens.tokens_per_second
    cached = list((tmp_path / "cache" / "fmte-learned").iterdir())
    import hashlib

    assert [p.name for p in cached] == [hashlib.sha256(Path(synthetic_csv).read_bytes())
                                        .hexdigest()]
    stamp = (cached[0] / "metadata.json").stat().st_mtime_ns
    again = learned_answer(_query("llama-3.2-1b", 2, 1, 1024), job, data_path=synthetic_csv,
                           model_path=None, engine=engine)
    assert again == got and (cached[0] / "metadata.json").stat().st_mtime_ns == stamp

    # the cached bundle is an fmest bundle: as model_path it answers the same
    direct = learned_answer(_query("llama-3.2-1b", 2, 1, 1024), job, data_path=None,
                            model_path=str(cached[0]), engine=engine)
    assert direct.memory_bytes == got.memory_bytes
    assert direct.memory_basis == f"fmest learned bundle {cached[0]} (12 rows)"

    # a 70B job lies outside what the model saw: theory answers, and the warning says why
    big = _job("meta-llama/Llama-2-70b-hf", 2, 1, 1024)
    far = learned_answer(_query("meta-llama/Llama-2-70b-hf", 2, 1, 1024), big,
                         data_path=synthetic_csv, model_path=None, engine=engine)
    assert far.memory_bytes is None
    assert any("outside the training domain" in w for w in far.warnings), far.warnings


def test_a_broken_cached_model_is_trained_again(synthetic_csv, engine, tmp_path):
    pytest.importorskip("lightgbm")
    job = _job("llama-3.2-1b", 2, 1, 1024)
    q = _query("llama-3.2-1b", 2, 1, 1024)
    first = learned_answer(q, job, data_path=synthetic_csv, model_path=None, engine=engine)
    (bundle,) = (tmp_path / "cache" / "fmte-learned").iterdir()
    (bundle / "memory.p50.txt").write_text("tree\n")         # damaged after training
    again = learned_answer(q, job, data_path=synthetic_csv, model_path=None, engine=engine)
    assert again == first
    assert (bundle / "memory.p50.txt").read_text() != "tree\n"  # the model was written anew


def test_an_unwritable_cache_trains_for_the_answer_only(synthetic_csv, engine, tmp_path,
                                                        monkeypatch):
    pytest.importorskip("lightgbm")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("FMEST_CACHE_DIR", str(blocker))      # a file where a folder must be
    got = learned_answer(_query("llama-3.2-1b", 2, 1, 1024), _job("llama-3.2-1b", 2, 1, 1024),
                         data_path=synthetic_csv, model_path=None, engine=engine)
    assert got.memory_basis.startswith("model trained on")
    assert any("cannot be written" in w and "not kept" in w for w in got.warnings)
    assert blocker.read_text() == ""


def test_without_lightgbm_the_answer_is_a_warning(synthetic_csv, engine, monkeypatch):
    monkeypatch.setitem(sys.modules, "lightgbm", None)       # import lightgbm fails
    got = learned_answer(_query("llama-3.2-1b", 2, 1, 1024), _job("llama-3.2-1b", 2, 1, 1024),
                         data_path=synthetic_csv, model_path=None, engine=engine)
    assert got.memory_bytes is None and got.tokens_per_second is None
    assert any("lightgbm" in w and "cannot train a model" in w for w in got.warnings)


def test_without_the_learned_plugin_the_answer_is_a_warning(synthetic_csv):
    from fmest.testing import new_engine

    bare = new_engine()                                       # no learned_lgbm: no learn command
    got = learned_answer(_query("llama-3.2-1b", 2, 1, 1024), _job("llama-3.2-1b", 2, 1, 1024),
                         data_path=synthetic_csv, model_path=None, engine=bare)
    assert got.memory_bytes is None
    assert any("no installed plugin trains models" in w for w in got.warnings)
