from cursor_byok.transport.cursor.proto import agent_pb2 as _agent_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Http2Config(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HTTP2_CONFIG_UNSPECIFIED: _ClassVar[Http2Config]
    HTTP2_CONFIG_FORCE_ALL_DISABLED: _ClassVar[Http2Config]
    HTTP2_CONFIG_FORCE_ALL_ENABLED: _ClassVar[Http2Config]
    HTTP2_CONFIG_FORCE_BIDI_DISABLED: _ClassVar[Http2Config]
    HTTP2_CONFIG_FORCE_BIDI_ENABLED: _ClassVar[Http2Config]

class PrivacyMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIVACY_MODE_UNSPECIFIED: _ClassVar[PrivacyMode]
    PRIVACY_MODE_NO_STORAGE: _ClassVar[PrivacyMode]
    PRIVACY_MODE_NO_TRAINING: _ClassVar[PrivacyMode]
    PRIVACY_MODE_USAGE_DATA_TRAINING_ALLOWED: _ClassVar[PrivacyMode]
    PRIVACY_MODE_USAGE_CODEBASE_TRAINING_ALLOWED: _ClassVar[PrivacyMode]
HTTP2_CONFIG_UNSPECIFIED: Http2Config
HTTP2_CONFIG_FORCE_ALL_DISABLED: Http2Config
HTTP2_CONFIG_FORCE_ALL_ENABLED: Http2Config
HTTP2_CONFIG_FORCE_BIDI_DISABLED: Http2Config
HTTP2_CONFIG_FORCE_BIDI_ENABLED: Http2Config
PRIVACY_MODE_UNSPECIFIED: PrivacyMode
PRIVACY_MODE_NO_STORAGE: PrivacyMode
PRIVACY_MODE_NO_TRAINING: PrivacyMode
PRIVACY_MODE_USAGE_DATA_TRAINING_ALLOWED: PrivacyMode
PRIVACY_MODE_USAGE_CODEBASE_TRAINING_ALLOWED: PrivacyMode

class BidiRequestId(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class BidiAppendRequest(_message.Message):
    __slots__ = ("data", "request_id", "append_seqno", "data_binary")
    DATA_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    APPEND_SEQNO_FIELD_NUMBER: _ClassVar[int]
    DATA_BINARY_FIELD_NUMBER: _ClassVar[int]
    data: str
    request_id: BidiRequestId
    append_seqno: int
    data_binary: bytes
    def __init__(self, data: _Optional[str] = ..., request_id: _Optional[_Union[BidiRequestId, _Mapping]] = ..., append_seqno: _Optional[int] = ..., data_binary: _Optional[bytes] = ...) -> None: ...

class BidiAppendResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BidiPollRequest(_message.Message):
    __slots__ = ("request_id", "start_request")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    START_REQUEST_FIELD_NUMBER: _ClassVar[int]
    request_id: BidiRequestId
    start_request: bool
    def __init__(self, request_id: _Optional[_Union[BidiRequestId, _Mapping]] = ..., start_request: _Optional[bool] = ...) -> None: ...

class BidiPollResponse(_message.Message):
    __slots__ = ("seqno", "data", "eof")
    SEQNO_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    EOF_FIELD_NUMBER: _ClassVar[int]
    seqno: int
    data: str
    eof: bool
    def __init__(self, seqno: _Optional[int] = ..., data: _Optional[str] = ..., eof: _Optional[bool] = ...) -> None: ...

class ErrorDetails(_message.Message):
    __slots__ = ("error", "details", "is_expected")
    class Error(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ERROR_UNSPECIFIED: _ClassVar[ErrorDetails.Error]
        ERROR_BAD_API_KEY: _ClassVar[ErrorDetails.Error]
        ERROR_NOT_LOGGED_IN: _ClassVar[ErrorDetails.Error]
        ERROR_INVALID_AUTH_ID: _ClassVar[ErrorDetails.Error]
        ERROR_NOT_HIGH_ENOUGH_PERMISSIONS: _ClassVar[ErrorDetails.Error]
        ERROR_BAD_MODEL_NAME: _ClassVar[ErrorDetails.Error]
        ERROR_USER_NOT_FOUND: _ClassVar[ErrorDetails.Error]
        ERROR_FREE_USER_RATE_LIMIT_EXCEEDED: _ClassVar[ErrorDetails.Error]
        ERROR_PRO_USER_RATE_LIMIT_EXCEEDED: _ClassVar[ErrorDetails.Error]
        ERROR_FREE_USER_USAGE_LIMIT: _ClassVar[ErrorDetails.Error]
        ERROR_PRO_USER_USAGE_LIMIT: _ClassVar[ErrorDetails.Error]
        ERROR_AUTH_TOKEN_NOT_FOUND: _ClassVar[ErrorDetails.Error]
        ERROR_AUTH_TOKEN_EXPIRED: _ClassVar[ErrorDetails.Error]
        ERROR_OPENAI: _ClassVar[ErrorDetails.Error]
        ERROR_OPENAI_RATE_LIMIT_EXCEEDED: _ClassVar[ErrorDetails.Error]
        ERROR_AGENT_REQUIRES_LOGIN: _ClassVar[ErrorDetails.Error]
        ERROR_MAX_TOKENS: _ClassVar[ErrorDetails.Error]
        ERROR_USER_ABORTED_REQUEST: _ClassVar[ErrorDetails.Error]
        ERROR_GENERIC_RATE_LIMIT_EXCEEDED: _ClassVar[ErrorDetails.Error]
        ERROR_PRO_USER_ONLY: _ClassVar[ErrorDetails.Error]
        ERROR_TIMEOUT: _ClassVar[ErrorDetails.Error]
        ERROR_GPT_4_VISION_PREVIEW_RATE_LIMIT: _ClassVar[ErrorDetails.Error]
        ERROR_CUSTOM_MESSAGE: _ClassVar[ErrorDetails.Error]
        ERROR_OUTDATED_CLIENT: _ClassVar[ErrorDetails.Error]
        ERROR_CLAUDE_IMAGE_TOO_LARGE: _ClassVar[ErrorDetails.Error]
        ERROR_FILE_NOT_FOUND: _ClassVar[ErrorDetails.Error]
        ERROR_API_KEY_RATE_LIMIT: _ClassVar[ErrorDetails.Error]
        ERROR_DEBOUNCED: _ClassVar[ErrorDetails.Error]
        ERROR_BAD_REQUEST: _ClassVar[ErrorDetails.Error]
        ERROR_REPOSITORY_SERVICE_REPOSITORY_IS_NOT_INITIALIZED: _ClassVar[ErrorDetails.Error]
        ERROR_UNAUTHORIZED: _ClassVar[ErrorDetails.Error]
        ERROR_NOT_FOUND: _ClassVar[ErrorDetails.Error]
        ERROR_DEPRECATED: _ClassVar[ErrorDetails.Error]
        ERROR_RESOURCE_EXHAUSTED: _ClassVar[ErrorDetails.Error]
        ERROR_BAD_USER_API_KEY: _ClassVar[ErrorDetails.Error]
        ERROR_CONVERSATION_TOO_LONG: _ClassVar[ErrorDetails.Error]
        ERROR_USAGE_PRICING_REQUIRED: _ClassVar[ErrorDetails.Error]
        ERROR_USAGE_PRICING_REQUIRED_CHANGEABLE: _ClassVar[ErrorDetails.Error]
        ERROR_GITHUB_NO_USER_CREDENTIALS: _ClassVar[ErrorDetails.Error]
        ERROR_GITHUB_USER_NO_ACCESS: _ClassVar[ErrorDetails.Error]
        ERROR_GITHUB_APP_NO_ACCESS: _ClassVar[ErrorDetails.Error]
        ERROR_GITHUB_MULTIPLE_OWNERS: _ClassVar[ErrorDetails.Error]
        ERROR_RATE_LIMITED: _ClassVar[ErrorDetails.Error]
        ERROR_RATE_LIMITED_CHANGEABLE: _ClassVar[ErrorDetails.Error]
        ERROR_CUSTOM: _ClassVar[ErrorDetails.Error]
        ERROR_HOOKS_BLOCKED: _ClassVar[ErrorDetails.Error]
        ERROR_SUSPICIOUS_USAGE_BLOCKED: _ClassVar[ErrorDetails.Error]
        ERROR_EXTENSION_HOST_TIMEOUT: _ClassVar[ErrorDetails.Error]
        ERROR_NETWORK_ERROR: _ClassVar[ErrorDetails.Error]
        ERROR_PROVIDER_ERROR: _ClassVar[ErrorDetails.Error]
        ERROR_MODEL_BLOCKED: _ClassVar[ErrorDetails.Error]
        ERROR_INTERNAL: _ClassVar[ErrorDetails.Error]
        ERROR_MAX_MODE_REQUIRED: _ClassVar[ErrorDetails.Error]
        ERROR_MODEL_NO_LONGER_SUPPORTED: _ClassVar[ErrorDetails.Error]
        ERROR_PRICING_WARNING: _ClassVar[ErrorDetails.Error]
        ERROR_SLOW_POOL: _ClassVar[ErrorDetails.Error]
        ERROR_UNSUPPORTED_REGION: _ClassVar[ErrorDetails.Error]
    ERROR_UNSPECIFIED: ErrorDetails.Error
    ERROR_BAD_API_KEY: ErrorDetails.Error
    ERROR_NOT_LOGGED_IN: ErrorDetails.Error
    ERROR_INVALID_AUTH_ID: ErrorDetails.Error
    ERROR_NOT_HIGH_ENOUGH_PERMISSIONS: ErrorDetails.Error
    ERROR_BAD_MODEL_NAME: ErrorDetails.Error
    ERROR_USER_NOT_FOUND: ErrorDetails.Error
    ERROR_FREE_USER_RATE_LIMIT_EXCEEDED: ErrorDetails.Error
    ERROR_PRO_USER_RATE_LIMIT_EXCEEDED: ErrorDetails.Error
    ERROR_FREE_USER_USAGE_LIMIT: ErrorDetails.Error
    ERROR_PRO_USER_USAGE_LIMIT: ErrorDetails.Error
    ERROR_AUTH_TOKEN_NOT_FOUND: ErrorDetails.Error
    ERROR_AUTH_TOKEN_EXPIRED: ErrorDetails.Error
    ERROR_OPENAI: ErrorDetails.Error
    ERROR_OPENAI_RATE_LIMIT_EXCEEDED: ErrorDetails.Error
    ERROR_AGENT_REQUIRES_LOGIN: ErrorDetails.Error
    ERROR_MAX_TOKENS: ErrorDetails.Error
    ERROR_USER_ABORTED_REQUEST: ErrorDetails.Error
    ERROR_GENERIC_RATE_LIMIT_EXCEEDED: ErrorDetails.Error
    ERROR_PRO_USER_ONLY: ErrorDetails.Error
    ERROR_TIMEOUT: ErrorDetails.Error
    ERROR_GPT_4_VISION_PREVIEW_RATE_LIMIT: ErrorDetails.Error
    ERROR_CUSTOM_MESSAGE: ErrorDetails.Error
    ERROR_OUTDATED_CLIENT: ErrorDetails.Error
    ERROR_CLAUDE_IMAGE_TOO_LARGE: ErrorDetails.Error
    ERROR_FILE_NOT_FOUND: ErrorDetails.Error
    ERROR_API_KEY_RATE_LIMIT: ErrorDetails.Error
    ERROR_DEBOUNCED: ErrorDetails.Error
    ERROR_BAD_REQUEST: ErrorDetails.Error
    ERROR_REPOSITORY_SERVICE_REPOSITORY_IS_NOT_INITIALIZED: ErrorDetails.Error
    ERROR_UNAUTHORIZED: ErrorDetails.Error
    ERROR_NOT_FOUND: ErrorDetails.Error
    ERROR_DEPRECATED: ErrorDetails.Error
    ERROR_RESOURCE_EXHAUSTED: ErrorDetails.Error
    ERROR_BAD_USER_API_KEY: ErrorDetails.Error
    ERROR_CONVERSATION_TOO_LONG: ErrorDetails.Error
    ERROR_USAGE_PRICING_REQUIRED: ErrorDetails.Error
    ERROR_USAGE_PRICING_REQUIRED_CHANGEABLE: ErrorDetails.Error
    ERROR_GITHUB_NO_USER_CREDENTIALS: ErrorDetails.Error
    ERROR_GITHUB_USER_NO_ACCESS: ErrorDetails.Error
    ERROR_GITHUB_APP_NO_ACCESS: ErrorDetails.Error
    ERROR_GITHUB_MULTIPLE_OWNERS: ErrorDetails.Error
    ERROR_RATE_LIMITED: ErrorDetails.Error
    ERROR_RATE_LIMITED_CHANGEABLE: ErrorDetails.Error
    ERROR_CUSTOM: ErrorDetails.Error
    ERROR_HOOKS_BLOCKED: ErrorDetails.Error
    ERROR_SUSPICIOUS_USAGE_BLOCKED: ErrorDetails.Error
    ERROR_EXTENSION_HOST_TIMEOUT: ErrorDetails.Error
    ERROR_NETWORK_ERROR: ErrorDetails.Error
    ERROR_PROVIDER_ERROR: ErrorDetails.Error
    ERROR_MODEL_BLOCKED: ErrorDetails.Error
    ERROR_INTERNAL: ErrorDetails.Error
    ERROR_MAX_MODE_REQUIRED: ErrorDetails.Error
    ERROR_MODEL_NO_LONGER_SUPPORTED: ErrorDetails.Error
    ERROR_PRICING_WARNING: ErrorDetails.Error
    ERROR_SLOW_POOL: ErrorDetails.Error
    ERROR_UNSUPPORTED_REGION: ErrorDetails.Error
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    IS_EXPECTED_FIELD_NUMBER: _ClassVar[int]
    error: ErrorDetails.Error
    details: CustomErrorDetails
    is_expected: bool
    def __init__(self, error: _Optional[_Union[ErrorDetails.Error, str]] = ..., details: _Optional[_Union[CustomErrorDetails, _Mapping]] = ..., is_expected: _Optional[bool] = ...) -> None: ...

class CustomErrorDetails(_message.Message):
    __slots__ = ("title", "detail", "allow_command_links_potentially_unsafe_please_only_use_for_handwritten_trusted_markdown", "is_retryable", "show_request_id", "should_show_immediate_error", "additional_info")
    class AdditionalInfoEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TITLE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    ALLOW_COMMAND_LINKS_POTENTIALLY_UNSAFE_PLEASE_ONLY_USE_FOR_HANDWRITTEN_TRUSTED_MARKDOWN_FIELD_NUMBER: _ClassVar[int]
    IS_RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    SHOW_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SHOULD_SHOW_IMMEDIATE_ERROR_FIELD_NUMBER: _ClassVar[int]
    ADDITIONAL_INFO_FIELD_NUMBER: _ClassVar[int]
    title: str
    detail: str
    allow_command_links_potentially_unsafe_please_only_use_for_handwritten_trusted_markdown: bool
    is_retryable: bool
    show_request_id: bool
    should_show_immediate_error: bool
    additional_info: _containers.ScalarMap[str, str]
    def __init__(self, title: _Optional[str] = ..., detail: _Optional[str] = ..., allow_command_links_potentially_unsafe_please_only_use_for_handwritten_trusted_markdown: _Optional[bool] = ..., is_retryable: _Optional[bool] = ..., show_request_id: _Optional[bool] = ..., should_show_immediate_error: _Optional[bool] = ..., additional_info: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GetServerConfigRequest(_message.Message):
    __slots__ = ("telem_enabled",)
    TELEM_ENABLED_FIELD_NUMBER: _ClassVar[int]
    telem_enabled: bool
    def __init__(self, telem_enabled: _Optional[bool] = ...) -> None: ...

class IndexingConfig(_message.Message):
    __slots__ = ("max_concurrent_uploads", "absolute_max_number_files", "max_file_retries", "sync_concurrency", "auto_indexing_max_num_files", "indexing_period_seconds", "repo42_auth_token", "incremental", "default_user_path_encryption_key", "default_team_path_encryption_key", "multi_root_indexing_enabled")
    MAX_CONCURRENT_UPLOADS_FIELD_NUMBER: _ClassVar[int]
    ABSOLUTE_MAX_NUMBER_FILES_FIELD_NUMBER: _ClassVar[int]
    MAX_FILE_RETRIES_FIELD_NUMBER: _ClassVar[int]
    SYNC_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    AUTO_INDEXING_MAX_NUM_FILES_FIELD_NUMBER: _ClassVar[int]
    INDEXING_PERIOD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REPO42_AUTH_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCREMENTAL_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_USER_PATH_ENCRYPTION_KEY_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TEAM_PATH_ENCRYPTION_KEY_FIELD_NUMBER: _ClassVar[int]
    MULTI_ROOT_INDEXING_ENABLED_FIELD_NUMBER: _ClassVar[int]
    max_concurrent_uploads: int
    absolute_max_number_files: int
    max_file_retries: int
    sync_concurrency: int
    auto_indexing_max_num_files: int
    indexing_period_seconds: int
    repo42_auth_token: str
    incremental: bool
    default_user_path_encryption_key: str
    default_team_path_encryption_key: str
    multi_root_indexing_enabled: bool
    def __init__(self, max_concurrent_uploads: _Optional[int] = ..., absolute_max_number_files: _Optional[int] = ..., max_file_retries: _Optional[int] = ..., sync_concurrency: _Optional[int] = ..., auto_indexing_max_num_files: _Optional[int] = ..., indexing_period_seconds: _Optional[int] = ..., repo42_auth_token: _Optional[str] = ..., incremental: _Optional[bool] = ..., default_user_path_encryption_key: _Optional[str] = ..., default_team_path_encryption_key: _Optional[str] = ..., multi_root_indexing_enabled: _Optional[bool] = ...) -> None: ...

class AgentUrlConfig(_message.Message):
    __slots__ = ("agent_url", "agentn_url")
    AGENT_URL_FIELD_NUMBER: _ClassVar[int]
    AGENTN_URL_FIELD_NUMBER: _ClassVar[int]
    agent_url: str
    agentn_url: str
    def __init__(self, agent_url: _Optional[str] = ..., agentn_url: _Optional[str] = ...) -> None: ...

class GetServerConfigResponse(_message.Message):
    __slots__ = ("indexing_config", "config_version", "http2_config", "use_nlb_for_nal", "agent_url_config", "cli_sandbox_default_enabled")
    INDEXING_CONFIG_FIELD_NUMBER: _ClassVar[int]
    CONFIG_VERSION_FIELD_NUMBER: _ClassVar[int]
    HTTP2_CONFIG_FIELD_NUMBER: _ClassVar[int]
    USE_NLB_FOR_NAL_FIELD_NUMBER: _ClassVar[int]
    AGENT_URL_CONFIG_FIELD_NUMBER: _ClassVar[int]
    CLI_SANDBOX_DEFAULT_ENABLED_FIELD_NUMBER: _ClassVar[int]
    indexing_config: IndexingConfig
    config_version: str
    http2_config: Http2Config
    use_nlb_for_nal: bool
    agent_url_config: AgentUrlConfig
    cli_sandbox_default_enabled: bool
    def __init__(self, indexing_config: _Optional[_Union[IndexingConfig, _Mapping]] = ..., config_version: _Optional[str] = ..., http2_config: _Optional[_Union[Http2Config, str]] = ..., use_nlb_for_nal: _Optional[bool] = ..., agent_url_config: _Optional[_Union[AgentUrlConfig, _Mapping]] = ..., cli_sandbox_default_enabled: _Optional[bool] = ...) -> None: ...

class GetMeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetMeResponse(_message.Message):
    __slots__ = ("auth_id", "user_id", "email", "first_name", "last_name", "workos_id", "team_id", "created_at", "is_enterprise_user", "team_name")
    AUTH_ID_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    EMAIL_FIELD_NUMBER: _ClassVar[int]
    FIRST_NAME_FIELD_NUMBER: _ClassVar[int]
    LAST_NAME_FIELD_NUMBER: _ClassVar[int]
    WORKOS_ID_FIELD_NUMBER: _ClassVar[int]
    TEAM_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    IS_ENTERPRISE_USER_FIELD_NUMBER: _ClassVar[int]
    TEAM_NAME_FIELD_NUMBER: _ClassVar[int]
    auth_id: str
    user_id: int
    email: str
    first_name: str
    last_name: str
    workos_id: str
    team_id: int
    created_at: str
    is_enterprise_user: bool
    team_name: str
    def __init__(self, auth_id: _Optional[str] = ..., user_id: _Optional[int] = ..., email: _Optional[str] = ..., first_name: _Optional[str] = ..., last_name: _Optional[str] = ..., workos_id: _Optional[str] = ..., team_id: _Optional[int] = ..., created_at: _Optional[str] = ..., is_enterprise_user: _Optional[bool] = ..., team_name: _Optional[str] = ...) -> None: ...

class GetUserPrivacyModeRequest(_message.Message):
    __slots__ = ("inferred_privacy_mode", "team_id")
    INFERRED_PRIVACY_MODE_FIELD_NUMBER: _ClassVar[int]
    TEAM_ID_FIELD_NUMBER: _ClassVar[int]
    inferred_privacy_mode: PrivacyMode
    team_id: int
    def __init__(self, inferred_privacy_mode: _Optional[_Union[PrivacyMode, str]] = ..., team_id: _Optional[int] = ...) -> None: ...

class GetUserPrivacyModeResponse(_message.Message):
    __slots__ = ("privacy_mode", "hours_remaining_in_grace_period", "is_enforced_by_team", "is_not_migrated_to_server_source_of_truth", "partner_data_share", "has_acknowledged_grace_period_disclaimer")
    PRIVACY_MODE_FIELD_NUMBER: _ClassVar[int]
    HOURS_REMAINING_IN_GRACE_PERIOD_FIELD_NUMBER: _ClassVar[int]
    IS_ENFORCED_BY_TEAM_FIELD_NUMBER: _ClassVar[int]
    IS_NOT_MIGRATED_TO_SERVER_SOURCE_OF_TRUTH_FIELD_NUMBER: _ClassVar[int]
    PARTNER_DATA_SHARE_FIELD_NUMBER: _ClassVar[int]
    HAS_ACKNOWLEDGED_GRACE_PERIOD_DISCLAIMER_FIELD_NUMBER: _ClassVar[int]
    privacy_mode: PrivacyMode
    hours_remaining_in_grace_period: int
    is_enforced_by_team: bool
    is_not_migrated_to_server_source_of_truth: bool
    partner_data_share: bool
    has_acknowledged_grace_period_disclaimer: bool
    def __init__(self, privacy_mode: _Optional[_Union[PrivacyMode, str]] = ..., hours_remaining_in_grace_period: _Optional[int] = ..., is_enforced_by_team: _Optional[bool] = ..., is_not_migrated_to_server_source_of_truth: _Optional[bool] = ..., partner_data_share: _Optional[bool] = ..., has_acknowledged_grace_period_disclaimer: _Optional[bool] = ...) -> None: ...

class ServerTimeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServerTimeResponse(_message.Message):
    __slots__ = ("receive_timestamp", "transmit_timestamp")
    RECEIVE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TRANSMIT_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    receive_timestamp: float
    transmit_timestamp: float
    def __init__(self, receive_timestamp: _Optional[float] = ..., transmit_timestamp: _Optional[float] = ...) -> None: ...

class GetDefaultModelRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetDefaultModelResponse(_message.Message):
    __slots__ = ("model", "thinking_model", "max_mode")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    THINKING_MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_MODE_FIELD_NUMBER: _ClassVar[int]
    model: str
    thinking_model: str
    max_mode: bool
    def __init__(self, model: _Optional[str] = ..., thinking_model: _Optional[str] = ..., max_mode: _Optional[bool] = ...) -> None: ...

class GetDefaultModelNudgeDataRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetDefaultModelNudgeDataResponse(_message.Message):
    __slots__ = ("nudge_date", "should_default_switch_on_new_chat", "models_with_no_default_switch")
    NUDGE_DATE_FIELD_NUMBER: _ClassVar[int]
    SHOULD_DEFAULT_SWITCH_ON_NEW_CHAT_FIELD_NUMBER: _ClassVar[int]
    MODELS_WITH_NO_DEFAULT_SWITCH_FIELD_NUMBER: _ClassVar[int]
    nudge_date: str
    should_default_switch_on_new_chat: bool
    models_with_no_default_switch: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, nudge_date: _Optional[str] = ..., should_default_switch_on_new_chat: _Optional[bool] = ..., models_with_no_default_switch: _Optional[_Iterable[str]] = ...) -> None: ...

class AvailableModelsRequest(_message.Message):
    __slots__ = ("is_nightly", "include_long_context_models", "exclude_max_named_models", "additional_model_names", "use_model_parameters", "include_hidden_models", "do_not_use_markdown", "variants_will_be_shown_in_exploded_list", "for_automations")
    IS_NIGHTLY_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_LONG_CONTEXT_MODELS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_MAX_NAMED_MODELS_FIELD_NUMBER: _ClassVar[int]
    ADDITIONAL_MODEL_NAMES_FIELD_NUMBER: _ClassVar[int]
    USE_MODEL_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_HIDDEN_MODELS_FIELD_NUMBER: _ClassVar[int]
    DO_NOT_USE_MARKDOWN_FIELD_NUMBER: _ClassVar[int]
    VARIANTS_WILL_BE_SHOWN_IN_EXPLODED_LIST_FIELD_NUMBER: _ClassVar[int]
    FOR_AUTOMATIONS_FIELD_NUMBER: _ClassVar[int]
    is_nightly: bool
    include_long_context_models: bool
    exclude_max_named_models: bool
    additional_model_names: _containers.RepeatedScalarFieldContainer[str]
    use_model_parameters: bool
    include_hidden_models: bool
    do_not_use_markdown: bool
    variants_will_be_shown_in_exploded_list: bool
    for_automations: bool
    def __init__(self, is_nightly: _Optional[bool] = ..., include_long_context_models: _Optional[bool] = ..., exclude_max_named_models: _Optional[bool] = ..., additional_model_names: _Optional[_Iterable[str]] = ..., use_model_parameters: _Optional[bool] = ..., include_hidden_models: _Optional[bool] = ..., do_not_use_markdown: _Optional[bool] = ..., variants_will_be_shown_in_exploded_list: _Optional[bool] = ..., for_automations: _Optional[bool] = ...) -> None: ...

class ModelParameterDefinition(_message.Message):
    __slots__ = ("id", "name", "markdown_tooltip", "parameter_type", "is_cycleable_by_hotkey")
    class BooleanParameterDefinition(_message.Message):
        __slots__ = ("values",)
        class BooleanParameterValue(_message.Message):
            __slots__ = ("value", "display_name", "increases_model_cost")
            VALUE_FIELD_NUMBER: _ClassVar[int]
            DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
            INCREASES_MODEL_COST_FIELD_NUMBER: _ClassVar[int]
            value: str
            display_name: str
            increases_model_cost: bool
            def __init__(self, value: _Optional[str] = ..., display_name: _Optional[str] = ..., increases_model_cost: _Optional[bool] = ...) -> None: ...
        VALUES_FIELD_NUMBER: _ClassVar[int]
        values: _containers.RepeatedCompositeFieldContainer[ModelParameterDefinition.BooleanParameterDefinition.BooleanParameterValue]
        def __init__(self, values: _Optional[_Iterable[_Union[ModelParameterDefinition.BooleanParameterDefinition.BooleanParameterValue, _Mapping]]] = ...) -> None: ...
    class EnumParameterDefinition(_message.Message):
        __slots__ = ("values",)
        class EnumParameterValue(_message.Message):
            __slots__ = ("value", "display_name", "increases_model_cost")
            VALUE_FIELD_NUMBER: _ClassVar[int]
            DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
            INCREASES_MODEL_COST_FIELD_NUMBER: _ClassVar[int]
            value: str
            display_name: str
            increases_model_cost: bool
            def __init__(self, value: _Optional[str] = ..., display_name: _Optional[str] = ..., increases_model_cost: _Optional[bool] = ...) -> None: ...
        VALUES_FIELD_NUMBER: _ClassVar[int]
        values: _containers.RepeatedCompositeFieldContainer[ModelParameterDefinition.EnumParameterDefinition.EnumParameterValue]
        def __init__(self, values: _Optional[_Iterable[_Union[ModelParameterDefinition.EnumParameterDefinition.EnumParameterValue, _Mapping]]] = ...) -> None: ...
    class ModelParameterType(_message.Message):
        __slots__ = ("boolean_parameter", "enum_parameter")
        BOOLEAN_PARAMETER_FIELD_NUMBER: _ClassVar[int]
        ENUM_PARAMETER_FIELD_NUMBER: _ClassVar[int]
        boolean_parameter: ModelParameterDefinition.BooleanParameterDefinition
        enum_parameter: ModelParameterDefinition.EnumParameterDefinition
        def __init__(self, boolean_parameter: _Optional[_Union[ModelParameterDefinition.BooleanParameterDefinition, _Mapping]] = ..., enum_parameter: _Optional[_Union[ModelParameterDefinition.EnumParameterDefinition, _Mapping]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MARKDOWN_TOOLTIP_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_TYPE_FIELD_NUMBER: _ClassVar[int]
    IS_CYCLEABLE_BY_HOTKEY_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    markdown_tooltip: str
    parameter_type: ModelParameterDefinition.ModelParameterType
    is_cycleable_by_hotkey: bool
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., markdown_tooltip: _Optional[str] = ..., parameter_type: _Optional[_Union[ModelParameterDefinition.ModelParameterType, _Mapping]] = ..., is_cycleable_by_hotkey: _Optional[bool] = ...) -> None: ...

class AvailableModelsResponse(_message.Message):
    __slots__ = ("model_names", "models", "composer_model_config", "cmd_k_model_config", "background_composer_model_config", "plan_execution_model_config", "spec_model_config", "deep_search_model_config", "quick_agent_model_config", "use_model_parameters", "subagent_model_configs")
    class DegradationStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEGRADATION_STATUS_UNSPECIFIED: _ClassVar[AvailableModelsResponse.DegradationStatus]
        DEGRADATION_STATUS_DEGRADED: _ClassVar[AvailableModelsResponse.DegradationStatus]
        DEGRADATION_STATUS_DISABLED: _ClassVar[AvailableModelsResponse.DegradationStatus]
    DEGRADATION_STATUS_UNSPECIFIED: AvailableModelsResponse.DegradationStatus
    DEGRADATION_STATUS_DEGRADED: AvailableModelsResponse.DegradationStatus
    DEGRADATION_STATUS_DISABLED: AvailableModelsResponse.DegradationStatus
    class ModelVariantConfig(_message.Message):
        __slots__ = ("parameter_values", "display_name", "is_max_mode", "is_default_max_config", "is_default_non_max_config", "tagline", "display_name_outside_picker", "variant_string_representation", "legacy_slug")
        PARAMETER_VALUES_FIELD_NUMBER: _ClassVar[int]
        DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
        IS_MAX_MODE_FIELD_NUMBER: _ClassVar[int]
        IS_DEFAULT_MAX_CONFIG_FIELD_NUMBER: _ClassVar[int]
        IS_DEFAULT_NON_MAX_CONFIG_FIELD_NUMBER: _ClassVar[int]
        TAGLINE_FIELD_NUMBER: _ClassVar[int]
        DISPLAY_NAME_OUTSIDE_PICKER_FIELD_NUMBER: _ClassVar[int]
        VARIANT_STRING_REPRESENTATION_FIELD_NUMBER: _ClassVar[int]
        LEGACY_SLUG_FIELD_NUMBER: _ClassVar[int]
        parameter_values: _containers.RepeatedCompositeFieldContainer[_agent_pb2.RequestedModel.ModelParameterValue]
        display_name: str
        is_max_mode: bool
        is_default_max_config: bool
        is_default_non_max_config: bool
        tagline: str
        display_name_outside_picker: str
        variant_string_representation: str
        legacy_slug: str
        def __init__(self, parameter_values: _Optional[_Iterable[_Union[_agent_pb2.RequestedModel.ModelParameterValue, _Mapping]]] = ..., display_name: _Optional[str] = ..., is_max_mode: _Optional[bool] = ..., is_default_max_config: _Optional[bool] = ..., is_default_non_max_config: _Optional[bool] = ..., tagline: _Optional[str] = ..., display_name_outside_picker: _Optional[str] = ..., variant_string_representation: _Optional[str] = ..., legacy_slug: _Optional[str] = ...) -> None: ...
    class FeatureModelConfig(_message.Message):
        __slots__ = ("default_model", "fallback_models", "best_of_n_default_models")
        DEFAULT_MODEL_FIELD_NUMBER: _ClassVar[int]
        FALLBACK_MODELS_FIELD_NUMBER: _ClassVar[int]
        BEST_OF_N_DEFAULT_MODELS_FIELD_NUMBER: _ClassVar[int]
        default_model: str
        fallback_models: _containers.RepeatedScalarFieldContainer[str]
        best_of_n_default_models: _containers.RepeatedScalarFieldContainer[str]
        def __init__(self, default_model: _Optional[str] = ..., fallback_models: _Optional[_Iterable[str]] = ..., best_of_n_default_models: _Optional[_Iterable[str]] = ...) -> None: ...
    class AvailableModel(_message.Message):
        __slots__ = ("name", "default_on", "is_long_context_only", "is_chat_only", "supports_agent", "degradation_status", "price", "supports_thinking", "supports_images", "supports_auto_context", "auto_context_max_tokens", "auto_context_extended_max_tokens", "supports_max_mode", "context_token_limit", "context_token_limit_for_max_mode", "client_display_name", "server_model_name", "supports_non_max_mode", "is_recommended_for_background_composer", "supports_plan_mode", "is_user_added", "inputbox_short_model_name", "supports_sandboxing", "supports_cmd_k", "only_supports_cmd_k", "parameter_definitions", "variants", "is_hidden", "legacy_slugs", "id_aliases", "tagline", "vendor_name")
        NAME_FIELD_NUMBER: _ClassVar[int]
        DEFAULT_ON_FIELD_NUMBER: _ClassVar[int]
        IS_LONG_CONTEXT_ONLY_FIELD_NUMBER: _ClassVar[int]
        IS_CHAT_ONLY_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_AGENT_FIELD_NUMBER: _ClassVar[int]
        DEGRADATION_STATUS_FIELD_NUMBER: _ClassVar[int]
        PRICE_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_THINKING_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_IMAGES_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_AUTO_CONTEXT_FIELD_NUMBER: _ClassVar[int]
        AUTO_CONTEXT_MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
        AUTO_CONTEXT_EXTENDED_MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_MAX_MODE_FIELD_NUMBER: _ClassVar[int]
        CONTEXT_TOKEN_LIMIT_FIELD_NUMBER: _ClassVar[int]
        CONTEXT_TOKEN_LIMIT_FOR_MAX_MODE_FIELD_NUMBER: _ClassVar[int]
        CLIENT_DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
        SERVER_MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_NON_MAX_MODE_FIELD_NUMBER: _ClassVar[int]
        IS_RECOMMENDED_FOR_BACKGROUND_COMPOSER_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_PLAN_MODE_FIELD_NUMBER: _ClassVar[int]
        IS_USER_ADDED_FIELD_NUMBER: _ClassVar[int]
        INPUTBOX_SHORT_MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_SANDBOXING_FIELD_NUMBER: _ClassVar[int]
        SUPPORTS_CMD_K_FIELD_NUMBER: _ClassVar[int]
        ONLY_SUPPORTS_CMD_K_FIELD_NUMBER: _ClassVar[int]
        PARAMETER_DEFINITIONS_FIELD_NUMBER: _ClassVar[int]
        VARIANTS_FIELD_NUMBER: _ClassVar[int]
        IS_HIDDEN_FIELD_NUMBER: _ClassVar[int]
        LEGACY_SLUGS_FIELD_NUMBER: _ClassVar[int]
        ID_ALIASES_FIELD_NUMBER: _ClassVar[int]
        TAGLINE_FIELD_NUMBER: _ClassVar[int]
        VENDOR_NAME_FIELD_NUMBER: _ClassVar[int]
        name: str
        default_on: bool
        is_long_context_only: bool
        is_chat_only: bool
        supports_agent: bool
        degradation_status: AvailableModelsResponse.DegradationStatus
        price: float
        supports_thinking: bool
        supports_images: bool
        supports_auto_context: bool
        auto_context_max_tokens: int
        auto_context_extended_max_tokens: int
        supports_max_mode: bool
        context_token_limit: int
        context_token_limit_for_max_mode: int
        client_display_name: str
        server_model_name: str
        supports_non_max_mode: bool
        is_recommended_for_background_composer: bool
        supports_plan_mode: bool
        is_user_added: bool
        inputbox_short_model_name: str
        supports_sandboxing: bool
        supports_cmd_k: bool
        only_supports_cmd_k: bool
        parameter_definitions: _containers.RepeatedCompositeFieldContainer[ModelParameterDefinition]
        variants: _containers.RepeatedCompositeFieldContainer[AvailableModelsResponse.ModelVariantConfig]
        is_hidden: bool
        legacy_slugs: _containers.RepeatedScalarFieldContainer[str]
        id_aliases: _containers.RepeatedScalarFieldContainer[str]
        tagline: str
        vendor_name: str
        def __init__(self, name: _Optional[str] = ..., default_on: _Optional[bool] = ..., is_long_context_only: _Optional[bool] = ..., is_chat_only: _Optional[bool] = ..., supports_agent: _Optional[bool] = ..., degradation_status: _Optional[_Union[AvailableModelsResponse.DegradationStatus, str]] = ..., price: _Optional[float] = ..., supports_thinking: _Optional[bool] = ..., supports_images: _Optional[bool] = ..., supports_auto_context: _Optional[bool] = ..., auto_context_max_tokens: _Optional[int] = ..., auto_context_extended_max_tokens: _Optional[int] = ..., supports_max_mode: _Optional[bool] = ..., context_token_limit: _Optional[int] = ..., context_token_limit_for_max_mode: _Optional[int] = ..., client_display_name: _Optional[str] = ..., server_model_name: _Optional[str] = ..., supports_non_max_mode: _Optional[bool] = ..., is_recommended_for_background_composer: _Optional[bool] = ..., supports_plan_mode: _Optional[bool] = ..., is_user_added: _Optional[bool] = ..., inputbox_short_model_name: _Optional[str] = ..., supports_sandboxing: _Optional[bool] = ..., supports_cmd_k: _Optional[bool] = ..., only_supports_cmd_k: _Optional[bool] = ..., parameter_definitions: _Optional[_Iterable[_Union[ModelParameterDefinition, _Mapping]]] = ..., variants: _Optional[_Iterable[_Union[AvailableModelsResponse.ModelVariantConfig, _Mapping]]] = ..., is_hidden: _Optional[bool] = ..., legacy_slugs: _Optional[_Iterable[str]] = ..., id_aliases: _Optional[_Iterable[str]] = ..., tagline: _Optional[str] = ..., vendor_name: _Optional[str] = ...) -> None: ...
    class SubagentModelConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AvailableModelsResponse.FeatureModelConfig
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AvailableModelsResponse.FeatureModelConfig, _Mapping]] = ...) -> None: ...
    MODEL_NAMES_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    COMPOSER_MODEL_CONFIG_FIELD_NUMBER: _ClassVar[int]
    CMD_K_MODEL_CONFIG_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_COMPOSER_MODEL_CONFIG_FIELD_NUMBER: _ClassVar[int]
    PLAN_EXECUTION_MODEL_CONFIG_FIELD_NUMBER: _ClassVar[int]
    SPEC_MODEL_CONFIG_FIELD_NUMBER: _ClassVar[int]
    DEEP_SEARCH_MODEL_CONFIG_FIELD_NUMBER: _ClassVar[int]
    QUICK_AGENT_MODEL_CONFIG_FIELD_NUMBER: _ClassVar[int]
    USE_MODEL_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    SUBAGENT_MODEL_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    model_names: _containers.RepeatedScalarFieldContainer[str]
    models: _containers.RepeatedCompositeFieldContainer[AvailableModelsResponse.AvailableModel]
    composer_model_config: AvailableModelsResponse.FeatureModelConfig
    cmd_k_model_config: AvailableModelsResponse.FeatureModelConfig
    background_composer_model_config: AvailableModelsResponse.FeatureModelConfig
    plan_execution_model_config: AvailableModelsResponse.FeatureModelConfig
    spec_model_config: AvailableModelsResponse.FeatureModelConfig
    deep_search_model_config: AvailableModelsResponse.FeatureModelConfig
    quick_agent_model_config: AvailableModelsResponse.FeatureModelConfig
    use_model_parameters: bool
    subagent_model_configs: _containers.MessageMap[str, AvailableModelsResponse.FeatureModelConfig]
    def __init__(self, model_names: _Optional[_Iterable[str]] = ..., models: _Optional[_Iterable[_Union[AvailableModelsResponse.AvailableModel, _Mapping]]] = ..., composer_model_config: _Optional[_Union[AvailableModelsResponse.FeatureModelConfig, _Mapping]] = ..., cmd_k_model_config: _Optional[_Union[AvailableModelsResponse.FeatureModelConfig, _Mapping]] = ..., background_composer_model_config: _Optional[_Union[AvailableModelsResponse.FeatureModelConfig, _Mapping]] = ..., plan_execution_model_config: _Optional[_Union[AvailableModelsResponse.FeatureModelConfig, _Mapping]] = ..., spec_model_config: _Optional[_Union[AvailableModelsResponse.FeatureModelConfig, _Mapping]] = ..., deep_search_model_config: _Optional[_Union[AvailableModelsResponse.FeatureModelConfig, _Mapping]] = ..., quick_agent_model_config: _Optional[_Union[AvailableModelsResponse.FeatureModelConfig, _Mapping]] = ..., use_model_parameters: _Optional[bool] = ..., subagent_model_configs: _Optional[_Mapping[str, AvailableModelsResponse.FeatureModelConfig]] = ...) -> None: ...

class GetTeamAdminSettingsRequest(_message.Message):
    __slots__ = ("team_id",)
    TEAM_ID_FIELD_NUMBER: _ClassVar[int]
    team_id: int
    def __init__(self, team_id: _Optional[int] = ...) -> None: ...

class GetTeamAdminSettingsResponse(_message.Message):
    __slots__ = ("allowed_models", "blocked_models")
    ALLOWED_MODELS_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_MODELS_FIELD_NUMBER: _ClassVar[int]
    allowed_models: _containers.RepeatedScalarFieldContainer[str]
    blocked_models: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, allowed_models: _Optional[_Iterable[str]] = ..., blocked_models: _Optional[_Iterable[str]] = ...) -> None: ...

class GetTeamReposRequest(_message.Message):
    __slots__ = ("team_id",)
    TEAM_ID_FIELD_NUMBER: _ClassVar[int]
    team_id: int
    def __init__(self, team_id: _Optional[int] = ...) -> None: ...

class GetTeamReposResponse(_message.Message):
    __slots__ = ("team_repo_type", "disable_local_exec_allowlist_enforcement")
    TEAM_REPO_TYPE_FIELD_NUMBER: _ClassVar[int]
    DISABLE_LOCAL_EXEC_ALLOWLIST_ENFORCEMENT_FIELD_NUMBER: _ClassVar[int]
    team_repo_type: str
    disable_local_exec_allowlist_enforcement: bool
    def __init__(self, team_repo_type: _Optional[str] = ..., disable_local_exec_allowlist_enforcement: _Optional[bool] = ...) -> None: ...

class ListMarketplacesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListMarketplacesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetManagedSkillsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetManagedSkillsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetEffectiveUserPluginsRequest(_message.Message):
    __slots__ = ("use_replica", "team_id", "exclude_configured_variables")
    USE_REPLICA_FIELD_NUMBER: _ClassVar[int]
    TEAM_ID_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_CONFIGURED_VARIABLES_FIELD_NUMBER: _ClassVar[int]
    use_replica: bool
    team_id: int
    exclude_configured_variables: bool
    def __init__(self, use_replica: _Optional[bool] = ..., team_id: _Optional[int] = ..., exclude_configured_variables: _Optional[bool] = ...) -> None: ...

class GetEffectiveUserPluginsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetGlobalCommandsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetGlobalCommandsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetTeamCommandsRequest(_message.Message):
    __slots__ = ("active_only", "team_id")
    ACTIVE_ONLY_FIELD_NUMBER: _ClassVar[int]
    TEAM_ID_FIELD_NUMBER: _ClassVar[int]
    active_only: bool
    team_id: int
    def __init__(self, active_only: _Optional[bool] = ..., team_id: _Optional[int] = ...) -> None: ...

class GetTeamCommandsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetTeamsRequest(_message.Message):
    __slots__ = ("active_only",)
    ACTIVE_ONLY_FIELD_NUMBER: _ClassVar[int]
    active_only: bool
    def __init__(self, active_only: _Optional[bool] = ...) -> None: ...

class GetTeamsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class IsOnNewPricingRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class IsOnNewPricingResponse(_message.Message):
    __slots__ = ("is_on_new_pricing", "is_opted_out", "has_auto_spillover")
    IS_ON_NEW_PRICING_FIELD_NUMBER: _ClassVar[int]
    IS_OPTED_OUT_FIELD_NUMBER: _ClassVar[int]
    HAS_AUTO_SPILLOVER_FIELD_NUMBER: _ClassVar[int]
    is_on_new_pricing: bool
    is_opted_out: bool
    has_auto_spillover: bool
    def __init__(self, is_on_new_pricing: _Optional[bool] = ..., is_opted_out: _Optional[bool] = ..., has_auto_spillover: _Optional[bool] = ...) -> None: ...

class TrackEventsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TrackEventsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BatchRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BatchResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BootstrapStatsigRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BootstrapStatsigResponse(_message.Message):
    __slots__ = ("config", "generated_at_ms")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    GENERATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    config: str
    generated_at_ms: int
    def __init__(self, config: _Optional[str] = ..., generated_at_ms: _Optional[int] = ...) -> None: ...

class GetFirstWindowStatsigDecisionRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetFirstWindowStatsigDecisionResponse(_message.Message):
    __slots__ = ("variant", "reason")
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    variant: str
    reason: str
    def __init__(self, variant: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class SubmitLogsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SubmitLogsResponse(_message.Message):
    __slots__ = ("success", "error_message", "logs_processed", "logs_dropped")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LOGS_PROCESSED_FIELD_NUMBER: _ClassVar[int]
    LOGS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    success: bool
    error_message: str
    logs_processed: int
    logs_dropped: int
    def __init__(self, success: _Optional[bool] = ..., error_message: _Optional[str] = ..., logs_processed: _Optional[int] = ..., logs_dropped: _Optional[int] = ...) -> None: ...
