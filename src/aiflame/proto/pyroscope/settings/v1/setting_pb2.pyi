from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetSettingsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetSettingsResponse(_message.Message):
    __slots__ = ("settings",)
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    settings: _containers.RepeatedCompositeFieldContainer[Setting]
    def __init__(self, settings: _Optional[_Iterable[_Union[Setting, _Mapping]]] = ...) -> None: ...

class SetSettingsRequest(_message.Message):
    __slots__ = ("setting",)
    SETTING_FIELD_NUMBER: _ClassVar[int]
    setting: Setting
    def __init__(self, setting: _Optional[_Union[Setting, _Mapping]] = ...) -> None: ...

class SetSettingsResponse(_message.Message):
    __slots__ = ("setting",)
    SETTING_FIELD_NUMBER: _ClassVar[int]
    setting: Setting
    def __init__(self, setting: _Optional[_Union[Setting, _Mapping]] = ...) -> None: ...

class DeleteSettingsRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteSettingsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Setting(_message.Message):
    __slots__ = ("name", "value", "modifiedAt")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    MODIFIEDAT_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    modifiedAt: int
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., modifiedAt: _Optional[int] = ...) -> None: ...
