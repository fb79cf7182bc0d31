"""The hook's one way to wrap a function: once per feature, features layered in either order, a
staticmethod kept one, a class's own function (not an inherited one) unless asked, the original found."""

import types

from tensorgauge.hook.wrapping import innermost, original_of, wrap_once, wrapped_by


def counting(calls: list):
    def make(original):
        def wrapper(*args, **kwargs):
            calls.append(original.__name__)
            return original(*args, **kwargs)

        return wrapper

    return make


def test_a_function_is_wrapped_once_per_feature_in_either_order():
    module = types.SimpleNamespace(save=lambda: "saved")
    calls: list = []
    first = wrap_once(module, "save", counting(calls), by="phases")
    assert first is not None and module.save is first
    assert wrap_once(module, "save", counting(calls), by="phases") is None  # a second install: nothing
    second = wrap_once(module, "save", counting(calls), by="usage")  # another feature layers over it
    assert second is not None and module.save is second
    assert wrap_once(module, "save", counting(calls), by="phases") is None  # phases' wrapper is under usage's
    assert module.save() == "saved" and len(calls) == 2
    assert wrapped_by(module.save, "phases") and wrapped_by(module.save, "usage") and not wrapped_by(module.save, "x")
    assert original_of(module.save) is first and innermost(module.save)() == "saved"
    assert original_of(innermost(module.save)) is None


def test_a_class_keeps_its_staticmethod_and_only_its_own_functions_are_wrapped():
    class Base:
        def fit(self):
            return "base"

    class Dataset(Base):
        @staticmethod
        def from_tensor_slices(x):
            return [x]

    calls: list = []
    assert wrap_once(Dataset, "from_tensor_slices", counting(calls)) is not None
    assert isinstance(vars(Dataset)["from_tensor_slices"], staticmethod)
    assert Dataset.from_tensor_slices(3) == [3] and Dataset().from_tensor_slices(4) == [4] and len(calls) == 2
    assert wrap_once(Dataset, "fit", counting(calls)) is None  # inherited: wrap it where it is defined
    assert "fit" not in vars(Dataset)
    assert wrap_once(Dataset, "fit", counting(calls), inherited=True) is not None  # ... or on this class, if asked
    assert Dataset().fit() == "base" and Base().fit() == "base" and calls[-1] == "fit" and len(calls) == 3
    assert Dataset.fit.__name__ == "fit" and innermost(Dataset.fit) is Base.fit


def test_nothing_to_wrap_is_left_alone():
    owner = types.SimpleNamespace()
    assert wrap_once(owner, "missing", counting([])) is None and not hasattr(owner, "missing")
