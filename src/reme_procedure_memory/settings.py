"""Typed settings of ``components.procedure_memory.<name>``; bad values fail at start naming the key."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import SettingsError
from .schema import VIEW_NAMES, View

DEFAULT_TOKENIZER_SOURCE = "Qwen/Qwen3.8-27B"
MIB = 1024 * 1024


class TokenLimits(BaseModel):
    """Token budgets. Targets are what the agent is told; ceilings add the internal slack."""

    model_config = ConfigDict(extra="forbid")

    segment: int = Field(98_304, gt=0)
    summary: int = Field(8_192, gt=0)
    description: int = Field(128, gt=0)
    when_to_use: int = Field(512, gt=0)
    content: int = Field(2_048, gt=0)
    context: int = Field(262_144, gt=0)
    reserve: int = Field(4_096, ge=0)
    slack: float = Field(0.1, ge=0, le=1)

    @model_validator(mode="after")
    def _reserve_below_context(self) -> "TokenLimits":
        if self.reserve >= self.context:
            raise ValueError("reserve must be smaller than context")
        return self

    def ceiling(self, target: int) -> int:
        """Acceptance ceiling of a target: floor(target * (1 + slack)), e.g. 128 -> 140, 8192 -> 9011."""
        return math.floor(target * (1 + self.slack) + 1e-9)

    def field_target(self, field: str) -> int:
        """Target of an experience field named as in the file (``when-to-use``) or as an argument."""
        return {
            "description": self.description,
            "when-to-use": self.when_to_use,
            "when_to_use": self.when_to_use,
            "content": self.content,
        }[field]


class ExtractionSettings(BaseModel):
    """Technical execution budgets of the extraction agent; they may change between resumes."""

    model_config = ConfigDict(extra="forbid")

    max_iters: int = Field(30, gt=0)  # SDK iteration budget per segment attempt (AgentScope max_iters, CC max_turns)
    summary_repair_attempts: int = Field(2, ge=0)
    # the extractor's own advice (steps no trajectory shows, after ADVICE_MARKER): off unless asked for
    advice: bool = False
    # an update may take an experience's three text fields to at most this many tokens (or leave them no larger than
    # they were); past it the agent rewrites the experience as one general procedure (0: no bound)
    grow_limit: int = Field(250, ge=0)
    # how far past grow_limit (the target the agent is told) an update is still accepted: models overshoot a stated
    # size by 10-20%, and each refusal costs a request that re-sends the segment
    grow_slack: float = Field(0.2, ge=0, le=1)

    def grow_ceiling(self) -> int:
        """The acceptance ceiling of ``grow_limit``: floor(grow_limit * (1 + grow_slack)), e.g. 250 -> 300."""
        return math.floor(self.grow_limit * (1 + self.grow_slack) + 1e-9)


class HistorySettings(BaseModel):
    """The journal's retention bound, applied by ``HistoryRetention`` (``operations/retention.py``,
    docs/decisions.md#journal-retention)."""

    model_config = ConfigDict(extra="forbid")

    keep_versions: int = Field(20, ge=1)  # per experience: the records of its newest versions are kept


class SearchSettings(BaseModel):
    """What ``procedure_search`` delivers by default (search/relevance.py, docs/guide.md "Relevance")."""

    model_config = ConfigDict(extra="forbid")

    # the relevance floor of a service caller's search (an argument overrides it); calibrated on the embedded MiniLM
    # (benchmarks/relevance.py): another embedding model needs its own
    min_relevance: float = Field(0.2, ge=0, le=1)
    # a service caller's search leaves out of each result the rules fewer trajectories showed (their "(N
    # trajectories)"; an argument overrides it); 0 or 1: every rule, the experiences whole
    min_evidence: int = Field(0, ge=0)


class ProcedureSettings(BaseModel):
    """Everything configurable under ``components.procedure_memory.<name>``."""

    model_config = ConfigDict(extra="forbid")

    procedure_dir: str = "procedures"
    trajectory_subdir: str = "trajectories"
    max_file_bytes: int = Field(20 * MIB, gt=0)
    tokenizer_source: str = DEFAULT_TOKENIZER_SOURCE
    embedding_store: str = "procedure"
    views: dict[str, str] = Field(
        default_factory=lambda: {
            View.WHEN_TO_USE.value: "procedure_when_to_use",
            View.WHEN_TO_USE_CONTENT.value: "procedure_when_to_use_content",
        },
    )
    vector_weight: float = Field(0.7, ge=0, le=1)
    embedding_timeout_seconds: float = Field(30.0, gt=0)  # writes, start, reindex, pending retries
    search_embedding_timeout_seconds: float = Field(5.0, gt=0)  # the query vector of a search
    pending_retry_seconds: float = Field(30.0, ge=0)
    vector_cooldown_seconds: float = Field(10.0, ge=0)
    read_max_chars: int = Field(65_536, gt=0)
    read_max_tokens: int = Field(8_192, gt=0)
    # trajectory excerpts served to callers outside an extraction run mask the credentials in them (credentials.py)
    mask_trajectory_secrets: bool = True
    token_limits: TokenLimits = Field(default_factory=TokenLimits)
    extraction: ExtractionSettings = Field(default_factory=ExtractionSettings)
    history: HistorySettings = Field(default_factory=HistorySettings)
    search: SearchSettings = Field(default_factory=SearchSettings)

    @field_validator("procedure_dir", "trajectory_subdir")
    @classmethod
    def _relative_directory(cls, value: str) -> str:
        parts = value.strip("/").split("/")
        if not value or value.startswith("/") or "\\" in value or any(p in ("", ".", "..") for p in parts):
            raise ValueError("must be a relative directory without '.' or '..' parts")
        return value.strip("/")

    @field_validator("tokenizer_source")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name a Hugging Face tokenizer or a local tokenizer file/directory")
        return value.strip()

    @field_validator("views")
    @classmethod
    def _both_views(cls, value: dict[str, str]) -> dict[str, str]:
        if set(value) != set(VIEW_NAMES) or not all(value.values()):
            raise ValueError("must name a file store for exactly when_to_use and when_to_use_content")
        return value


def load_settings(raw: dict, *, prefix: str) -> ProcedureSettings:
    """Validate raw config; raise SettingsError (a ValueError) whose message names each bad key under ``prefix``."""
    try:
        return ProcedureSettings.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{prefix}.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
        raise SettingsError(
            f"Invalid procedure-memory settings: {problems}. Fix the value (CLI key=value, config file or "
            "plugin.yaml) and start again.",
        ) from None
