"""The wire format: field codecs, the Message base and the framing of every message.

On the wire a message is a msgpack array ``[code, field1, field2, ...]``. A message class
(apollo.core.messages) declares every field once, with its codec as the field's metadata
(``job_id: int = field(metadata=NAT)``), and ``wire(cls, code)`` below it reads them.
``decode`` checks the code, the arity and every field, and raises WireError naming the message
and the field. Numeric arrays travel as raw little-endian bytes (msgpack bin) so a
20,000-server view costs one memcpy, not 20,000 Python floats.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import fields
from types import MappingProxyType
from typing import Any, Callable, ClassVar

import msgpack
import numpy as np


class WireError(ValueError):
    """A frame or message that does not decode; the message says what and where."""


# ---- field codecs -----------------------------------------------------------
# A codec is a read-only mapping of "encode" (a field's value -> what msgpack packs) and "decode"
# (what msgpack unpacked, the field's name -> the value, validated: WireError if not). A mapping so
# that it is the field's dataclass metadata as it stands: ``cpu: float = field(metadata=FLOAT)``.

Codec = Mapping[str, Callable[..., Any]]


def codec(encode: Callable[[Any], Any], decode: Callable[[Any, str], Any]) -> Codec:
    return MappingProxyType({"encode": encode, "decode": decode})


def _ident(v: Any) -> Any:
    return v


def as_int(v: Any, where: str) -> int:
    if type(v) is not int:
        raise WireError(f"{where}: expected an integer, got {type(v).__name__}")
    return v


def as_nat(v: Any, where: str) -> int:
    v = as_int(v, where)
    if v < 0:
        raise WireError(f"{where}: expected >= 0, got {v}")
    return v


def as_float(v: Any, where: str) -> float:
    if type(v) is float or type(v) is int:
        v = float(v)
        if not math.isfinite(v):
            raise WireError(f"{where}: {v} is not allowed (numbers must be finite)")
        return v
    raise WireError(f"{where}: expected a number, got {type(v).__name__}")


def as_str(v: Any, where: str) -> str:
    if type(v) is not str:
        raise WireError(f"{where}: expected a string, got {type(v).__name__}")
    return v


def as_bool(v: Any, where: str) -> bool:
    if type(v) is not bool:
        raise WireError(f"{where}: expected a boolean, got {type(v).__name__}")
    return v


def as_bytes(v: Any, where: str) -> bytes:
    if type(v) is not bytes:
        raise WireError(f"{where}: expected bytes, got {type(v).__name__}")
    return v


INT = codec(_ident, as_int)
NAT = codec(_ident, as_nat)
FLOAT = codec(_ident, as_float)
STR = codec(_ident, as_str)
BOOL = codec(_ident, as_bool)
BYTES = codec(_ident, as_bytes)


def opt(c: Codec) -> Codec:
    """``c``'s value, or None. (An identity encoder stays one: None packs as itself. A generated
    decoder reads "optional" off the mapping and tests for None inline, calling ``c`` only for
    a value.)"""
    enc, dec = c["encode"], c["decode"]
    return MappingProxyType({"encode": _ident if enc is _ident else (lambda v: None if v is None else enc(v)),
                             "decode": lambda v, w: None if v is None else dec(v, w), "optional": dec})


def lst(c: Codec) -> Codec:
    enc, dec = c["encode"], c["decode"]

    def decode(v: Any, where: str) -> list:
        if type(v) is not list:
            raise WireError(f"{where}: expected a list, got {type(v).__name__}")
        try:
            return [dec(x, "") for x in v]
        except WireError as e:
            raise WireError(f"{where}[{_index_of_error(v, dec)}]{e}") from None
    if enc is _ident:
        return codec(list, decode)
    return codec(lambda v: [enc(x) for x in v], decode)


def _index_of_error(v: list, dec) -> int:
    for i, x in enumerate(v):
        try:
            dec(x, "")
        except WireError:
            return i
    return -1


def tup(c: Codec) -> Codec:
    as_list = lst(c)
    dec = as_list["decode"]
    return codec(as_list["encode"], lambda v, w: tuple(dec(v, w)))


def _str_dict(v: Any, where: str) -> dict:
    if type(v) is not dict or not all(type(k) is str and type(x) is str for k, x in v.items()):
        raise WireError(f"{where}: expected a map of strings to strings")
    return v


STR_MAP = codec(dict, _str_dict)


def array(dtype: str) -> Codec:
    dt = np.dtype(dtype).newbyteorder("<")
    kind_f = dt.kind == "f"
    # (an empty column, as most of a quiet cluster's periodic messages carry: one shared, read-only
    # as every decoded array is, and no numpy call either way)
    empty = np.frombuffer(b"", dtype=dt)

    def decode(v: Any, where: str) -> np.ndarray:
        b = as_bytes(v, where)
        if not b:
            return empty
        if len(b) % dt.itemsize:
            raise WireError(f"{where}: {len(b)} bytes is not a whole number of {dt} items")
        a = np.frombuffer(b, dtype=dt)
        # One reduction: a sum is finite only if every item is (items are bounded far below
        # the overflow point by the senders; a sum that overflows is refused all the same).
        # A short array's in Python: ~0.3 us where numpy's call costs ~1.5 (a 1-task job's spec
        # is decoded twice on its way to its first task).
        if kind_f and len(a) and not math.isfinite(sum(a.tolist()) if len(a) <= 16 else a.sum()):
            raise WireError(f"{where}: array holds NaN or infinity")
        return a
    return codec(lambda a: b"" if type(a) is np.ndarray and not a.size else np.ascontiguousarray(a, dtype=dt).tobytes(),
                 decode)


F64 = array("f8")
F32 = array("f4")
I32 = array("i4")
I64 = array("i8")


def nested(cls: type) -> Codec:
    return codec(lambda v: v.to_wire(), _FROM_WIRE[cls])      # (cls is wired before its container)


# ---- the message base -------------------------------------------------------

REGISTRY: dict[int, type["Message"]] = {}


class Message:
    """Base of all messages and nested structs: dataclasses, treated as values.

    Nobody changes a message once made (in one process a sender may share it with its
    receiver; a PN that turns an attempt regular makes a new TaskSpec). They are not
    ``frozen``: a frozen dataclass sets each field through ``object.__setattr__``, which makes
    a TaskSpec cost 1.5 us instead of 0.2 us, and the hot paths make several per task. The
    messages made once or more per task (TaskSpec, TaskReport, Dispatch, StatusBatch, ...) spell
    out their ``__init__``: compiled (apollo.tools.native), such a class is a C struct made in ~30 ns,
    where a generated ``__init__`` would still run as Python (they declare no defaults in their
    fields: the ``__init__`` holds them). ``wire`` (below each class) reads the fields' codecs and
    gives the class its code."""
    __slots__ = ()
    CODE: ClassVar[int] = -1
    CODECS: ClassVar[tuple[Codec, ...]] = ()
    _NAMES: ClassVar[tuple[str, ...]] = ()
    _DECODERS: ClassVar[tuple] = ()
    _ENCODERS: ClassVar[tuple] = ()
    _GETTER: ClassVar[Any] = None

    def to_wire(self) -> list:
        vals = list(self._GETTER(self))
        for i, enc in self._ENCODERS:
            vals[i] = enc(vals[i])
        return vals


_FROM_WIRE: dict[type, Callable[..., Any]] = {}     # class -> its generated decoder (decode, nested)


def _from_wire_checked(cls: Any, v: Any, where: str = "") -> Any:
    """The generic decoder: accepts what the field codecs accept and words every error."""
    # Field decoders get just the field's name; the path is prefixed only when an
    # error climbs out, so the fast path formats no strings.
    where = where or cls.__name__
    codecs = cls.CODECS
    if type(v) is not list or len(v) != len(codecs):
        got = len(v) if type(v) is list else type(v).__name__
        raise WireError(f"{where}: expected {len(codecs)} fields, got {got}")
    try:
        return cls(*[dec(x, n) for x, n, dec in zip(v, cls._NAMES, cls._DECODERS)])
    except WireError as e:
        raise WireError(f"{where}.{e}") from None


# Field checks a generated decoder inlines (a finite float: x - x is 0.0 only when x is finite).
_INLINE = {as_int: "type({x}) is int", as_nat: "type({x}) is int and {x} >= 0",
           as_str: "type({x}) is str", as_bool: "type({x}) is bool", as_bytes: "type({x}) is bytes",
           as_float: "type({x}) is float and {x} - {x} == 0.0"}


def _fast_decoder(cls: type[Message]) -> Callable:
    """A decoder made for ``cls``: the plain field checks inlined, one call per other field, and
    anything unexpected handed to the generic ``_from_wire_checked``, which accepts what it
    accepts (an int for a float) and words every error. Decoding is most of what a busy JM or
    PN does with a message, so this is worth the generated code."""
    n = len(cls.CODECS)
    f = [f"f{i}" for i in range(n)]
    ns: dict[str, Any] = {"cls": cls, "slow": _from_wire_checked, "WireError": WireError}
    body = [f"if type(v) is not list or len(v) != {n}:", "    return slow(cls, v, where)",
            f"{', '.join(f)}, = v"]
    checks = []
    calls = []
    for i, (dec, name, c) in enumerate(zip(cls._DECODERS, cls._NAMES, cls.CODECS)):
        inner = c.get("optional")
        if dec in _INLINE:
            checks.append("(" + _INLINE[dec].format(x=f[i]) + ")")
        elif inner is not None and inner in _INLINE:
            checks.append(f"({f[i]} is None or " + _INLINE[inner].format(x=f[i]) + ")")
        elif inner is not None:
            ns[f"d{i}"], ns[f"n{i}"] = inner, name
            calls.append(f"    if {f[i]} is not None: {f[i]} = d{i}({f[i]}, n{i})")
        else:
            ns[f"d{i}"], ns[f"n{i}"] = dec, name
            calls.append(f"    {f[i]} = d{i}({f[i]}, n{i})")
    if checks:
        body += [f"if not ({' and '.join(checks)}):", "    return slow(cls, v, where)"]
    if calls:
        body += ["try:", *calls, "except WireError:", "    return slow(cls, v, where)"]
    body.append(f"return cls({', '.join(f)})")
    src = "def decode(v, where=''):\n" + "\n".join("    " + line for line in body)
    exec(compile(src, f"<decoder of {cls.__name__}>", "exec"), ns)
    return ns["decode"]


def wire(cls: type[Message], code: int = -1) -> None:
    """Give dataclass ``cls`` its fields' codecs (each field's metadata, in field order) and
    register ``code`` (-1: a nested struct, never a frame of its own). A function called below
    each class, not a class decorator: mypyc compiles only classes decorated with nothing but
    ``dataclass``."""
    declared = fields(cls)  # type: ignore[arg-type]
    bare = [f.name for f in declared if "decode" not in f.metadata]
    if bare:
        raise TypeError(f"{cls.__name__}: fields without a codec (field(metadata=CODEC)): {bare}")
    names = tuple(f.name for f in declared)
    cls._NAMES = names
    cls.CODECS = tuple(f.metadata for f in declared)
    cls._DECODERS = tuple(c["decode"] for c in cls.CODECS)
    # One C-level call fetches every field; only non-trivial encoders run per field.
    getter = operator.attrgetter(*names)
    cls._GETTER = staticmethod(getter if len(names) > 1 else _as_tuple(getter))
    cls._ENCODERS = tuple((i, c["encode"]) for i, c in enumerate(cls.CODECS) if c["encode"] is not _ident)
    _FROM_WIRE[cls] = _fast_decoder(cls)
    cls.CODE = code
    if code >= 0:
        if code in REGISTRY:
            raise TypeError(f"message code {code} used twice")
        REGISTRY[code] = cls


def _as_tuple(get_one: Callable[[Any], Any]) -> Callable[[Any], tuple]:
    """(attrgetter of one name returns the value, not a 1-tuple)"""
    return lambda o: (get_one(o),)


def encode(msg: Message) -> list:
    return [msg.CODE, *msg.to_wire()]


def decode(v: Any) -> Message:
    if type(v) is not list or not v:
        raise WireError(f"a message must be a non-empty array, got {type(v).__name__}")
    cls = REGISTRY.get(v[0]) if type(v[0]) is int else None
    if cls is None:
        raise WireError(f"unknown message type code {v[0]!r}")
    return _FROM_WIRE[cls](v[1:])


def pack(msg: Message) -> bytes:
    return msgpack.packb(encode(msg), use_bin_type=True)


def unpack(b: bytes) -> Message:
    try:
        v = msgpack.unpackb(b, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several unrelated types
        raise WireError(f"undecodable msgpack: {e}") from None
    return decode(v)
