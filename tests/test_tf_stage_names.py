"""A stage's Python function named with the user's file:line, never AutoGraph's generated code."""

import pytest
from conftest import needs_tf

pytestmark = [needs_tf, pytest.mark.tf]


def load(row):  # as the input-bound demo's: a numpy_function of a lambda made inside the map function
    import tensorflow as tf

    return tf.numpy_function(lambda r: r + 1, [row], tf.int64)


def test_a_lambda_made_inside_a_converted_map_function_is_named_by_that_function():
    import tensorflow as tf

    from tensorgauge.hook.stage_names import describe

    facts = describe(tf.data.Dataset.range(3).map(load))
    assert facts["python"] and facts["function"] == "load", facts
    assert facts["location"].startswith("test_tf_stage_names.py:"), facts
