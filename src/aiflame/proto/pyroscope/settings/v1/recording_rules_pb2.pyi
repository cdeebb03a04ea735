from aiflame.proto.pyroscope.types.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MetricType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOTAL: _ClassVar[MetricType]
TOTAL: MetricType

class GetRecordingRuleRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetRecordingRuleResponse(_message.Message):
    __slots__ = ("rule",)
    RULE_FIELD_NUMBER: _ClassVar[int]
    rule: RecordingRule
    def __init__(self, rule: _Optional[_Union[RecordingRule, _Mapping]] = ...) -> None: ...

class ListRecordingRulesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRecordingRulesResponse(_message.Message):
    __slots__ = ("rules",)
    RULES_FIELD_NUMBER: _ClassVar[int]
    rules: _containers.RepeatedCompositeFieldContainer[RecordingRule]
    def __init__(self, rules: _Optional[_Iterable[_Union[RecordingRule, _Mapping]]] = ...) -> None: ...

class UpsertRecordingRuleRequest(_message.Message):
    __slots__ = ("id", "metric_name", "matchers", "group_by", "external_labels", "generation", "stacktrace_filter")
    ID_FIELD_NUMBER: _ClassVar[int]
    METRIC_NAME_FIELD_NUMBER: _ClassVar[int]
    MATCHERS_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_LABELS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STACKTRACE_FILTER_FIELD_NUMBER: _ClassVar[int]
    id: str
    metric_name: str
    matchers: _containers.RepeatedScalarFieldContainer[str]
    group_by: _containers.RepeatedScalarFieldContainer[str]
    external_labels: _containers.RepeatedCompositeFieldContainer[_types_pb2.LabelPair]
    generation: int
    stacktrace_filter: StacktraceFilter
    def __init__(self, id: _Optional[str] = ..., metric_name: _Optional[str] = ..., matchers: _Optional[_Iterable[str]] = ..., group_by: _Optional[_Iterable[str]] = ..., external_labels: _Optional[_Iterable[_Union[_types_pb2.LabelPair, _Mapping]]] = ..., generation: _Optional[int] = ..., stacktrace_filter: _Optional[_Union[StacktraceFilter, _Mapping]] = ...) -> None: ...

class UpsertRecordingRuleResponse(_message.Message):
    __slots__ = ("rule",)
    RULE_FIELD_NUMBER: _ClassVar[int]
    rule: RecordingRule
    def __init__(self, rule: _Optional[_Union[RecordingRule, _Mapping]] = ...) -> None: ...

class DeleteRecordingRuleRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteRecordingRuleResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RecordingRule(_message.Message):
    __slots__ = ("id", "metric_name", "profile_type", "matchers", "group_by", "external_labels", "generation", "stacktrace_filter", "provisioned")
    ID_FIELD_NUMBER: _ClassVar[int]
    METRIC_NAME_FIELD_NUMBER: _ClassVar[int]
    PROFILE_TYPE_FIELD_NUMBER: _ClassVar[int]
    MATCHERS_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_LABELS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STACKTRACE_FILTER_FIELD_NUMBER: _ClassVar[int]
    PROVISIONED_FIELD_NUMBER: _ClassVar[int]
    id: str
    metric_name: str
    profile_type: str
    matchers: _containers.RepeatedScalarFieldContainer[str]
    group_by: _containers.RepeatedScalarFieldContainer[str]
    external_labels: _containers.RepeatedCompositeFieldContainer[_types_pb2.LabelPair]
    generation: int
    stacktrace_filter: StacktraceFilter
    provisioned: bool
    def __init__(self, id: _Optional[str] = ..., metric_name: _Optional[str] = ..., profile_type: _Optional[str] = ..., matchers: _Optional[_Iterable[str]] = ..., group_by: _Optional[_Iterable[str]] = ..., external_labels: _Optional[_Iterable[_Union[_types_pb2.LabelPair, _Mapping]]] = ..., generation: _Optional[int] = ..., stacktrace_filter: _Optional[_Union[StacktraceFilter, _Mapping]] = ..., provisioned: bool = ...) -> None: ...

class StacktraceFilter(_message.Message):
    __slots__ = ("function_name",)
    FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    function_name: StacktraceFilterFunctionName
    def __init__(self, function_name: _Optional[_Union[StacktraceFilterFunctionName, _Mapping]] = ...) -> None: ...

class StacktraceFilterFunctionName(_message.Message):
    __slots__ = ("function_name", "metric_type")
    FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    METRIC_TYPE_FIELD_NUMBER: _ClassVar[int]
    function_name: str
    metric_type: MetricType
    def __init__(self, function_name: _Optional[str] = ..., metric_type: _Optional[_Union[MetricType, str]] = ...) -> None: ...

class RecordingRuleStore(_message.Message):
    __slots__ = ("id", "metric_name", "prometheus_data_source", "matchers", "group_by", "external_labels", "generation", "stacktrace_filter")
    ID_FIELD_NUMBER: _ClassVar[int]
    METRIC_NAME_FIELD_NUMBER: _ClassVar[int]
    PROMETHEUS_DATA_SOURCE_FIELD_NUMBER: _ClassVar[int]
    MATCHERS_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_LABELS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STACKTRACE_FILTER_FIELD_NUMBER: _ClassVar[int]
    id: str
    metric_name: str
    prometheus_data_source: str
    matchers: _containers.RepeatedScalarFieldContainer[str]
    group_by: _containers.RepeatedScalarFieldContainer[str]
    external_labels: _containers.RepeatedCompositeFieldContainer[_types_pb2.LabelPair]
    generation: int
    stacktrace_filter: StacktraceFilter
    def __init__(self, id: _Optional[str] = ..., metric_name: _Optional[str] = ..., prometheus_data_source: _Optional[str] = ..., matchers: _Optional[_Iterable[str]] = ..., group_by: _Optional[_Iterable[str]] = ..., external_labels: _Optional[_Iterable[_Union[_types_pb2.LabelPair, _Mapping]]] = ..., generation: _Optional[int] = ..., stacktrace_filter: _Optional[_Union[StacktraceFilter, _Mapping]] = ...) -> None: ...

class RecordingRulesStore(_message.Message):
    __slots__ = ("rules", "generation")
    RULES_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    rules: _containers.RepeatedCompositeFieldContainer[RecordingRuleStore]
    generation: int
    def __init__(self, rules: _Optional[_Iterable[_Union[RecordingRuleStore, _Mapping]]] = ..., generation: _Optional[int] = ...) -> None: ...
