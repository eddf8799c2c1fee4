"""Settings: defaults, TOML file, PRAG__ environment overrides, clear errors."""

import pytest

from prag_models.config.settings import ConfigError, load_settings


def test_defaults_use_packaged_models(tmp_path):
    s = load_settings(environ={}, home=str(tmp_path))
    assert s.embedder.model == "sentence-transformers/all-MiniLM-L6-v2"
    assert s.generator.backend == "llama_cpp"
    assert s.duckdb_path == tmp_path.resolve() / "prag.duckdb"
    assert s.mlflow_uri.startswith("sqlite:///")


def test_toml_then_env_override(tmp_path):
    cfg = tmp_path / "prag.toml"
    cfg.write_text('[embedder]\nmodel = "BAAI/bge-base-en-v1.5"\n[retrieval]\nk = 5\n[data]\ntasks = ["LaMP-2"]\n')
    s = load_settings(cfg, environ={"PRAG__RETRIEVAL__K": "2", "PRAG__DATA__TASKS": "LaMP-2,LaMP-3"})
    assert s.embedder.model == "BAAI/bge-base-en-v1.5"
    assert s.retrieval.k == 2
    assert s.data.tasks == ("LaMP-2", "LaMP-3")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PRAG__RETRIEVAL__K": "three"}, "settings.retrieval.k: expected an integer"),
        ({"PRAG__RETRIEVAL__TOPK": "3"}, "unknown setting(s) ['topk']"),
        ({"PRAG__DATA__TASKS": "LaMP-6"}, "unknown task(s) ['LaMP-6']"),
        ({"PRAG__GENERATOR__BACKEND": "gpt"}, "generator.backend unknown"),
        ({"PRAG__DATA__SOURCE": "lamp"}, "needs data.lamp_dir"),
        ({"PRAG__DATA__MALFORMED": "skip"}, "settings.data.malformed: Input should be 'stop' or 'set_aside'"),
        ({"PRAG__CFRAG__RERANKER_POOLING": "max"}, "settings.cfrag.reranker_pooling"),
        ({"PRAG__CFRAG__RERANKER_ENCODER_LR": "-1e-5"}, "settings.cfrag.reranker_encoder_lr"),
        ({"PRAG__CFRAG__RETRIEVER_SCALAR_LR": "fast"}, "settings.cfrag.retriever_scalar_lr"),
        ({"PRAG__CFRAG__RERANKER_USER_RANK": "-2"}, "settings.cfrag.reranker_user_rank"),
        ({"PRAG__RUN__LLM_BUDGET_S": "soon"}, "settings.run.llm_budget_s"),
        ({"PRAG__CFRAG__USER_VECTORS": "median"}, "settings.cfrag.user_vectors"),
        ({"PRAG__CFRAG__RETRIEVER_PROJECTION": "diag"}, "settings.cfrag.retriever_projection"),
        ({"PRAG__CFRAG__RETRIEVER_METRIC_LR": "-0.1"}, "settings.cfrag.retriever_metric_lr"),
        ({"PRAG__CFRAG__FEEDBACK_MAX_USERS": "0"}, "settings.cfrag.feedback_max_users"),
        ({"PRAG__CFRAG__TRAIN_LR": "0"}, "settings.cfrag.train_lr"),
        ({"PRAG__CFRAG__RERANKER_PERSONAL_TERM": "sometimes"}, "settings.cfrag.reranker_personal_term"),
    ],
)
def test_bad_values_are_named(env, message):
    with pytest.raises(ConfigError) as err:
        load_settings(environ=env)
    assert message in str(err.value)


def test_malformed_records_stop_by_default_and_can_be_set_aside() -> None:
    assert load_settings(environ={}).data.malformed == "stop"
    assert load_settings(environ={"PRAG__DATA__MALFORMED": "set_aside"}).data.malformed == "set_aside"


def test_missing_or_broken_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml", environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[retrieval\nk = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(bad, environ={})


def test_base_url_must_be_http() -> None:
    from prag_models.config.settings import ConfigError, load_settings

    assert load_settings(environ={"PRAG__GENERATOR__BASE_URL": "https://h:8000/v1"}).generator.base_url
    with pytest.raises(ConfigError, match="generator.base_url must be an http"):
        load_settings(environ={"PRAG__GENERATOR__BASE_URL": "file:///etc/passwd"})


def test_models_resource_keeps_at_most_two_generators_and_closes_the_evicted() -> None:
    """The process-wide generator cache closes what it evicts, and everything at exit."""
    from prag_assets.resources import models as resources
    from prag_models.config.settings import GeneratorSettings

    closed: list[str] = []
    resources.close_generators()
    loaded = [resources._generator(GeneratorSettings(backend="fake", seed=i)) for i in range(3)]
    for i, gen in enumerate(loaded):
        gen.close = lambda i=i: closed.append(i)  # type: ignore[method-assign]
    assert resources._generator(GeneratorSettings(backend="fake", seed=2)) is loaded[2]
    assert len(resources._GENERATORS) == 2
    resources.close_generators()
    assert sorted(closed) == [1, 2] and not resources._GENERATORS


def test_method_names_are_checked_against_the_method_registry() -> None:
    """A typo in retrieval.methods fails at load, naming it; the registry is exactly what the stages produce."""
    from prag_models.config.settings import LAMP_METHODS
    from prag_models.generation.answers import ZERO_SHOT
    from prag_models.methods.cfrag.variants import CFRAG_METHODS
    from prag_models.stages.pbr_lamp import LAMP_METHODS as PBR_LAMP_METHODS
    from prag_models.stages.retrieval import BASELINE_METHODS, CLUSTERRAG_METHODS

    with pytest.raises(ConfigError, match=r"retrieval.methods: unknown method\(s\) \['clusterag_hybrid'\]"):
        load_settings(environ={"PRAG__RETRIEVAL__METHODS": "dense,clusterag_hybrid"})
    assert load_settings(environ={"PRAG__RETRIEVAL__METHODS": '["dense", "cfrag"]'}).retrieval.methods == (
        "dense", "cfrag")  # fmt: skip
    produced = {ZERO_SHOT, *BASELINE_METHODS, *CLUSTERRAG_METHODS, *CFRAG_METHODS, *PBR_LAMP_METHODS}
    assert set(LAMP_METHODS) == produced


def test_settings_are_pydantic_and_hashable() -> None:
    """Sections are frozen pydantic models (usable as cache keys); a wrong type in a section names its field."""
    from prag_models.config.settings import GeneratorSettings

    assert hash(GeneratorSettings(backend="fake")) == hash(GeneratorSettings(backend="fake"))
    with pytest.raises(ConfigError, match=r"settings.cfrag.label_calibration|settings.generator.label_scoring"):
        load_settings(environ={"PRAG__GENERATOR__LABEL_SCORING": "maybe"})


def test_run_overrides_from_the_launchpad_are_settings_too(tmp_path) -> None:
    """The settings resource's `overrides` (Dagster run config) win over file and environment and are validated."""
    from prag_assets.resources.settings import PragSettingsResource

    cfg = tmp_path / "prag.toml"
    cfg.write_text(f'home = "{tmp_path}"\n[retrieval]\nk = 3\n')
    settings = PragSettingsResource(config_file=str(cfg), overrides={"retrieval": {"k": 5}}).get()
    assert settings.retrieval.k == 5 and settings.home_path == tmp_path.resolve()
    with pytest.raises(ConfigError, match=r"settings.retrieval: unknown setting\(s\) \['kk'\]"):
        PragSettingsResource(config_file=str(cfg), overrides={"retrieval": {"kk": 5}}).get()
