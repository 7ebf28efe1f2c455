"""Declaring records, reading their fields, and checking one item against a record."""

from __future__ import annotations

import dataclasses
import pickle
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

import feedline as fl
from feedline.records import make_record, record_from_schema

HERE = Path(__file__)


def declared_at(marker: str) -> str:
    """``file:line:column`` of the line of this file that carries the comment ``# <marker>``,
    the column that of its first character (the field's name); ``file:line`` on Python 3.10,
    which gives no columns."""
    for number, text in enumerate(HERE.read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"# <{marker}>"):
            if sys.version_info < (3, 11):
                return f"{HERE.name}:{number}"
            return f"{HERE.name}:{number}:{len(text) - len(text.lstrip()) + 1}"
    raise AssertionError(f"no line is marked <{marker}>")


class Digit(fl.Record, dims={"D": 64, "C": 10}):
    """One labelled image."""

    img = fl.field("D", "float32", doc="pixels")  # <img>
    label = fl.field((), "int64", domain=fl.Index("C"))  # <label>


class Patch(fl.Record, dims={"H": 2}):
    grid = fl.field(("H", 3), "float64")
    flags = fl.field(4, "bool")


class Scalar(fl.Record):
    value = fl.field((), "float32")


class Vector(fl.Record):
    value = fl.field(3, "int32")


def record(body: dict, dims: dict | None = None, bases: tuple = (fl.Record,), name: str = "R"):
    """Create a record class from a namespace (for names a class statement cannot spell)."""
    return types.new_class(name, bases, {"dims": dims} if dims else {}, lambda ns: ns.update(body))


def image(n: int = 64, value: float = 0.5) -> np.ndarray:
    return np.full(n, value, dtype=np.float64)


# -- declaring ----------------------------------------------------------------------------------


def test_fields_keep_their_declaration_order_shape_dtype_domain_and_doc():
    assert list(Digit.fields) == ["img", "label"]
    img, label = Digit.fields.values()
    assert isinstance(img, fl.Field)
    assert (img.name, img.shape, img.dtype, img.domain, img.doc, img.dims) == (
        "img",
        (64,),
        np.dtype("float32"),
        None,
        "pixels",
        ("D",),
    )
    assert (label.name, label.shape, label.dtype, label.domain, label.doc, label.dims) == (
        "label",
        (),
        np.dtype("int64"),
        fl.Index("C"),
        None,
        (),
    )


def test_a_field_knows_the_file_and_line_that_declared_it():
    assert Digit.img.where == declared_at("img")
    assert Digit.label.where == declared_at("label")


needs_columns = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="Python 3.10 gives no columns"
)


def column_of(marker: str, text: str) -> str:
    """``file:line:column`` of ``text`` on the line of this file marked ``# <marker>``."""
    for number, line in enumerate(HERE.read_text().splitlines(), start=1):
        if line.rstrip().endswith(f"# <{marker}>"):
            return f"{HERE.name}:{number}:{line.index(text) + 1}"
    raise AssertionError(f"no line is marked <{marker}>")


@needs_columns
def test_a_field_is_located_at_its_name_as_shapescript_does():
    assert Digit.img.where == f"{HERE.name}:{declared_at('img').split(':')[1]}:5"
    assert Digit.label.where.endswith(":5")


@needs_columns
def test_a_field_declared_over_several_lines_is_located_at_its_name():
    class Wide(fl.Record):
        a: object = fl.field(  # <wide>
            (), "int64"
        )

    assert Wide.a.where == column_of("wide", "a: object")


@needs_columns
def test_a_field_not_assigned_to_a_name_is_located_at_its_call():
    spec = {"ü": 0, "a": fl.field((), "int64")}  # <in-a-dict>
    assert spec["a"].where == column_of("in-a-dict", "fl.field")  # counted in characters
    holder = types.SimpleNamespace()
    holder.b = fl.field((), "int64")  # <attribute>
    assert holder.b.where == column_of("attribute", "fl.field")
    R = record({"a": spec["a"]})
    assert R.a.where == column_of("in-a-dict", "fl.field")


@needs_columns
def test_a_field_without_source_text_is_located_by_the_code_alone():
    namespace: dict = {"fl": fl}
    exec(
        compile("class R(fl.Record):\n    x = fl.field((), 'int64')\n", "<made>", "exec"), namespace
    )
    assert namespace["R"].x.where == "<made>:2:5"


def test_without_columns_a_field_is_located_at_its_line():
    import subprocess

    code = (
        "import feedline as fl\n"
        "class R(fl.Record):\n"
        "    x = fl.field((), 'int64')\n"
        "print(R.x.where)\n"
    )
    out = subprocess.run(
        [sys.executable, "-X", "no_debug_ranges", "-c", code],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "<string>:3"


def test_the_record_keeps_its_dims_and_docstring():
    assert dict(Digit.dims) == {"D": 64, "C": 10}
    assert Digit.__doc__ == "One labelled image."


def test_a_field_attribute_is_the_field_in_the_mapping():
    assert Digit.img is Digit.fields["img"]
    assert Digit.label is Digit.fields["label"]


def test_fields_and_dims_cannot_be_changed_after_creation():
    with pytest.raises(TypeError):
        Digit.fields["x"] = Digit.img  # type: ignore[index]
    with pytest.raises(TypeError):
        Digit.dims["D"] = 3  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Digit.img.shape = (3,)  # type: ignore[misc]


def test_a_shape_mixes_ints_and_dims_and_reads_in_shapescript_notation():
    assert Patch.grid.shape == (2, 3)
    assert Patch.grid.dims == ("H", 3)
    assert Patch.grid.declared == "[H 3]"
    assert Patch.flags.shape == (4,)
    assert Digit.label.declared == "[]"


def test_a_list_shape_reads_like_a_tuple():
    R = record({"a": fl.field(["D", 2], "float32")}, dims={"D": 5})
    assert R.a.shape == (5, 2)


def test_dtypes_are_given_as_anything_numpy_reads():
    R = record(
        {
            "a": fl.field((), np.float16),
            "b": fl.field((), "u1"),
            "c": fl.field((), bool),
            "d": fl.field((), "complex64"),
        }
    )
    assert [f.dtype for f in R.fields.values()] == [
        np.dtype("float16"),
        np.dtype("uint8"),
        np.dtype("bool"),
        np.dtype("complex64"),
    ]


def test_methods_properties_and_classmethods_may_live_in_the_body():
    class WithMethods(fl.Record, dims={"D": 2}):
        a = fl.field("D", "float32")
        _private = ("cache", 1)

        def method(self):
            return 1

        @property
        def prop(self):
            return 2

        @classmethod
        def make(cls):
            return 3

        @staticmethod
        def helper():
            return 4

        class Nested:
            pass

    assert list(WithMethods.fields) == ["a"]
    assert WithMethods.make() == 3
    assert WithMethods.helper() == 4


def test_an_annotated_field_is_a_field():
    class Annotated(fl.Record):
        a: fl.Field = fl.field((), "int64")

    assert list(Annotated.fields) == ["a"]


def test_a_subclass_adds_its_fields_after_its_parents():
    class Labelled(Digit, dims={"K": 3}):
        weight = fl.field("K", "float32")

    assert list(Labelled.fields) == ["img", "label", "weight"]
    assert dict(Labelled.dims) == {"D": 64, "C": 10, "K": 3}
    assert list(Digit.fields) == ["img", "label"]
    out = Labelled.check((image(), 3, [1, 2, 3]))
    assert out["weight"].dtype == np.float32


def test_a_subclass_may_use_the_parents_dims():
    class Twice(Digit):
        again = fl.field("D", "float64")

    assert Twice.again.shape == (64,)


def test_a_subclass_that_changes_an_inherited_dim_keeps_its_fields_consistent():
    # Either the redeclaration is refused, or the inherited fields follow the new dim.
    class Parent(fl.Record, dims={"D": 2}):
        a = fl.field("D", "float32")

    try:

        class Child(Parent, dims={"D": 3}):
            b = fl.field("D", "float32")

    except fl.RecordError:
        return
    assert Child.a.shape == (Child.dims["D"],)


# -- declaration errors ---------------------------------------------------------------------------


def declaration_error(body: dict, dims: dict | None = None, bases: tuple = (fl.Record,)) -> str:
    with pytest.raises(fl.RecordError) as info:
        record(body, dims, bases)
    assert isinstance(info.value, TypeError)
    return str(info.value)


def test_a_shape_with_an_unknown_dim_is_a_record_error():
    msg = declaration_error({"a": fl.field("N", "float32")}, dims={"D": 3})
    assert "`N`" in msg and "`a`" in msg


def test_an_index_over_an_unknown_dim_is_a_record_error():
    assert "`N`" in declaration_error({"a": fl.field((), "int64", domain=fl.Index("N"))})


def test_a_field_error_names_where_the_field_was_declared():
    spec = fl.field("N", "float32")  # <bad-dim>
    msg = declaration_error({"a": spec})
    assert msg.startswith(declared_at("bad-dim") + ": ")


@pytest.mark.parametrize("name", ["class", "def", "lambda", "None", "import"])
def test_a_field_named_with_a_python_keyword_is_a_record_error(name):
    assert f"`{name}`" in declaration_error({name: fl.field((), "int64")})


def test_a_keyword_field_in_a_class_statement_is_a_record_error():
    with pytest.raises(fl.RecordError):

        class Keyword(fl.Record):
            locals()["class"] = fl.field((), "int64")


@pytest.mark.parametrize("name", ["_a", "_"])
def test_a_field_name_starting_with_an_underscore_is_a_record_error(name):
    declaration_error({name: fl.field((), "int64")})


def test_a_mangled_private_field_is_a_record_error():
    with pytest.raises(fl.RecordError):

        class Mangled(fl.Record):
            __hidden = fl.field((), "int64")


@pytest.mark.parametrize("dtype", ["float33", "nonsense", None])  # None: not float64
def test_an_unknown_dtype_is_a_record_error(dtype):
    assert repr(dtype) in declaration_error({"a": fl.field((), dtype)})


@pytest.mark.parametrize("dtype", ["U3", "S4", object, "datetime64[s]", "V8"])
def test_a_dtype_that_is_not_a_number_or_bool_is_a_record_error(dtype):
    declaration_error({"a": fl.field((), dtype)})


@pytest.mark.parametrize("value", [3, ("D", "float32"), "float32", [1, 2], None, 2.5])
def test_a_plain_data_attribute_is_a_record_error(value):
    msg = declaration_error({"a": fl.field((), "int64"), "x": value}, dims={"D": 2})
    assert "`x`" in msg


def test_a_plain_data_attribute_in_a_class_statement_is_a_record_error():
    with pytest.raises(fl.RecordError):

        class Plain(fl.Record, dims={"D": 2}):
            img = fl.field("D", "float32")
            x = ("D", "float32")


def test_an_annotation_without_a_field_is_a_record_error():
    with pytest.raises(fl.RecordError, match="`x`"):

        class OnlyAnnotated(fl.Record):
            a = fl.field((), "int64")
            x: int


def test_the_same_field_name_twice_in_one_body_is_a_record_error():
    with pytest.raises(fl.RecordError, match="`a` twice"):

        class Twice(fl.Record):
            a = fl.field((), "int64")
            a = fl.field((), "float32")


def test_a_subclass_redeclaring_an_inherited_field_is_a_record_error():
    with pytest.raises(fl.RecordError, match="`label`"):

        class Relabelled(Digit):
            label = fl.field((), "int32")


@pytest.mark.parametrize("size", [-1, -64, True, 2.0, "3"])
def test_a_dim_that_is_not_a_non_negative_int_is_a_record_error(size):
    # None is not among them since contract 2: it declares a dim that varies per example
    message = declaration_error({"a": fl.field("D", "float32")}, dims={"D": size})
    assert "or None" in message


@pytest.mark.parametrize("name", ["1D", "a b", ""])
def test_a_dim_name_that_is_not_an_identifier_is_a_record_error(name):
    declaration_error({"a": fl.field((), "float32")}, dims={name: 2})


@pytest.mark.parametrize("shape", [-1, (2, -3), 2.0, True, (1.5,), {"D": 1}, None])
def test_a_shape_that_is_not_ints_and_dims_is_a_record_error(shape):
    declaration_error({"a": fl.field(shape, "float32")})


def test_a_zero_dim_is_allowed():
    R = record({"a": fl.field("D", "float32")}, dims={"D": 0})
    assert R.a.shape == (0,)
    assert R.check(np.zeros(0))["a"].shape == (0,)


# -- rebuilding from a schema (what files store) ---------------------------------------------------


def schema_error(change) -> str:
    """The RecordError that rebuilding Digit's schema, changed by ``change``, raises."""
    schema = Digit.schema()
    change(schema)
    with pytest.raises(fl.RecordError) as info:
        record_from_schema(schema, "digit.json")
    assert str(info.value).startswith("digit.json")
    return str(info.value)


def test_a_schema_rebuilds_the_record_it_came_from():
    rebuilt = record_from_schema(Digit.schema(), "digit.json")
    assert rebuilt.schema() == Digit.schema() and rebuilt.same_schema(Digit)


@pytest.mark.parametrize(
    ("name", "class_name"),
    [
        ("mnist-train", "mnist_train"),
        ("my data.v2", "my_data_v2"),
        ("3d", "_3d"),
        ("", "_"),
        ("Arrays", "Arrays"),
    ],
)
def test_a_run_time_record_is_named_by_an_identifier_and_keeps_the_name_in_where(name, class_name):
    R = make_record(name, {"x": ((2,), "float32")})
    assert R.__name__ == class_name and R.fields["x"].where == f"<{name}>"


def test_a_run_time_record_named_by_any_string_survives_pickling():
    R = make_record("mnist-train", {"x": ((2,), "float32"), "y": ((), "int64")}, doc="Rows.")
    again = pickle.loads(pickle.dumps(R))
    assert again.__name__ == "mnist_train" and again.__doc__ == "Rows."
    assert again.schema() == R.schema() and again.same_schema(R)
    assert again.check({"x": [1, 2], "y": 3})["x"].tolist() == [1.0, 2.0]


def test_a_pickled_run_time_record_keeps_where_its_fields_came_from():
    R = make_record("m", {"x": ((2,), "float32"), "y": ((), "int64")})
    from_file = record_from_schema(Digit.schema(), "digits.flr")
    for rec in (R, from_file):
        again = pickle.loads(pickle.dumps(rec))
        assert {k: f.where for k, f in again.fields.items()} == {
            k: f.where for k, f in rec.fields.items()
        }
    with pytest.raises(fl.ShapeError, match=r"^<m>: m field `x` of item 0 should be"):
        pickle.loads(pickle.dumps(R)).check({"x": [1], "y": 0}, 0)


def test_pickling_a_run_time_record_does_not_change_its_schema():
    R = make_record("m", {"x": ((2,), "float32")})
    assert "where" not in str(pickle.loads(pickle.dumps(R)).schema())
    assert pickle.loads(pickle.dumps(R)).schema() == R.schema()


def shift(example, rng):
    """An augmentation (importable, so that loader workers can run it)."""
    return {"x": example["x"] + rng.integers(0, 100), "y": example["y"]}


def test_a_mapped_dataset_from_arrays_with_a_dashed_name_loads_in_workers():
    ds = fl.Dataset.from_arrays(name="mnist-train", x=np.zeros((8, 2)), y=np.arange(8))
    assert ds.name == "mnist-train"
    mapped = ds.map(shift, seed=1)
    want = [(b.y.tolist(), b.x.tolist()) for b in mapped.batches(4)]
    with mapped.batches(4, workers=2) as loader:
        got = [(b.y.tolist(), b.x.tolist()) for b in loader]
    assert got == want and sorted(y for ys, _ in got for y in ys) == list(range(8))


def test_a_schema_without_stored_shapes_rebuilds_from_the_dims():
    schema = Digit.schema()
    for f in schema["fields"]:
        del f["shape"]
    assert record_from_schema(schema, "digit.json").img.shape == (64,)


@pytest.mark.parametrize(
    "dims",
    [[float("inf")], [float("nan")], [2.7], [64.0], [True], [-1], [None], [[64]], "D", None],
    ids=repr,
)
def test_schema_dims_that_are_not_names_or_ints_are_a_record_error(dims):
    # int(d) used to turn 2.7 into 2, True into 1 and Infinity into an OverflowError.
    msg = schema_error(lambda s: s["fields"][0].update(dims=dims, shape=dims))
    assert "`img`" in msg and "dims" in msg


@pytest.mark.parametrize("shape", [[63], [64, 1], [], [64.0], [True], "64", None], ids=repr)
def test_a_stored_shape_that_the_dims_do_not_resolve_to_is_a_record_error(shape):
    msg = schema_error(lambda s: s["fields"][0].update(shape=shape))
    assert "`img`" in msg and "stored shape" in msg and "[64]" in msg


@pytest.mark.parametrize(
    "name", [5, None, "_img", "__slots__", "fields", "dims", "check"], ids=repr
)
def test_a_schema_field_name_a_record_cannot_hold_is_a_record_error(name):
    assert repr(name) in schema_error(lambda s: s["fields"][0].update(name=name))


@pytest.mark.parametrize("fields", [5, "img", {"img": {}}, [5], [["img"]]], ids=repr)
def test_schema_fields_that_are_not_a_list_of_objects_are_a_record_error(fields):
    schema_error(lambda s: s.update(fields=fields))


def test_a_schema_field_doc_that_is_not_a_string_is_a_record_error():
    assert "doc" in schema_error(lambda s: s["fields"][0].update(doc=3))


# -- checking an item ------------------------------------------------------------------------------


def test_a_dict_item_is_checked_and_converted_to_the_field_dtypes():
    out = Digit.check({"img": image(), "label": 3})
    assert list(out) == ["img", "label"]
    assert isinstance(out["img"], np.ndarray) and isinstance(out["label"], np.ndarray)
    assert out["img"].dtype == np.float32 and out["img"].shape == (64,)
    assert out["label"].dtype == np.int64 and out["label"].shape == ()
    assert out["label"] == 3


def test_extra_keys_of_a_dict_item_are_ignored():
    out = Digit.check({"label": 1, "img": image(), "path": "a.png", 7: None})
    assert list(out) == ["img", "label"]


def test_any_mapping_is_a_dict_item():
    out = Digit.check(types.MappingProxyType({"img": image(), "label": 1}))
    assert out["label"] == 1


def test_a_dict_item_missing_a_field_is_a_shape_error_naming_the_field():
    with pytest.raises(fl.ShapeError) as info:
        Digit.check({"img": image(), "lable": 3}, 5)
    msg = str(info.value)
    assert msg.startswith(declared_at("label") + ": ")
    assert "`label`" in msg and "item 5" in msg and "missing" in msg


@pytest.mark.parametrize("container", [tuple, list])
def test_a_tuple_or_list_item_is_in_field_order(container):
    out = Digit.check(container([image(value=2.0), 7]))
    assert out["img"][0] == 2.0 and out["label"] == 7


@pytest.mark.parametrize("item", [(image(),), (image(), 1, 2), [], [image(), 1, "x"]])
def test_a_tuple_or_list_of_the_wrong_length_is_a_shape_error(item):
    with pytest.raises(fl.ShapeError, match=r"item 4 should have 2 fields \(img, label\)"):
        Digit.check(item, 4)


@pytest.mark.parametrize("item", [3, "img", None, np.zeros(64)])
def test_an_item_that_is_not_a_dict_or_tuple_is_a_shape_error(item):
    with pytest.raises(fl.ShapeError, match="Digit"):
        Digit.check(item, 0)


def test_a_one_field_record_takes_the_bare_value():
    assert Scalar.check(2.5)["value"] == np.float32(2.5)
    out = Vector.check([1, 2, 3])
    assert out["value"].tolist() == [1, 2, 3] and out["value"].dtype == np.int32
    assert Vector.check(np.array([4, 5, 6]))["value"].tolist() == [4, 5, 6]
    assert Vector.check((7, 8, 9))["value"].tolist() == [7, 8, 9]


def test_a_one_field_record_takes_a_one_tuple_and_a_dict():
    assert Scalar.check((2.5,))["value"] == np.float32(2.5)
    assert Vector.check((np.arange(3),))["value"].tolist() == [0, 1, 2]
    assert Scalar.check({"value": 1})["value"] == 1.0


FLOAT_OK = [3, -2, True, 1.5, np.int8(4), np.uint64(5), np.float16(0.5), np.bool_(False)]
INT_OK = [3, -2, True, np.int32(4), np.uint8(200), np.bool_(True)]
BOOL_OK = [True, False, np.bool_(True)]


@pytest.mark.parametrize("value", FLOAT_OK)
def test_a_float_field_takes_integers_floats_and_bools(value):
    out = Scalar.check(value)["value"]
    assert out.dtype == np.float32 and out == float(value)


@pytest.mark.parametrize("value", INT_OK)
def test_an_integer_field_takes_integers_and_bools(value):
    R = record({"n": fl.field((), "int64")})
    out = R.check(value)["n"]
    assert out.dtype == np.int64 and out == int(value)


@pytest.mark.parametrize("value", [1.0, 2.5, np.float32(3.0), np.array(1.0), 1 + 2j])
def test_an_integer_field_refuses_floats(value):
    R = record({"n": fl.field((), "int64")})
    with pytest.raises(fl.ShapeError, match=r"should be int64 \(integers or booleans\)"):
        R.check(value, 2)


@pytest.mark.parametrize("value", BOOL_OK)
def test_a_bool_field_takes_bools(value):
    R = record({"b": fl.field((), "bool")})
    out = R.check(value)["b"]
    assert out.dtype == np.bool_ and out == bool(value)


@pytest.mark.parametrize("value", [0, 1, 1.0, np.int8(1), np.uint8(0)])
def test_a_bool_field_refuses_numbers(value):
    R = record({"b": fl.field((), "bool")})
    with pytest.raises(fl.ShapeError, match=r"should be bool \(booleans\)"):
        R.check(value)


@pytest.mark.parametrize("value", ["1.5", None, b"x", object(), {"a": 1}])
def test_a_number_field_refuses_values_that_are_not_numbers(value):
    with pytest.raises(fl.ShapeError):
        Scalar.check((value,))


def test_a_float_field_refuses_complex_numbers():
    with pytest.raises(fl.ShapeError, match=r"\(numbers\)"):
        Scalar.check(1 + 1j)


def test_a_kind_error_names_the_field_the_item_and_the_values_dtype():
    with pytest.raises(fl.ShapeError) as info:
        Digit.check((image(), 2.0), 11)
    assert str(info.value) == (
        f"{declared_at('label')}: Digit field `label` of item 11 should be int64 "
        f"(integers or booleans), got float64 values"
    )


def test_values_are_converted_to_the_field_dtype():
    R = record({"f": fl.field(2, "float16"), "i": fl.field(2, "uint8"), "b": fl.field(2, "bool")})
    out = R.check(([1, 2], np.array([True, False]), np.array([True, True])))
    assert [a.dtype for a in out.values()] == [np.float16, np.uint8, np.bool_]
    assert out["f"].tolist() == [1.0, 2.0] and out["i"].tolist() == [1, 0]


class Half(fl.Record):
    x = fl.field((), "float16")  # <half>


@pytest.mark.parametrize("value", [70000, np.int32(-70000), 70000.0, np.uint64(2**63)])
def test_a_number_that_overflows_a_float_field_is_a_shape_error_not_inf(value):
    with pytest.raises(fl.ShapeError) as info:
        Half.check({"x": value}, 5)
    assert str(info.value) == (
        f"{declared_at('half')}: Half field `x` of item 5: "
        f"{np.asarray(value).item()!r} does not fit float16"
    )


def test_a_column_that_overflows_a_float_field_names_the_first_bad_rows_item():
    with pytest.raises(fl.ShapeError) as info:
        Half.check_columns({"x": np.array([1, 70000, -70000])}, np.array([4, 9, 2]))
    assert str(info.value) == (
        f"{declared_at('half')}: Half field `x` of item 9: 70000 does not fit float16"
    )


def test_an_infinite_value_is_not_an_overflow():
    out = Half.check_columns({"x": np.array([np.inf, -np.inf, 1.0])}, np.arange(3))
    assert out["x"].tolist() == [np.inf, -np.inf, 1.0]


class Byte(fl.Record):
    y = fl.field((), "uint8")  # <byte>


def test_a_column_that_overflows_an_integer_field_names_the_first_bad_rows_item():
    with pytest.raises(fl.ShapeError) as info:
        Byte.check_columns({"y": np.array([1, 2, 300])}, np.array([10, 11, 12]))
    assert str(info.value) == (
        f"{declared_at('byte')}: Byte field `y` of item 12: 300 does not fit uint8"
    )


def test_an_overflow_in_a_field_with_axes_names_the_row_and_its_value():
    R = record({"v": fl.field(2, "int8")})
    with pytest.raises(fl.ShapeError, match=r"`v` of item 7: -200 does not fit int8$"):
        R.check_columns({"v": np.array([[0, 1], [2, -200], [300, 0]])}, np.array([6, 7, 8]))


def test_an_overflow_in_columns_without_indices_speaks_of_an_item():
    with pytest.raises(fl.ShapeError, match=r"`y` of an item: 300 does not fit uint8$"):
        Byte.check_columns({"y": np.array([1, 300])})


def test_a_shape_error_reads_like_shapescripts():
    with pytest.raises(fl.ShapeError) as info:
        Digit.check({"img": np.zeros(63), "label": 1}, 37)
    assert str(info.value) == (
        f"{declared_at('img')}: Digit field `img` of item 37 should be [D] = (64,), got shape (63,)"
    )


def test_a_shape_error_without_an_index_speaks_of_an_item():
    with pytest.raises(fl.ShapeError, match=r"field `img` of an item should be \[D\] = \(64,\)"):
        Digit.check((np.zeros(65), 1))


@pytest.mark.parametrize(
    ("record_", "item", "got"),
    [
        (Digit, (np.zeros(63), 1), (63,)),
        (Digit, (np.zeros((1, 64)), 1), (1, 64)),
        (Digit, (np.zeros((64, 1)), 1), (64, 1)),
        (Digit, (0.5, 1), ()),
        (Digit, (image(), [1]), (1,)),
        (Digit, (image(), np.zeros((1, 1), np.int64)), (1, 1)),
        (Scalar, np.zeros(1), (1,)),
        (Vector, [1, 2], (2,)),
        (Patch, (np.zeros((3, 2)), np.zeros(4, bool)), (3, 2)),
    ],
)
def test_shapes_must_match_exactly_without_broadcasting(record_, item, got):
    with pytest.raises(fl.ShapeError, match=re.escape(f"got shape {got}")):
        record_.check(item, 0)


def test_a_ragged_value_is_a_shape_error():
    with pytest.raises(fl.ShapeError):
        Vector.check(([1, 2], [3]))


def test_torch_tensors_are_values():
    out = Digit.check({"img": torch.arange(64, dtype=torch.float64), "label": torch.tensor(4)})
    assert out["img"].dtype == np.float32 and out["img"][10] == 10.0
    assert out["label"].dtype == np.int64 and out["label"] == 4
    with pytest.raises(fl.ShapeError, match="float32 values"):
        Digit.check((image(), torch.tensor(4.0)), 1)
    with pytest.raises(fl.ShapeError, match=r"got shape \(63,\)"):
        Digit.check((torch.zeros(63), 4), 1)


def test_a_torch_tensor_that_requires_grad_is_a_value():
    out = Scalar.check(torch.tensor(1.5, requires_grad=True))
    assert out["value"] == np.float32(1.5)


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float16,
        torch.bfloat16,
    ],
)
def test_a_half_precision_torch_tensor_is_a_number_for_a_float_field(dtype):
    out = Digit.check((torch.ones(64, dtype=dtype), 1))
    assert out["img"].dtype == np.float32 and out["img"][0] == 1.0


def test_numpy_scalars_are_values():
    out = Digit.check({"img": image(), "label": np.int16(9)})
    assert out["label"] == 9 and out["label"].dtype == np.int64
    assert Scalar.check(np.float64(0.25))["value"] == np.float32(0.25)
    assert Scalar.check(np.array(0.25))["value"].shape == ()


def test_a_numpy_index_names_the_item():
    with pytest.raises(fl.ShapeError, match="item 12 "):
        Digit.check((np.zeros(3), 1), np.int64(12))


def test_converting_a_value_does_not_touch_the_item():
    img = np.arange(64, dtype=np.float64)
    item = {"img": img, "label": 1}
    out = Digit.check(item)
    out["img"][0] = 99
    assert img[0] == 0 and item["img"] is img


def test_a_record_can_be_built_programmatically_with_type():
    # Issue 14: type("Row", (fl.Record,), attrs, dims=...) raised AttributeError.
    attrs = {
        "x": fl.field("D", "float32"),
        "y": fl.field((), "int64", domain=fl.Index("C")),
        "__doc__": "A row built at run time.",
    }
    Row = type("Row", (fl.Record,), attrs, dims={"D": 3, "C": 4})
    assert list(Row.fields) == ["x", "y"]
    assert Row.fields["x"].shape == (3,)
    assert Row.__doc__ == "A row built at run time."
    checked = Row.check({"x": [1, 2, 3], "y": 2})
    assert checked["x"].dtype == np.float32
    with pytest.raises(fl.ShapeError):
        Row.check({"x": [1, 2], "y": 2})
