"""One typed settings object for prag: data source, method parameters, model ids and the home folder.

Built on pydantic-settings. Values come from (later wins): the defaults below, a TOML file (``$PRAG_CONFIG`` or
``<home>/prag.toml``), environment variables ``PRAG__<SECTION>__<FIELD>`` (e.g.
``PRAG__EMBEDDER__MODEL=BAAI/bge-base-en-v1.5``; lists as ``a,b`` or JSON) and keyword overrides. ``PRAG_HOME`` sets
the folder that holds all state (DuckDB file, Dagster storage, MLflow store) unless the config file names its own
``home``. Unknown keys and wrong types are errors that name the setting (``ConfigError``).
"""

from __future__ import annotations

import os
import tomllib
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from prag_models.config.cfrag import CfragSettings as CfragSettings  # re-exported: one import path for settings
from prag_models.config.compute import ComputeSettings as ComputeSettings  # re-exported as well
from prag_models.config.item_cf import ItemCfSettings as ItemCfSettings  # re-exported as well
from prag_models.config.pbr import PbrSettings as PbrSettings  # re-exported as well
from prag_models.config.privacy import PrivacySettings as PrivacySettings  # re-exported as well
from prag_models.config.run import RunSettings as RunSettings  # re-exported as well
from prag_models.config.sources import ConfigError as ConfigError  # re-exported: callers catch config.ConfigError
from prag_models.config.sources import Csv as Csv  # re-exported as well
from prag_models.config.sources import Section as Section
from prag_models.config.sources import load_context, settings_sources, validation_message
from prag_models.config.utility import UtilitySettings as UtilitySettings  # re-exported as well

#: Every LaMP retrieval/generation method prag implements (the method registry that retrieval.methods is checked
#: against; tests assert it equals what the stages produce).
LAMP_METHODS: tuple[str, ...] = (
    "zero_shot", "random", "recency", "bm25", "dense", "dense_global", "oracle_community",
    "clusterrag_user_only", "clusterrag_collaborative", "clusterrag_hybrid", "clusterrag_two_stage",
    "clusterrag_community", "cfrag", "cfrag_no_user_retrieval", "cfrag_mean_user_emb", "cfrag_no_retriever_tuning",
    "cfrag_no_sud", "cfrag_no_reranker_tuning", "cfrag_no_reranker_eu", "pbr", "pbr_anchor_only", "item_cf",
)  # fmt: skip


PROJECT_ROOT = Path(__file__).resolve().parents[2]
ALL_TASKS: tuple[str, ...] = ("LaMP-1", "LaMP-2", "LaMP-3", "LaMP-4", "LaMP-5", "LaMP-7")
#: data.demo_family values (prag_models/data/demo_world.py FAMILIES; kept here so settings import no data code)
DEMO_FAMILIES: tuple[str, ...] = ("communities", "split_taste", "no_community", "alike_communities", "tagging")
#: clustering.user_similarity values (prag_models/users/taste.py USER_SIMILARITIES)
USER_SIMILARITIES: tuple[str, ...] = ("content", "taste", "blend")
#: generator.llama_cpp_weights values (prag_models/llm/gguf_weights.py)
LLAMA_CPP_WEIGHTS: tuple[str, ...] = ("auto", "as_is", "bf16", "f16", "q8_0", "q4_0")


class DataSettings(Section):
    """Where LaMP data comes from and which part of it is used."""

    source: str = "demo"  # demo | lamp
    lamp_dir: str = ""  # folder holding LaMP_X[_time]/{train,dev}/ files when source = lamp
    split_kind: str = "time"  # time | original (LaMP folder naming: LaMP_1_time or LaMP_1)
    tasks: Csv = ALL_TASKS
    max_eval_samples: int = 0  # 0 = all dev samples
    demo_users: int = 144  # users per task in the embedded demo
    demo_communities: int = 6
    demo_dev_samples: int = 96  # dev samples per task in the embedded demo: every one is retrieved and evaluated
    demo_seed: int = 7
    # Which kind of world the demo plants (docs/demo_data.md "Families"): communities (communities decide labels) |
    # split_taste (users who write about the same things judge them differently) | no_community (own history only) |
    # alike_communities (communities write apart but label alike: collaboration cannot help) | tagging (LaMP-2 items
    # recur across users; the label depends on the item and, for some items, on the user's taste)
    demo_family: str = "communities"
    # Dev samples per task the LLM evaluation (generations, PBR's P-PRF) uses: the first N of a fixed seeded order of
    # the sample ids, so a larger N only adds samples (0 = all); `prag materialize` lowers it to fit run.llm_budget_s.
    # Every dev sample is still retrieved and scored by the LLM-free retrieval evaluation.
    llm_eval_samples: int = 8
    # The verdict's LLM column says confirms / not shown / contradicts only from this many paired samples on (below:
    # "too few samples to tell"); a "keep the baseline" gain below verdict_min_gain (in the metric's units) is noted
    # as too small to matter (prag_models/evaluation/verdict.py).
    verdict_min_llm_samples: int = Field(30, ge=1)
    verdict_min_gain: float = Field(0.01, ge=0.0)
    real_data_dir: str = ""  # folder with personabench/ and longmemeval/ (e.g. ../shared/data)
    # A profile date in no accepted format (prag_models/data/dates.py): "error" fails the load naming the file,
    # record and field; "keep" keeps the document undated (sorted last). Undated documents are counted in metadata.
    undated: str = "error"
    # A malformed record in the LaMP files (a wrong type, a label outside the task's set, a missing field): "stop"
    # fails the load naming the file, record and field; "set_aside" leaves it out and goes on, each such record a row
    # of table set_aside_records (a malformed question or gold drops that sample, a malformed profile document only
    # that document); lamp_samples and `prag report` count them per task. Flaws of a whole file always stop.
    malformed: Literal["stop", "set_aside"] = "stop"


class EmbedderSettings(Section):
    """Frozen text encoder for documents and queries (HF id or local path)."""

    model: str = "sentence-transformers/all-MiniLM-L6-v2"
    batch_size: int = 64
    device: str = "cpu"
    max_seq_length: int = 256
    # How the model runs (prag_models/text/embedder.py; benchmarks/embedder_speed.py): torch fp32 | torch_int8 (torch
    # dynamic int8 Linear layers) | onnx (ONNX Runtime fp32) | onnx_int8 (ONNX Runtime, dynamic int8 per-channel
    # MatMuls, the feed-forward output projections kept fp32; exported once from the model folder, cached under
    # ~/.cache/prag/onnx). "auto" on a CPU with onnxruntime and onnx installed = onnx_int8 with AVX2 but no usable
    # AVX-512 (a laptop, where embedding is a large share of the run), onnx elsewhere (on AVX-512 the int8 vectors
    # re-grouped the demo's users enough to move one verdict gain outside its fp32 interval); torch on a GPU. Every
    # backend but torch embeds one text per run (a vector is its text's alone, to the bit: docs/privacy.md).
    # Measured 2026-12-05 (benchmarks/embedder_speed.py, demo documents, ratios to torch fp32 in the same run, 2 free
    # AVX-512 cores): onnx 1.21x, onnx_int8 1.86-1.99x (1.36x on the AVX2 proxy, 1 core); int8 cosine to fp32 min
    # 0.989 / mean 0.996 over 6,754 demo texts, dense NDCG@3 -0.009 +- 0.009 and label-hit@3 -0.012 +- 0.013 (paired,
    # n = 576 / 288); onnx within 2e-7 of torch. torch_int8 is 2.3-2.4x but moves vectors to cosine 0.83.
    # Cached embeddings are keyed by the backend (model#backend; torch fp32 keeps the bare model name).
    backend: Literal["auto", "torch", "torch_int8", "onnx", "onnx_int8"] = "auto"


class GeneratorSettings(Section):
    """The LLM used for generation and feedback labels."""

    backend: str = "llama_cpp"  # llama_cpp | transformers | openai | vllm
    model: str = "HuggingFaceTB/SmolLM2-135M-Instruct"  # HF id, local path, .gguf file, or served model name
    base_url: str = ""  # OpenAI-compatible endpoint for backend = openai, e.g. http://127.0.0.1:8000/v1
    base_urls: Csv = ()  # a pool of such servers (with base_url, if set): requests spread, failures retried elsewhere
    api_key_env: str = "OPENAI_API_KEY"
    max_new_tokens: int = 32  # generation tasks (LaMP-4/5/7)
    label_max_new_tokens: int = 8  # classification and rating tasks (LaMP-1/2/3) when they are generated
    # LaMP-1/2/3: answer with the label of highest log-likelihood instead of generating and parsing (backends that
    # expose log-probabilities: llama_cpp, transformers, vllm; openai always generates)
    label_scoring: bool = True
    # Label scoring: subtract each label's log-likelihood for a content-free input ("N/A") of the same prompt form
    # (contextual calibration, Zhao et al. 2021), so that a model's fixed label preference does not decide alone
    label_calibration: bool = True
    n_ctx: int = 2048
    # CPU threads of the generator: 0 = the cores this process may run on (two threads on one core spin-wait for
    # each other and run 3-4x slower than one, docs/measurements.md "LLM speed")
    threads: int = Field(0, ge=0)
    # llama_cpp: run the GGUF as shipped ("as_is") or converted once to bf16 | f16 | q8_0 | q4_0 (cached under
    # ~/.cache/prag/gguf); "auto" = bf16 when the llama.cpp build has AVX512_BF16 kernels, else q8_0 with AVX2 (1.79x
    # the shipped Q4_1 on one AVX2 core, 1.41x with 2 threads; q4_0 is faster but moves the utility by 0.64 nats per
    # token), else as shipped (prag_models/llm/gguf_weights.py)
    llama_cpp_weights: str = "auto"
    flash_attention: bool = True  # llama_cpp: flash attention (about 10 % faster prompt evaluation on CPU)
    batch_size: int = 8
    # llama_cpp: start every batch from an empty KV cache, so that a batch's log-likelihoods do not depend on the
    # prompt evaluated before it (reusing a shared prefix moves them by up to 0.07) and equal on any engine or shard.
    # Costs one evaluation of the shared prefix per batch: 2 % of the demo's main job (1,037 s against 1,019 s
    # without), up to 1.8x on batches of prompts that share a long prefix (false = keep the cache across batches).
    fresh_batches: bool = True
    seed: int = 0
    timeout_s: float = 120.0


class PromptSettings(Section):
    """LaMP prompt budgeting (docs/methods.md §1)."""

    max_prompt_tokens: int = 512  # L_max
    query_share: float = 0.6  # gamma


class RetrievalSettings(Section):
    """Retrieval over profiles: documents per prompt and the baselines' seed."""

    k: int = 3
    seed: int = 0
    # dense_global at scale (docs/explanation/scale.md): exact search up to ann_above documents, else an IVF index
    # (sqrt(n) lists, 8-bit codes, candidates re-scored exactly) probing ann_nprobe lists per query; its recall@k
    # against exact search is measured on ann_recall_sample queries and recorded in the run's metadata.
    ann_above: int = 500_000
    ann_nprobe: int = 32
    ann_recall_sample: int = 200
    # Methods the LLM evaluation generates for (every retrieval method is also scored without an LLM by
    # lamp_retrieval_evaluation on every dev sample, the CFRAG ablations of §2.8 included; add them here to generate
    # for them too; pbr here also turns on PBR's P-PRF generations). The default keeps the rows the seeds' LLM claims
    # and the verdict need; recency, bm25, clusterrag_hybrid, clusterrag_two_stage and pbr_anchor_only are left out to
    # keep the demo's main job within 15 minutes on 2 cores (with 8 samples a task their LLM rows decided nothing).
    methods: Csv = (
        "zero_shot",
        "random",
        "dense",
        "dense_global",
        "clusterrag_user_only",
        "clusterrag_collaborative",
        "clusterrag_community",
        "cfrag",
        # PBR query side over the user's own profile (docs/methods.md §4); see prag_assets/assets/pbr_lamp.py
        "pbr",
    )


class TuningSettings(Section):
    """Per-task tuning of the retrieval knobs on the task's train samples (docs/methods.md §3.9)."""

    enabled: bool = True
    # Wall-clock seconds per task shared by ClusterRAG's two tuned methods; CFRAG's search gets the same share
    # (budget_s / 2) on its own.
    budget_s: float = 30.0
    max_trials: int = 40  # per method; the configured default is always trial 0
    max_samples: int = 300  # train samples scored per trial (a seeded subset above this)
    seed: int = 0
    # Where no label sees a task (LaMP-4/5/7 and LaMP-1 on real files), trials are scored by the LLM's utility of
    # their documents (docs/methods.md §6.7) on this many train samples. 24 samples, not 8: a trial's mean utility on
    # 8 samples has a standard error (~0.5 nats) larger than the knobs' effects, so the best of a search was mostly
    # noise (docs/measurements.md, tasks without labels).
    utility_samples: int = 24
    # Trials per method there (0: keep the defaults there): a count, not seconds, so that the knobs chosen do not
    # depend on the machine's load. 16 is what 30 s per method bought on the demo's LaMP-4/5 files on 2 cores. It was
    # off while dense_global's top k could be one text repeated: tuned, clusterrag_community then shipped on 5 of 7
    # label-free alike_communities worlds by escaping the repeats; with every ranking showing a text once, 0 of 75
    # worlds without collaboration ship tuned (docs/measurements.md).
    utility_trials: int = 16
    # An upper limit on that search's seconds per task (0: keep the defaults there); statistics say when it bound.
    utility_budget_s: float = 240.0


class ClusteringSettings(Section):
    """User clustering and intra-cluster neighbours (docs/methods.md §3)."""

    algorithm: str = "hdbscan"  # hdbscan | kmeans
    min_cluster_size: int = 2
    min_samples: int = 0  # 0 = HDBSCAN default (= min_cluster_size)
    kmeans_k: int = 0  # 0 = as many clusters as HDBSCAN would find, else this many
    similar_users: int = 3  # top-k similar users inside the cluster
    # B: at a 100,000-document pool B = 4 keeps recall@10 of flat search at 0.97 scoring 1.8 % of the documents;
    # B = 2 gave 0.93 (benchmarks/two_stage.py)
    two_stage_top_clusters: int = 4
    two_stage_min_cluster_size: int = 2
    # Community-wide mode (clusterrag_community): the documents of the user's whole cluster, or of its top-N most
    # similar users when community_top_n > 0, ranked by cos(q, d) + community_user_weight · cos(z_u, z_author).
    community_top_n: int = 0
    community_user_weight: float = 0.5
    # What "similar users" means for the clustering, the neighbours, the community ranking and CFRAG's user retrieval
    # (prag_models/users/taste.py, docs/methods.md §3.8): content (mean document embeddings) | taste (how users label
    # similar items) | blend (cos = (1 - taste_weight) content + taste_weight taste)
    user_similarity: str = "content"
    taste_weight: float = 0.5
    taste_item_clusters: int = 0  # item clusters that match documents across users (0 = round(sqrt(documents / 2)))
    taste_shrinkage: float = 1.0  # λ: a user's mean label in an item cluster with n documents counts n / (n + λ)
    seed: int = 0
    # Scale (docs/explanation/scale.md; measured by benchmarks/scale.py): above reduce_above users HDBSCAN runs on a
    # PCA to reduce_dims dimensions; the ARI against the full-dimension clustering on quality_sample users is recorded.
    reduce_dims: int = 32
    reduce_above: int = 2000
    quality_sample: int = 1000  # 0 = do not measure
    hdbscan_algorithm: str = "best"  # HDBSCAN: best (boruvka_kdtree up to 60 dims) | prims_kdtree | boruvka_balltree …
    n_jobs: int = 2  # HDBSCAN core-distance workers


#: Where `mlflow ui` listens by default (scripts/mlflow_ui.sh starts it there for a home's sqlite store).
MLFLOW_UI_DEFAULT = "http://127.0.0.1:5000"


class MlflowSettings(Section):
    """MLflow tracking and registry; empty URI = sqlite store under the prag home."""

    tracking_uri: str = ""
    experiment: str = "prag"
    # Where the MLflow UI runs: the assets link runs and versions to its pages (in the classic model-training view).
    # Empty = the tracking URI when it is a server (http/https), else `mlflow ui`'s own address (127.0.0.1:5000).
    ui_url: str = ""


class Settings(BaseSettings):
    """All of prag's configuration."""

    model_config = SettingsConfigDict(
        env_prefix="PRAG__", env_nested_delimiter="__", case_sensitive=False, frozen=True, extra="forbid",
        nested_model_default_partial_update=True,
    )  # fmt: skip

    home: str = ""
    data: DataSettings = Field(default_factory=DataSettings)
    embedder: EmbedderSettings = Field(default_factory=EmbedderSettings)
    generator: GeneratorSettings = Field(default_factory=GeneratorSettings)
    prompt: PromptSettings = Field(default_factory=PromptSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    clustering: ClusteringSettings = Field(default_factory=ClusteringSettings)
    item_cf: ItemCfSettings = Field(default_factory=ItemCfSettings)
    tuning: TuningSettings = Field(default_factory=TuningSettings)
    mlflow: MlflowSettings = Field(default_factory=MlflowSettings)
    cfrag: CfragSettings = Field(default_factory=CfragSettings)
    pbr: PbrSettings = Field(default_factory=PbrSettings)
    privacy: PrivacySettings = Field(default_factory=PrivacySettings)
    compute: ComputeSettings = Field(default_factory=ComputeSettings)
    run: RunSettings = Field(default_factory=RunSettings)
    utility: UtilitySettings = Field(default_factory=UtilitySettings)

    @property
    def home_path(self) -> Path:
        """The folder holding all state."""
        return Path(self.home or PROJECT_ROOT / ".prag").expanduser().resolve()

    @property
    def duckdb_path(self) -> Path:
        """The DuckDB file with every table of the graph."""
        return self.home_path / "prag.duckdb"

    @property
    def mlflow_uri(self) -> str:
        """Tracking URI: configured, else a sqlite store under the home."""
        return self.mlflow.tracking_uri or f"sqlite:///{self.home_path / 'mlflow.db'}"

    @property
    def mlflow_ui_url(self) -> str:
        """The MLflow UI the links open: mlflow.ui_url, else a server tracking URI, else `mlflow ui`'s address."""
        if self.mlflow.ui_url:
            return self.mlflow.ui_url.rstrip("/")
        if self.mlflow.tracking_uri.startswith(("http://", "https://")):
            return self.mlflow.tracking_uri.rstrip("/")
        return MLFLOW_UI_DEFAULT

    @property
    def mlflow_artifacts_path(self) -> Path:
        """Local artifact folder used with the default tracking store."""
        return self.home_path / "mlflow-artifacts"

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, **_ignored):  # noqa: ANN001, ANN003, ANN206
        """Keyword overrides, then the environment given to load_settings, then the TOML file (later sources lose)."""
        return settings_sources(settings_cls, init_settings)


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    environ: typing.Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Load settings from defaults, a TOML file, PRAG__* environment variables and keyword overrides."""
    env = os.environ if environ is None else environ
    overrides = {k: v for k, v in overrides.items() if v is not None}
    home = overrides.get("home") or env.get("PRAG_HOME", "")
    path = config_file or env.get("PRAG_CONFIG")
    if not path:
        candidate = Path(home or PROJECT_ROOT / ".prag") / "prag.toml"
        path = candidate if candidate.exists() else None
    values: dict[str, Any] = {}
    if path:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file {p} does not exist")
        try:
            values = tomllib.loads(p.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {p} is not valid TOML: {exc}") from None
    # home: keyword > the config file's `home` > PRAG_HOME > <project>/.prag
    if overrides.get("home") or not values.get("home"):
        overrides["home"] = str(overrides.get("home") or home or "")
    try:
        with load_context(env, values):
            settings = Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(validation_message(exc)) from None
    _validate(settings)
    return settings


def _validate(s: Settings) -> None:
    """Reject values that would fail later in a confusing way."""
    unknown = set(s.data.tasks) - set(ALL_TASKS)
    if unknown:
        raise ConfigError(f"data.tasks: unknown task(s) {sorted(unknown)}; known: {list(ALL_TASKS)}")
    if s.data.source not in {"demo", "lamp"}:
        raise ConfigError(f"data.source must be 'demo' or 'lamp', got {s.data.source!r}")
    if s.data.source == "lamp" and not s.data.lamp_dir:
        raise ConfigError("data.source = 'lamp' needs data.lamp_dir (the folder with the LaMP files)")
    if s.data.demo_family not in DEMO_FAMILIES:
        raise ConfigError(f"data.demo_family must be one of {list(DEMO_FAMILIES)}, got {s.data.demo_family!r}")
    if s.data.undated not in ("error", "keep"):
        raise ConfigError(f"data.undated must be 'error' or 'keep', got {s.data.undated!r}")
    if s.generator.backend not in {"llama_cpp", "transformers", "openai", "vllm", "fake"}:
        raise ConfigError(f"generator.backend unknown: {s.generator.backend!r}")
    if s.generator.llama_cpp_weights not in LLAMA_CPP_WEIGHTS:
        weights = s.generator.llama_cpp_weights
        raise ConfigError(f"generator.llama_cpp_weights must be one of {list(LLAMA_CPP_WEIGHTS)}, got {weights!r}")
    if s.clustering.algorithm not in {"hdbscan", "kmeans"}:
        raise ConfigError(f"clustering.algorithm must be 'hdbscan' or 'kmeans', got {s.clustering.algorithm!r}")
    if s.clustering.user_similarity not in USER_SIMILARITIES:
        known = list(USER_SIMILARITIES)
        raise ConfigError(f"clustering.user_similarity must be one of {known}, got {s.clustering.user_similarity!r}")
    if not 0.0 <= s.clustering.taste_weight <= 1.0 or s.clustering.taste_shrinkage < 0:
        raise ConfigError("clustering.taste_weight must lie in [0, 1] and clustering.taste_shrinkage be >= 0")
    if s.retrieval.k < 1 or s.clustering.similar_users < 1:
        raise ConfigError("retrieval.k and clustering.similar_users must be at least 1")
    for name, url in [("base_url", s.generator.base_url), *(("base_urls", u) for u in s.generator.base_urls)]:
        if url and not url.startswith(("http://", "https://")):
            raise ConfigError(f"generator.{name} must be an http(s) URL, got {url!r}")
    if s.compute.actors < 1 or s.compute.user_shards < 1 or s.compute.cpus_per_actor <= 0:
        raise ConfigError("compute.actors and compute.user_shards must be at least 1, compute.cpus_per_actor above 0")
    unknown_methods = set(s.retrieval.methods) - set(LAMP_METHODS)
    if unknown_methods:
        known = list(LAMP_METHODS)
        raise ConfigError(f"retrieval.methods: unknown method(s) {sorted(unknown_methods)}; known: {known}")
    if not 0.0 <= s.cfrag.validation_share < 1.0:
        raise ConfigError("cfrag.validation_share must lie in [0, 1)")
    if not 0.0 < s.prompt.query_share < 1.0:
        raise ConfigError("prompt.query_share (gamma) must lie in (0, 1)")
    if not 0.0 <= s.privacy.consent_cost_share < 1.0:
        raise ConfigError("privacy.consent_cost_share must lie in [0, 1)")
