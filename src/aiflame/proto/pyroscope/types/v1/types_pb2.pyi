from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TimeSeriesAggregationType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIME_SERIES_AGGREGATION_TYPE_SUM: _ClassVar[TimeSeriesAggregationType]
    TIME_SERIES_AGGREGATION_TYPE_AVERAGE: _ClassVar[TimeSeriesAggregationType]

class ExemplarType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXEMPLAR_TYPE_UNSPECIFIED: _ClassVar[ExemplarType]
    EXEMPLAR_TYPE_NONE: _ClassVar[ExemplarType]
    EXEMPLAR_TYPE_INDIVIDUAL: _ClassVar[ExemplarType]
    EXEMPLAR_TYPE_SPAN: _ClassVar[ExemplarType]
TIME_SERIES_AGGREGATION_TYPE_SUM: TimeSeriesAggregationType
TIME_SERIES_AGGREGATION_TYPE_AVERAGE: TimeSeriesAggregationType
EXEMPLAR_TYPE_UNSPECIFIED: ExemplarType
EXEMPLAR_TYPE_NONE: ExemplarType
EXEMPLAR_TYPE_INDIVIDUAL: ExemplarType
EXEMPLAR_TYPE_SPAN: ExemplarType

class LabelPair(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class ProfileType(_message.Message):
    __slots__ = ("ID", "name", "sample_type", "sample_unit", "period_type", "period_unit")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_TYPE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_UNIT_FIELD_NUMBER: _ClassVar[int]
    PERIOD_TYPE_FIELD_NUMBER: _ClassVar[int]
    PERIOD_UNIT_FIELD_NUMBER: _ClassVar[int]
    ID: str
    name: str
    sample_type: str
    sample_unit: str
    period_type: str
    period_unit: str
    def __init__(self, ID: _Optional[str] = ..., name: _Optional[str] = ..., sample_type: _Optional[str] = ..., sample_unit: _Optional[str] = ..., period_type: _Optional[str] = ..., period_unit: _Optional[str] = ...) -> None: ...

class Labels(_message.Message):
    __slots__ = ("labels",)
    LABELS_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.RepeatedCompositeFieldContainer[LabelPair]
    def __init__(self, labels: _Optional[_Iterable[_Union[LabelPair, _Mapping]]] = ...) -> None: ...

class Series(_message.Message):
    __slots__ = ("labels", "points")
    LABELS_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.RepeatedCompositeFieldContainer[LabelPair]
    points: _containers.RepeatedCompositeFieldContainer[Point]
    def __init__(self, labels: _Optional[_Iterable[_Union[LabelPair, _Mapping]]] = ..., points: _Optional[_Iterable[_Union[Point, _Mapping]]] = ...) -> None: ...

class Point(_message.Message):
    __slots__ = ("value", "timestamp", "annotations", "exemplars")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    EXEMPLARS_FIELD_NUMBER: _ClassVar[int]
    value: float
    timestamp: int
    annotations: _containers.RepeatedCompositeFieldContainer[ProfileAnnotation]
    exemplars: _containers.RepeatedCompositeFieldContainer[Exemplar]
    def __init__(self, value: _Optional[float] = ..., timestamp: _Optional[int] = ..., annotations: _Optional[_Iterable[_Union[ProfileAnnotation, _Mapping]]] = ..., exemplars: _Optional[_Iterable[_Union[Exemplar, _Mapping]]] = ...) -> None: ...

class ProfileAnnotation(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class LabelValuesRequest(_message.Message):
    __slots__ = ("name", "matchers", "start", "end")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MATCHERS_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    name: str
    matchers: _containers.RepeatedScalarFieldContainer[str]
    start: int
    end: int
    def __init__(self, name: _Optional[str] = ..., matchers: _Optional[_Iterable[str]] = ..., start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class LabelValuesResponse(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class LabelNamesRequest(_message.Message):
    __slots__ = ("matchers", "start", "end")
    MATCHERS_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    matchers: _containers.RepeatedScalarFieldContainer[str]
    start: int
    end: int
    def __init__(self, matchers: _Optional[_Iterable[str]] = ..., start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class LabelNamesResponse(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class BlockInfo(_message.Message):
    __slots__ = ("ulid", "min_time", "max_time", "compaction", "labels")
    ULID_FIELD_NUMBER: _ClassVar[int]
    MIN_TIME_FIELD_NUMBER: _ClassVar[int]
    MAX_TIME_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ulid: str
    min_time: int
    max_time: int
    compaction: BlockCompaction
    labels: _containers.RepeatedCompositeFieldContainer[LabelPair]
    def __init__(self, ulid: _Optional[str] = ..., min_time: _Optional[int] = ..., max_time: _Optional[int] = ..., compaction: _Optional[_Union[BlockCompaction, _Mapping]] = ..., labels: _Optional[_Iterable[_Union[LabelPair, _Mapping]]] = ...) -> None: ...

class BlockCompaction(_message.Message):
    __slots__ = ("level", "sources", "parents")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    level: int
    sources: _containers.RepeatedScalarFieldContainer[str]
    parents: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, level: _Optional[int] = ..., sources: _Optional[_Iterable[str]] = ..., parents: _Optional[_Iterable[str]] = ...) -> None: ...

class StackTraceSelector(_message.Message):
    __slots__ = ("call_site", "go_pgo")
    CALL_SITE_FIELD_NUMBER: _ClassVar[int]
    GO_PGO_FIELD_NUMBER: _ClassVar[int]
    call_site: _containers.RepeatedCompositeFieldContainer[Location]
    go_pgo: GoPGO
    def __init__(self, call_site: _Optional[_Iterable[_Union[Location, _Mapping]]] = ..., go_pgo: _Optional[_Union[GoPGO, _Mapping]] = ...) -> None: ...

class Location(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GoPGO(_message.Message):
    __slots__ = ("keep_locations", "aggregate_callees")
    KEEP_LOCATIONS_FIELD_NUMBER: _ClassVar[int]
    AGGREGATE_CALLEES_FIELD_NUMBER: _ClassVar[int]
    keep_locations: int
    aggregate_callees: bool
    def __init__(self, keep_locations: _Optional[int] = ..., aggregate_callees: bool = ...) -> None: ...

class GetProfileStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetProfileStatsResponse(_message.Message):
    __slots__ = ("data_ingested", "oldest_profile_time", "newest_profile_time")
    DATA_INGESTED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_PROFILE_TIME_FIELD_NUMBER: _ClassVar[int]
    NEWEST_PROFILE_TIME_FIELD_NUMBER: _ClassVar[int]
    data_ingested: bool
    oldest_profile_time: int
    newest_profile_time: int
    def __init__(self, data_ingested: bool = ..., oldest_profile_time: _Optional[int] = ..., newest_profile_time: _Optional[int] = ...) -> None: ...

class Exemplar(_message.Message):
    __slots__ = ("timestamp", "profile_id", "span_id", "value", "labels", "trace_id")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    PROFILE_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    profile_id: str
    span_id: str
    value: int
    labels: _containers.RepeatedCompositeFieldContainer[LabelPair]
    trace_id: str
    def __init__(self, timestamp: _Optional[int] = ..., profile_id: _Optional[str] = ..., span_id: _Optional[str] = ..., value: _Optional[int] = ..., labels: _Optional[_Iterable[_Union[LabelPair, _Mapping]]] = ..., trace_id: _Optional[str] = ...) -> None: ...

class HeatmapSeries(_message.Message):
    __slots__ = ("labels", "slots")
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.RepeatedCompositeFieldContainer[LabelPair]
    slots: _containers.RepeatedCompositeFieldContainer[HeatmapSlot]
    def __init__(self, labels: _Optional[_Iterable[_Union[LabelPair, _Mapping]]] = ..., slots: _Optional[_Iterable[_Union[HeatmapSlot, _Mapping]]] = ...) -> None: ...

class HeatmapSlot(_message.Message):
    __slots__ = ("timestamp", "y_min", "counts", "exemplars")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    Y_MIN_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    EXEMPLARS_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    y_min: _containers.RepeatedScalarFieldContainer[float]
    counts: _containers.RepeatedScalarFieldContainer[int]
    exemplars: _containers.RepeatedCompositeFieldContainer[Exemplar]
    def __init__(self, timestamp: _Optional[int] = ..., y_min: _Optional[_Iterable[float]] = ..., counts: _Optional[_Iterable[int]] = ..., exemplars: _Optional[_Iterable[_Union[Exemplar, _Mapping]]] = ...) -> None: ...
